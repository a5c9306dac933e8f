package fs

// InoCount is how many work/ paths and inode numbers the namespace keeps
// for the box name.
func (f *FS) InoCount(name string) (paths, numbers int) {
	b := f.m.Lookup(name)
	if b == nil {
		return 0, 0
	}
	v := f.viewOf(b)
	if v == nil {
		return 0, 0
	}
	return v.inos().size()
}

// DropEntry tells the kernel to drop its name rel in the box name's work/,
// with, for a directory, what it holds below it: the kernel then forgets
// the nodes no process holds.
func (f *FS) DropEntry(name, rel string) {
	b := f.m.Lookup(name)
	if b == nil {
		return
	}
	v := f.viewOf(b)
	if v == nil {
		return
	}
	dir, base := splitRel(rel)
	if n := v.findNode(dir); n != nil {
		n.NotifyEntry(base)
	}
}

// Parked is how many numbers of renamed work/ paths whose nodes the kernel
// forgot the namespace keeps for the box name.
func (f *FS) Parked(name string) int {
	b := f.m.Lookup(name)
	if b == nil {
		return 0
	}
	v := f.viewOf(b)
	if v == nil {
		return 0
	}
	t := v.inos()
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.parked)
}
