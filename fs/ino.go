package fs

import (
	"encoding/binary"
	"hash/fnv"
	"sync"

	"github.com/boxfs/boxfs/internal/pathmap"
	"github.com/boxfs/boxfs/providers"
)

// inoTable gives each work/ path an inode number that stays the same for
// the life of the mount and, for a path not renamed or recreated, across
// remounts of the same box (a hash of the box and the path): git keeps inode
// numbers in its index, and a changed number makes it re-read the file.
// A number is never given to two paths in one mount: one whose file went
// away (unlink, rename over) is retired, since the kernel may still hold it.
// The exception is a hard link: every name of one box file shares one
// number (a hash of the box and the box's inode), one inode under several
// names, as link(2) promises (git clone of a local repository checks that
// the link it made has its source's inode number). Every operation costs
// the depth of the path (and a removed or renamed directory the size of
// what is below it), not the number of paths known.
type inoTable struct {
	seed string

	mu     sync.Mutex
	byPath *pathmap.Map[uint64]
	used   map[uint64]bool
	// byBox is the number of each box inode with several names; names
	// counts the paths holding each such number, so that the number of a
	// box inode whose names are all gone (the box may reuse the inode for
	// another file) is not handed to a new file.
	byBox map[boxIno]uint64
	names map[uint64]*linkNames
}

// linkNames is how many paths hold the number of a box inode.
type linkNames struct {
	key boxIno
	n   int
}

// boxIno names one file in the box.
type boxIno struct{ dev, ino uint64 }

func newInoTable(seed string) *inoTable {
	return &inoTable{seed: seed, byPath: pathmap.New[uint64](), used: map[uint64]bool{},
		byBox: map[boxIno]uint64{}, names: map[uint64]*linkNames{}}
}

func (t *inoTable) hash(parts ...[]byte) uint64 {
	h := fnv.New64a()
	h.Write([]byte(t.seed))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write(p)
	}
	return h.Sum64()
}

// fresh returns an unused number near h. t.mu held.
func (t *inoTable) freshLocked(h uint64) uint64 {
	ino := h &^ (1 << 63) // go-fuse hands out 2^63 and up itself
	for ino <= 1 || t.used[ino] {
		ino = (ino + 0x9e3779b97f4a7c15) &^ (1 << 63)
	}
	t.used[ino] = true
	return ino
}

// get returns rel's number, giving it one on first use.
func (t *inoTable) get(rel string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ino, ok := t.byPath.Get(rel); ok {
		return ino
	}
	ino := t.freshLocked(t.hash([]byte(rel)))
	t.byPath.Set(rel, ino)
	return ino
}

// linkedKey is fi's box inode when fi is a file with several names.
func linkedKey(fi providers.FileInfo) (boxIno, bool) {
	if fi.Ino == 0 || fi.Nlink < 2 || fi.IsDir() {
		return boxIno{}, false
	}
	return boxIno{fi.Dev, fi.Ino}, true
}

// getFile returns the number of rel, whose box file fi describes: for a
// name of a hard link, the number all its names share.
func (t *inoTable) getFile(rel string, fi providers.FileInfo) uint64 {
	k, linked := linkedKey(fi)
	if !linked {
		return t.get(rel)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, have := t.byPath.Get(rel)
	ino, ok := t.byBox[k]
	switch {
	case ok && have && cur == ino:
		return ino
	case !ok && have:
		// The first name seen keeps its number; the others join it.
		t.byBox[k] = cur
		t.names[cur] = &linkNames{key: k, n: 1}
		return cur
	case !ok:
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:8], k.dev)
		binary.LittleEndian.PutUint64(b[8:], k.ino)
		ino = t.freshLocked(t.hash([]byte("ino"), b[:]))
		t.byBox[k] = ino
		t.names[ino] = &linkNames{key: k}
	}
	if have {
		t.dropLocked(cur)
	}
	t.byPath.Set(rel, ino)
	t.names[ino].n++
	return ino
}

// shared reports whether ino is the number of a box inode with several
// names: one go-fuse inode, which the kernel may reach by any of them.
func (t *inoTable) shared(ino uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.names[ino]
	return ok
}

// dropLocked notes that a path no longer holds ino. t.mu held.
func (t *inoTable) dropLocked(ino uint64) {
	ln, ok := t.names[ino]
	if !ok {
		return
	}
	if ln.n--; ln.n > 0 {
		return
	}
	delete(t.names, ino)
	if t.byBox[ln.key] == ino {
		delete(t.byBox, ln.key)
	}
}

// remove retires rel's number, and those below it.
func (t *inoTable) remove(rel string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(rel)
}

func (t *inoTable) removeLocked(rel string) {
	for _, p := range append(t.byPath.Under(rel), rel) {
		if ino, ok := t.byPath.Get(p); ok {
			t.byPath.Delete(p)
			t.dropLocked(ino)
		}
	}
}

// rename moves old's number (and those below it) to new, retiring new's.
func (t *inoTable) rename(oldrel, newrel string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(newrel)
	moved := map[string]uint64{}
	for _, p := range append(t.byPath.Under(oldrel), oldrel) {
		if ino, ok := t.byPath.Get(p); ok {
			moved[newrel+p[len(oldrel):]] = ino
			t.byPath.Delete(p)
		}
	}
	for k, ino := range moved {
		t.byPath.Set(k, ino)
	}
}

// share gives newrel oldrel's number: a hard link made here, whose box
// file fi describes.
func (t *inoTable) share(oldrel, newrel string, fi providers.FileInfo) {
	ino := t.get(oldrel)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(newrel)
	t.byPath.Set(newrel, ino)
	if k, ok := linkedKey(fi); ok {
		ln := t.names[ino]
		if ln == nil {
			ln = &linkNames{key: k, n: 1} // oldrel's
			t.names[ino] = ln
		}
		if old, ok := t.byBox[k]; ok && old != ino {
			delete(t.names, old) // a number the box's inode had before: its names keep it
		}
		t.byBox[k] = ino
		ln.key = k
		ln.n++
	}
}
