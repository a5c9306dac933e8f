package fs

import "testing"

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
	a.share("f", "g")
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
