// Package pathmap keeps values by slash-separated relative path, so that
// what lies under a path is found without a scan of every path kept.
package pathmap

import "strings"

// Map holds values by path ("" is the root; "a/b" is b in a). Get and Set
// cost one map access; Set and Delete of a new or last path also walk its
// components. Under and DeleteUnder cost the size of the subtree, not of
// the map. The zero Map is not usable: make one with New.
type Map[V any] struct {
	m    map[string]V
	root node
}

// node is one path component in the index of keys: how many keys its
// subtree holds (itself included), and its children by name.
type node struct {
	kids map[string]*node
	n    int
	key  bool
}

// New returns an empty Map.
func New[V any]() *Map[V] {
	return &Map[V]{m: map[string]V{}}
}

// Len is the number of paths kept.
func (m *Map[V]) Len() int { return len(m.m) }

// Get returns the value kept for p.
func (m *Map[V]) Get(p string) (V, bool) {
	v, ok := m.m[p]
	return v, ok
}

// Has reports whether p is kept.
func (m *Map[V]) Has(p string) bool {
	_, ok := m.m[p]
	return ok
}

// Set keeps v for p.
func (m *Map[V]) Set(p string, v V) {
	if _, ok := m.m[p]; !ok {
		m.index(p)
	}
	m.m[p] = v
}

// index adds p to the tree of keys.
func (m *Map[V]) index(p string) {
	n := &m.root
	n.n++
	for rest := p; rest != ""; {
		var seg string
		seg, rest = first(rest)
		c := n.kids[seg]
		if c == nil {
			if n.kids == nil {
				n.kids = map[string]*node{}
			}
			c = &node{}
			n.kids[seg] = c
		}
		c.n++
		n = c
	}
	n.key = true
}

// first splits the first component off a path.
func first(p string) (seg, rest string) {
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return p, ""
}

// Delete drops p (not what is under it) and reports whether it was kept.
func (m *Map[V]) Delete(p string) bool {
	if _, ok := m.m[p]; !ok {
		return false
	}
	delete(m.m, p)
	n := &m.root
	n.n--
	for rest := p; rest != ""; {
		var seg string
		seg, rest = first(rest)
		c := n.kids[seg]
		c.n--
		if c.n == 0 {
			delete(n.kids, seg)
			return true
		}
		n = c
	}
	n.key = false
	return true
}

// find returns the node of p, or nil when nothing is kept at or under p.
func (m *Map[V]) find(p string) *node {
	n := &m.root
	for rest := p; rest != "" && n != nil; {
		var seg string
		seg, rest = first(rest)
		n = n.kids[seg]
	}
	return n
}

// Under returns the paths kept strictly under p (every path but "" when p
// is ""), in no particular order.
func (m *Map[V]) Under(p string) []string {
	n := m.find(p)
	if n == nil {
		return nil
	}
	var out []string
	var walk func(n *node, prefix string)
	walk = func(n *node, prefix string) {
		for name, c := range n.kids {
			q := name
			if prefix != "" {
				q = prefix + "/" + name
			}
			if c.key {
				out = append(out, q)
			}
			walk(c, q)
		}
	}
	walk(n, p)
	return out
}

// Children calls fn with the name of each path kept directly under p (a
// path of p's subtree that is kept only deeper is left out). It costs the
// number of p's children.
func (m *Map[V]) Children(p string, fn func(name string)) {
	n := m.find(p)
	if n == nil {
		return
	}
	for name, c := range n.kids {
		if c.key {
			fn(name)
		}
	}
}

// HasUnder reports whether any path is kept strictly under p.
func (m *Map[V]) HasUnder(p string) bool {
	n := m.find(p)
	if n == nil {
		return false
	}
	own := 0
	if n.key {
		own = 1
	}
	return n.n > own
}

// DeleteUnder drops every path kept strictly under p and returns them.
func (m *Map[V]) DeleteUnder(p string) []string {
	under := m.Under(p)
	for _, q := range under {
		m.Delete(q)
	}
	return under
}

// Range calls fn for every path kept, in no particular order, until fn
// returns false. fn must not change m.
func (m *Map[V]) Range(fn func(p string, v V) bool) {
	for p, v := range m.m {
		if !fn(p, v) {
			return
		}
	}
}
