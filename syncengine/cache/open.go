package cache

// OpenFiles returns the paths of the files that have opens, sorted: what a
// caller that is about to take the box away (a suspend) would cut off.
func (c *Cache) OpenFiles() []string {
	c.mu.Lock()
	var fs []*file
	c.files.Range(func(_ string, f *file) bool {
		fs = append(fs, f)
		return true
	})
	c.mu.Unlock()
	var out []string
	for _, f := range fs {
		if f.opens() > 0 {
			out = append(out, f.path())
		}
	}
	sortStrings(out)
	return out
}
