package fs

import (
	"hash/fnv"
	"strings"
	"sync"
)

// inoTable gives each work/ path an inode number that stays the same for
// the life of the mount and, for a path not renamed or recreated, across
// remounts of the same box (a hash of the box and the path): git keeps inode
// numbers in its index, and a changed number makes it re-read the file.
// A number is never given to two paths in one mount: one whose file went
// away (unlink, rename over) is retired, since the kernel may still hold it.
// The exception is a hard link made through the mount: the new name shares
// the old one's number, one inode under two names, as link(2) promises
// (git clone of a local repository checks that the link it made has its
// source's inode number).
type inoTable struct {
	seed string

	mu     sync.Mutex
	byPath map[string]uint64
	used   map[uint64]bool
}

func newInoTable(seed string) *inoTable {
	return &inoTable{seed: seed, byPath: map[string]uint64{}, used: map[uint64]bool{}}
}

func (t *inoTable) hash(rel string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(t.seed))
	h.Write([]byte{0})
	h.Write([]byte(rel))
	return h.Sum64()
}

// get returns rel's number, giving it one on first use.
func (t *inoTable) get(rel string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ino, ok := t.byPath[rel]; ok {
		return ino
	}
	ino := t.hash(rel) &^ (1 << 63) // go-fuse hands out 2^63 and up itself
	for ino <= 1 || t.used[ino] {
		ino = (ino + 0x9e3779b97f4a7c15) &^ (1 << 63)
	}
	t.byPath[rel] = ino
	t.used[ino] = true
	return ino
}

// remove retires rel's number, and those below it.
func (t *inoTable) remove(rel string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(rel)
}

func (t *inoTable) removeLocked(rel string) {
	delete(t.byPath, rel)
	prefix := rel + "/"
	for k := range t.byPath {
		if strings.HasPrefix(k, prefix) {
			delete(t.byPath, k)
		}
	}
}

// rename moves old's number (and those below it) to new, retiring new's.
func (t *inoTable) rename(oldrel, newrel string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(newrel)
	prefix := oldrel + "/"
	moved := map[string]uint64{}
	for k, ino := range t.byPath {
		switch {
		case k == oldrel:
			moved[newrel] = ino
			delete(t.byPath, k)
		case strings.HasPrefix(k, prefix):
			moved[newrel+"/"+k[len(prefix):]] = ino
			delete(t.byPath, k)
		}
	}
	for k, ino := range moved {
		t.byPath[k] = ino
	}
}

// share gives newrel oldrel's number: a hard link made here.
func (t *inoTable) share(oldrel, newrel string) {
	ino := t.get(oldrel)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(newrel)
	t.byPath[newrel] = ino
}
