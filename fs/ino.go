package fs

import (
	"encoding/binary"
	"hash/fnv"
	"runtime/debug"
	"sync"

	"github.com/boxfs/boxfs/internal/pathmap"
	"github.com/boxfs/boxfs/providers"
)

// inoTable gives each work/ path an inode number that stays the same for
// the life of the mount and, for a path not renamed or recreated, across
// remounts of the same box (a hash of the box and the path): git keeps inode
// numbers in its index, and a changed number makes it re-read the file.
// A number is never given to two paths the kernel may hold at once: one
// whose file went away (unlink, rename over) is retired while the kernel
// may still hold its node. The exception is a hard link: every name of one
// box file shares one number (a hash of the box and the box's inode), one
// inode under several names, as link(2) promises (git clone of a local
// repository checks that the link it made has its source's inode number).
//
// The table holds what the kernel holds: a path is kept from the lookup
// that made its node until the kernel forgets that node (forget), which
// also frees a retired number. A path looked up again after that is
// hashed again and gets its number back, unless the hash was taken when it
// was first numbered (then it gets the next free one, as it would on a
// remount). A renamed file's number is not its path's hash: forgetting its
// node (a watch's report drops the kernel's name of a file, and the kernel
// then forgets it) would give it another number at its next lookup, while
// a disk keeps a file's number as long as the file lives (a program that
// kept it, git's index, sees another file). So that number stays with
// the path (parked) until the path is removed, renamed over or made anew,
// up to maxParked of them, the oldest given up first. A directory listing
// numbers its entries without keeping them (peekFile): the kernel makes no
// node for them. So the table's size follows the kernel's inode cache and
// the renamed files it forgot, not every path ever listed.
//
// Every operation costs the depth of the path (and a removed or renamed
// directory the size of what is below it), not the number of paths known.
type inoTable struct {
	seed string

	mu     sync.Mutex
	byPath *pathmap.Map[uint64]
	// used holds every number the kernel may hold, with the paths that
	// hold it now: none for a retired number.
	used map[uint64][]string
	// byBox is the number of each box inode with several names; names
	// counts the paths holding each such number, so that the number of a
	// box inode whose names are all gone (the box may reuse the inode for
	// another file) is not handed to a new file.
	byBox map[boxIno]uint64
	names map[uint64]*linkNames
	// parked holds the numbers of renamed paths whose nodes the kernel
	// forgot (used still holds each with its one path), and parkOrder
	// them oldest first, with numbers since taken back left in it.
	parked    map[uint64]struct{}
	parkOrder []uint64
	// moved holds the numbers a rename gave another path.
	moved map[uint64]struct{}
	// gens is the generation of each number used: go-fuse takes two
	// lookups with one number and generation to be one node (the names of
	// a hard link), so a number handed out again gets a new generation and
	// never joins a node the kernel may still hold of the file that had it
	// (go-fuse drops a node before it tells us, so a lookup racing the
	// forget can hold a number the table has freed).
	gens    map[uint64]uint64
	lastGen uint64
	// high is the most numbers used since the maps were last built: a Go
	// map keeps its buckets when its entries go, so forget builds them
	// again once they hold a quarter of that.
	high int
}

// maxParked is the most numbers of forgotten renamed paths kept: at ~100
// bytes each, a few MiB for a tree's worth of git's renamed objects.
var maxParked = 1 << 16

// compactMin is the fewest numbers used at the high mark that make forget
// build the maps again and hand the memory back, once they hold a quarter.
var compactMin = 20_000

// linkNames is how many paths hold the number of a box inode.
type linkNames struct {
	key boxIno
	n   int
}

// boxIno names one file in the box.
type boxIno struct{ dev, ino uint64 }

func newInoTable(seed string) *inoTable {
	return &inoTable{seed: seed, byPath: pathmap.New[uint64](), used: map[uint64][]string{},
		byBox: map[boxIno]uint64{}, names: map[uint64]*linkNames{},
		parked: map[uint64]struct{}{}, moved: map[uint64]struct{}{}, gens: map[uint64]uint64{}}
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

// unusedLocked returns the first unused number from h on: h itself
// unless another path holds it or it is retired. t.mu held.
func (t *inoTable) unusedLocked(h uint64) uint64 {
	ino := h &^ (1 << 63) // go-fuse hands out 2^63 and up itself
	for {
		if _, ok := t.used[ino]; ino > 1 && !ok {
			return ino
		}
		ino = (ino + 0x9e3779b97f4a7c15) &^ (1 << 63)
	}
}

// freshLocked returns an unused number near h and marks it used. t.mu held.
func (t *inoTable) freshLocked(h uint64) uint64 {
	ino := t.unusedLocked(h)
	t.used[ino] = nil
	t.lastGen++
	t.gens[ino] = t.lastGen
	t.high = max(t.high, len(t.used))
	return ino
}

// setLocked gives rel the number ino. t.mu held.
func (t *inoTable) setLocked(rel string, ino uint64) {
	t.byPath.Set(rel, ino)
	t.used[ino] = append(t.used[ino], rel)
}

// unsetLocked takes rel's number from it, leaving the number used (the
// kernel may hold it) until forget. t.mu held.
func (t *inoTable) unsetLocked(rel string) (uint64, bool) {
	ino, ok := t.byPath.Get(rel)
	if !ok {
		return 0, false
	}
	t.byPath.Delete(rel)
	paths := t.used[ino]
	for i, p := range paths {
		if p == rel {
			paths[i] = paths[len(paths)-1]
			paths[len(paths)-1] = ""
			t.used[ino] = paths[:len(paths)-1]
			break
		}
	}
	return ino, true
}

// unparkLocked notes that the kernel may hold ino again. t.mu held.
func (t *inoTable) unparkLocked(ino uint64) {
	delete(t.parked, ino)
}

// releaseLocked frees ino if it is parked, for the caller has taken it
// from its path: no node holds a parked number, so no forget frees it.
// t.mu held.
func (t *inoTable) releaseLocked(ino uint64) {
	if _, ok := t.parked[ino]; ok {
		delete(t.parked, ino)
		delete(t.moved, ino)
		delete(t.used, ino)
		delete(t.gens, ino)
	}
}

// parkLocked keeps ino, the number of rel whose node the kernel forgot,
// for rel's next lookup, giving up the oldest parked number past
// maxParked. t.mu held.
func (t *inoTable) parkLocked(ino uint64) {
	t.parked[ino] = struct{}{}
	t.parkOrder = append(t.parkOrder, ino)
	for len(t.parked) > maxParked && len(t.parkOrder) > 0 {
		old := t.parkOrder[0]
		t.parkOrder = t.parkOrder[1:]
		if _, ok := t.parked[old]; ok {
			for _, p := range t.used[old] {
				t.byPath.Delete(p)
			}
			t.releaseLocked(old)
		}
	}
	if len(t.parkOrder) > 2*len(t.parked)+1024 {
		// Mostly numbers since taken back: kept to what is parked.
		order := make([]uint64, 0, len(t.parked))
		for _, n := range t.parkOrder {
			if _, ok := t.parked[n]; ok {
				order = append(order, n)
			}
		}
		t.parkOrder = order
	}
}

// get returns rel's number, giving it one on first use.
func (t *inoTable) get(rel string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.getLocked(rel)
}

// getLocked is get. t.mu held.
func (t *inoTable) getLocked(rel string) uint64 {
	if ino, ok := t.byPath.Get(rel); ok {
		t.unparkLocked(ino)
		return ino
	}
	ino := t.freshLocked(t.hash([]byte(rel)))
	t.setLocked(rel, ino)
	return ino
}

// boxInoHash is the hash a box inode with several names is numbered by.
func (t *inoTable) boxInoHash(k boxIno) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], k.dev)
	binary.LittleEndian.PutUint64(b[8:], k.ino)
	return t.hash([]byte("ino"), b[:])
}

// peekFile returns the number getFile would give rel now, keeping
// nothing: a directory entry's number, which the kernel holds no node for.
// getFile gives the same number later unless, in between, another path
// took it (only a hash collision can) or rel changed.
func (t *inoTable) peekFile(rel string, fi providers.FileInfo) uint64 {
	k, linked := linkedKey(fi)
	t.mu.Lock()
	defer t.mu.Unlock()
	if linked {
		if ino, ok := t.byBox[k]; ok {
			return ino
		}
	}
	if ino, ok := t.byPath.Get(rel); ok {
		return ino
	}
	if linked {
		return t.unusedLocked(t.boxInoHash(k))
	}
	return t.unusedLocked(t.hash([]byte(rel)))
}

// forget drops what the table holds of ino, whose node the kernel forgot:
// the paths holding it (a later lookup numbers them again) and, for a
// box inode with several names, its entry; the number is free again.
//
// go-fuse drops a node from its tree before it calls OnForget, so a
// lookup of the same path racing the forget makes a new node: should it
// take ino from the table just before forget drops it, the path is
// numbered again by its next lookup, the same number unless its hash was
// taken when it was first numbered.
func (t *inoTable) forget(ino uint64) {
	t.mu.Lock()
	paths, ok := t.used[ino]
	if !ok {
		t.mu.Unlock()
		return
	}
	_, linked := t.names[ino]
	if _, moved := t.moved[ino]; moved && !linked && len(paths) == 1 {
		// A renamed file: its path keeps the number (see inoTable).
		t.parkLocked(ino)
		t.mu.Unlock()
		return
	}
	for _, p := range paths {
		t.byPath.Delete(p)
	}
	delete(t.used, ino)
	delete(t.moved, ino)
	delete(t.gens, ino)
	if ln, ok := t.names[ino]; ok {
		delete(t.names, ino)
		if t.byBox[ln.key] == ino {
			delete(t.byBox, ln.key)
		}
	}
	compact := t.high >= compactMin && len(t.used) <= t.high/4
	if compact {
		t.compactLocked()
	}
	t.mu.Unlock()
	if compact {
		debug.FreeOSMemory()
	}
}

// compactLocked builds the maps again at their size. t.mu held.
func (t *inoTable) compactLocked() {
	byPath := pathmap.New[uint64]()
	t.byPath.Range(func(p string, ino uint64) bool {
		byPath.Set(p, ino)
		return true
	})
	t.byPath = byPath
	used := make(map[uint64][]string, len(t.used))
	for ino, paths := range t.used {
		used[ino] = paths
	}
	t.used = used
	parked := make(map[uint64]struct{}, len(t.parked))
	for ino := range t.parked {
		parked[ino] = struct{}{}
	}
	t.parked = parked
	movedNums := make(map[uint64]struct{}, len(t.moved))
	for ino := range t.moved {
		movedNums[ino] = struct{}{}
	}
	t.moved = movedNums
	gens := make(map[uint64]uint64, len(t.gens))
	for ino, g := range t.gens {
		gens[ino] = g
	}
	t.gens = gens
	t.high = len(used)
}

// size is how many paths and numbers the table holds.
func (t *inoTable) size() (paths, numbers int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byPath.Len(), len(t.used)
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
	ino, _ := t.node(rel, fi)
	return ino
}

// node returns getFile's number with its generation: the identity of
// rel's go-fuse node.
func (t *inoTable) node(rel string, fi providers.FileInfo) (ino, gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ino = t.fileLocked(rel, fi)
	return ino, t.gens[ino]
}

// fileLocked is getFile. t.mu held.
func (t *inoTable) fileLocked(rel string, fi providers.FileInfo) uint64 {
	k, linked := linkedKey(fi)
	if !linked {
		return t.getLocked(rel)
	}
	cur, have := t.byPath.Get(rel)
	if have {
		t.unparkLocked(cur)
	}
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
		ino = t.freshLocked(t.boxInoHash(k))
		t.byBox[k] = ino
		t.names[ino] = &linkNames{key: k}
	}
	if have {
		t.unsetLocked(rel)
		t.dropLocked(cur)
		t.releaseLocked(cur)
	}
	t.setLocked(rel, ino)
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
		if ino, ok := t.unsetLocked(p); ok {
			t.dropLocked(ino)
			t.releaseLocked(ino)
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
		if ino, ok := t.unsetLocked(p); ok {
			moved[newrel+p[len(oldrel):]] = ino
		}
	}
	for k, ino := range moved {
		t.setLocked(k, ino)
		t.moved[ino] = struct{}{}
	}
}

// share gives newrel oldrel's number: a hard link made here, whose box
// file fi describes.
func (t *inoTable) share(oldrel, newrel string, fi providers.FileInfo) {
	ino := t.get(oldrel)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(newrel)
	t.setLocked(newrel, ino)
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
