package fs

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/boxfs/boxfs/providers"
)

func TestInoTable(t *testing.T) {
	a := newInoTable("docker/abc")
	x, y := a.get("src/x.go"), a.get("src/y.go")
	if x == y || x <= 1 || y <= 1 || x >= 1<<63 {
		t.Fatalf("numbers %d %d", x, y)
	}
	if a.get("src/x.go") != x {
		t.Error("a path's number changed")
	}
	// Another mount of the same box gives the same numbers; another box does not.
	if b := newInoTable("docker/abc"); b.get("src/x.go") != x {
		t.Error("number not stable across tables of one box")
	}
	if c := newInoTable("docker/def"); c.get("src/x.go") == x {
		t.Error("two boxes share a number")
	}
	// Rename keeps the moved file's number; the replaced one is retired.
	a.rename("src/x.go", "src/y.go")
	if a.get("src/y.go") != x {
		t.Error("rename lost the number")
	}
	if n := a.get("src/x.go"); n == x || n == y {
		t.Errorf("a recreated path reused a live or retired number %d", n)
	}
	// Directory rename moves what is below it.
	d := a.get("dir/sub/f")
	a.rename("dir", "moved")
	if a.get("moved/sub/f") != d {
		t.Error("directory rename lost a child's number")
	}
	// A removed path's number is never handed out again in this table.
	a.remove("moved")
	if a.get("moved/sub/f") == d {
		t.Error("a removed number came back")
	}
}

// A hard link made through the mount shares its source's number; unlinking
// one name leaves the other's.
func TestInoTableShare(t *testing.T) {
	a := newInoTable("local/x")
	f := a.get("f")
	a.get("g")
	a.share("f", "g", providers.FileInfo{})
	if a.get("g") != f {
		t.Fatal("the new name of a hard link has a number of its own")
	}
	a.remove("f")
	if a.get("g") != f {
		t.Error("unlinking one name changed the other's number")
	}
	if n := a.get("f"); n == f {
		t.Error("a recreated name got the linked file's number")
	}
}

// Names of one box file with several links share one number, whichever is
// seen first, stable across tables of the box; a name that loses its
// links keeps it, and a box inode whose names are all gone does not pass
// its number to a new file.
func TestInoTableBoxLinks(t *testing.T) {
	linked := providers.FileInfo{Dev: 7, Ino: 42, Nlink: 2}
	a := newInoTable("local/x")
	x := a.getFile("x", linked)
	assert.Equal(t, x, a.getFile("sub/y", linked), "two names of one box file")
	assert.Equal(t, x, a.get("sub/y"))
	other := a.getFile("z", providers.FileInfo{Dev: 7, Ino: 43, Nlink: 2})
	assert.NotEqual(t, x, other, "another box file")
	plain := a.getFile("p", providers.FileInfo{Dev: 7, Ino: 44, Nlink: 1})
	assert.Equal(t, a.get("p"), plain, "a file of one name is numbered by its path")

	b := newInoTable("local/x")
	assert.Equal(t, x, b.getFile("sub/y", linked), "another mount of the box, names seen in another order")
	assert.Equal(t, x, b.getFile("x", linked))

	// A name looked up before the box linked it keeps its number, and
	// the new name joins it.
	c := newInoTable("local/x")
	before := c.getFile("old", providers.FileInfo{Dev: 7, Ino: 50, Nlink: 1})
	assert.Equal(t, before, c.getFile("old", providers.FileInfo{Dev: 7, Ino: 50, Nlink: 2}))
	assert.Equal(t, before, c.getFile("new", providers.FileInfo{Dev: 7, Ino: 50, Nlink: 2}))

	a.remove("x")
	assert.Equal(t, x, a.getFile("sub/y", providers.FileInfo{Dev: 7, Ino: 42, Nlink: 1}), "the last name keeps the number")
	a.remove("sub")
	reused := a.getFile("q", linked)
	assert.NotEqual(t, x, reused, "a box inode reused after all its names went")
}

// The table holds only the paths of nodes the kernel holds: forgetting a
// node drops its paths and frees its number, and a path looked up again
// gets the number it had. A retired number stays taken until its node is
// forgotten, and a listing keeps nothing.
func TestInoTableForget(t *testing.T) {
	a := newInoTable("local/x")
	nums := map[string]uint64{}
	for _, p := range []string{"d", "d/f", "d/g", "e"} {
		nums[p] = a.get(p)
	}
	for _, p := range []string{"d/f", "d/g", "d", "e"} {
		a.forget(nums[p])
	}
	paths, numbers := a.size()
	assert.Zero(t, paths, "paths left after every node was forgotten")
	assert.Zero(t, numbers, "numbers left after every node was forgotten")
	for p, ino := range nums {
		assert.Equal(t, ino, a.get(p), "%s came back with another number", p)
	}

	// A retired number is not handed out while the kernel may hold it,
	// and is once its node is forgotten.
	f := nums["d/f"]
	a.remove("d/f")
	g := a.get("d/f")
	assert.NotEqual(t, f, g, "a recreated path got the number of the one still held")
	a.forget(f)
	a.forget(g)
	assert.Equal(t, f, a.get("d/f"), "the path's own number, once no node holds it")

	// A listing's numbers are the ones a lookup then gives, and are not kept.
	b := newInoTable("local/x")
	peeked := b.peekFile("d/f", providers.FileInfo{})
	paths, numbers = b.size()
	assert.Zero(t, paths+numbers, "a listing kept numbers")
	assert.Equal(t, peeked, b.getFile("d/f", providers.FileInfo{}))
	b.remove("d/f") // retired: the next listing of the name skips it
	assert.NotEqual(t, peeked, b.peekFile("d/f", providers.FileInfo{}))
	assert.Equal(t, b.peekFile("d/f", providers.FileInfo{}), b.get("d/f"))

}

// A renamed file keeps its number when the kernel forgets its node and
// looks it up again (as a disk keeps a file's number while it lives), and
// gives it up when its path is removed, renamed over or made anew.
func TestInoTableForgetRenamed(t *testing.T) {
	a := newInoTable("local/x")
	r := a.get("dir/r")
	m := a.get("moved/r") // the node of the file about to be replaced
	a.rename("dir", "moved")
	a.forget(m)
	a.forget(r)
	assert.Equal(t, r, a.get("moved/r"), "a renamed file came back with another number")
	assert.Equal(t, r, a.peekFile("moved/r", providers.FileInfo{}))

	// Forgotten again and then removed: the number is free, and the path
	// is its own again.
	a.forget(r)
	a.remove("moved/r")
	paths, numbers := a.size()
	assert.Zero(t, paths+numbers, "a removed parked path kept its number")
	own := a.get("moved/r")
	assert.NotEqual(t, r, own)
	assert.Equal(t, a.hash([]byte("moved/r"))&^(1<<63), own, "a removed renamed path did not get its own number back")

	// Renamed over: the parked number goes. Found to be a name of a hard
	// link: the link takes it (the first name seen keeps its number).
	b := newInoTable("local/x")
	s := b.get("s")
	b.rename("s", "t")
	b.forget(s)
	b.rename("u", "t")
	_, numbers = b.size()
	assert.Zero(t, numbers, "a renamed-over parked number was kept")
	s = b.get("s")
	b.rename("s", "t")
	b.forget(s)
	linked := providers.FileInfo{Dev: 7, Ino: 42, Nlink: 2}
	assert.Equal(t, s, b.getFile("t", linked))
	assert.Empty(t, b.parked, "a number the kernel holds again is parked")

	// At most maxParked are kept, the oldest given up first.
	defer func(n int) { maxParked = n }(maxParked)
	maxParked = 2
	c := newInoTable("local/x")
	var nums []uint64
	for _, p := range []string{"a", "b", "c"} {
		n := c.get(p)
		c.rename(p, p+"2")
		c.forget(n)
		nums = append(nums, n)
	}
	paths, numbers = c.size()
	assert.Equal(t, 2, paths)
	assert.Equal(t, 2, numbers)
	assert.NotEqual(t, nums[0], c.get("a2"), "the oldest parked number was kept past the bound")
	assert.Equal(t, nums[2], c.get("c2"))
}

// Forgetting the node of a hard link drops all its names and the box
// inode's entry; the names get the shared number back.
func TestInoTableForgetLinks(t *testing.T) {
	linked := providers.FileInfo{Dev: 7, Ino: 42, Nlink: 2}
	a := newInoTable("local/x")
	assert.Equal(t, a.peekFile("x", linked), a.getFile("x", linked))
	x := a.getFile("y", linked)
	assert.Equal(t, x, a.peekFile("z", linked), "a listed name of a known link")
	a.forget(x)
	paths, numbers := a.size()
	assert.Zero(t, paths+numbers+len(a.byBox)+len(a.names), "a forgotten link left entries")
	assert.Equal(t, x, a.getFile("y", linked))
	assert.Equal(t, x, a.getFile("x", linked))

	// A link made here shares the number; both names go with the node.
	b := newInoTable("local/x")
	f := b.get("f")
	b.share("f", "g", providers.FileInfo{})
	b.forget(f)
	paths, numbers = b.size()
	assert.Zero(t, paths+numbers, "a forgotten hard link left names")
}

// Once most numbers are forgotten, the maps are built again at their size.
func TestInoTableCompacts(t *testing.T) {
	defer func(n int) { compactMin = n }(compactMin)
	compactMin = 8
	a := newInoTable("local/x")
	var nums []uint64
	for i := 0; i < 10; i++ {
		nums = append(nums, a.get(string(rune('a'+i))))
	}
	assert.Equal(t, 10, a.high)
	for _, ino := range nums[:8] {
		a.forget(ino)
	}
	assert.Equal(t, 2, a.high, "the maps were not built again")
	assert.Equal(t, nums[9], a.get("j"), "a path kept lost its number in the rebuild")
}

// A number handed out again has a new generation: go-fuse takes one
// number and generation to be one node, and the kernel may still hold the
// node of the file that had the number (a lookup racing its forget).
func TestInoTableGenerations(t *testing.T) {
	a := newInoTable("local/x")
	none := providers.FileInfo{}
	x, g := a.node("f", none)
	y, h := a.node("f", none)
	assert.Equal(t, x, y)
	assert.Equal(t, g, h, "two lookups of one file are two nodes")
	linked := providers.FileInfo{Dev: 7, Ino: 42, Nlink: 2}
	l1, lg1 := a.node("l1", linked)
	l2, lg2 := a.node("l2", linked)
	assert.Equal(t, l1, l2)
	assert.Equal(t, lg1, lg2, "two names of a hard link are two nodes")

	a.forget(x)
	z, k := a.node("f", none)
	assert.Equal(t, x, z, "the path's own number, once no node holds it")
	assert.NotEqual(t, g, k, "a number handed out again joins the node the kernel may hold")
}
