package fs

import (
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/stretchr/testify/assert"
)

func TestIDMap(t *testing.T) {
	tests := []struct {
		name    string
		own     ownership
		box     fuse.Owner
		toHost  [][4]uint32 // box uid, gid -> shown uid, gid
		toBox   [][4]int    // asked uid, gid -> box uid, gid
		mapping bool
	}{
		{name: "root mount shows true owners", own: ownership{uid: 0, gid: 0}, box: fuse.Owner{Uid: 1000, Gid: 1000},
			toHost: [][4]uint32{{1000, 1000, 1000, 1000}, {0, 0, 0, 0}},
			toBox:  [][4]int{{0, 0, 0, 0}, {1000, -1, 1000, -1}}},
		{name: "user mount of its own box", own: ownership{uid: 1000, gid: 100}, box: fuse.Owner{Uid: 1000, Gid: 100},
			toHost: [][4]uint32{{1000, 100, 1000, 100}, {0, 0, 0, 0}},
			toBox:  [][4]int{{1000, 100, 1000, 100}}},
		{name: "user mount of a box acting as root", own: ownership{uid: 1000, gid: 100}, box: fuse.Owner{Uid: 0, Gid: 0}, mapping: true,
			toHost: [][4]uint32{{0, 0, 1000, 100}, {0, 5, 1000, 5}, {33, 33, 33, 33}},
			toBox:  [][4]int{{1000, 100, 0, 0}, {1000, -1, 0, -1}, {-1, 100, -1, 0}, {33, 33, 33, 33}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newIDMap(tt.own, tt.box)
			assert.Equal(t, tt.mapping, m.on)
			for _, c := range tt.toHost {
				u, g := m.toHost(c[0], c[1])
				assert.Equal(t, [2]uint32{c[2], c[3]}, [2]uint32{u, g}, "toHost(%d, %d)", c[0], c[1])
			}
			for _, c := range tt.toBox {
				u, g := m.toBox(c[0], c[1])
				assert.Equal(t, [2]int{c[2], c[3]}, [2]int{u, g}, "toBox(%d, %d)", c[0], c[1])
			}
		})
	}
}

func TestOwnershipFill(t *testing.T) {
	var a fuse.Attr
	ownership{uid: 7, gid: 8}.fill(&a, 0o100000, 0o600)
	assert.Equal(t, fuse.Attr{Mode: 0o100600, Owner: fuse.Owner{Uid: 7, Gid: 8}}, a)
	ownership{uid: 7, gid: 9, group: true}.fill(&a, 0o100000, 0o400)
	assert.Equal(t, fuse.Attr{Mode: 0o100440, Owner: fuse.Owner{Uid: 7, Gid: 9}}, a)
}
