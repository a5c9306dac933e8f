package cache

// WaitReadAhead waits for the read-ahead fetches started so far to be
// installed (tests).
func (c *Cache) WaitReadAhead() { c.ahead.wg.Wait() }
