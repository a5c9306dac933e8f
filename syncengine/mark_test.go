package syncengine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
	"github.com/boxfs/boxfs/syncengine"
)

// fakeBox is a box of the fake provider, its files seen as a BoxIO.
type fakeBox struct {
	p    *fake.Provider
	b    *fake.Box
	io   syncengine.BoxIO // as the host calls it: recorded
	prog syncengine.BoxIO // as a program in the box: not recorded
	dir  string           // the workspace
}

func newFakeBox(t *testing.T) *fakeBox {
	t.Helper()
	p := fake.New()
	box, err := p.Create(context.Background(), providers.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	b := box.(*fake.Box)
	return &fakeBox{p: p, b: b, io: b, prog: b.Files().(syncengine.BoxIO), dir: "/work"}
}

func (f *fakeBox) write(t *testing.T, rel, content string, perm providers.FileMode) {
	t.Helper()
	ctx := context.Background()
	full := f.dir + "/" + rel
	var parents []string
	for d := filepath.Dir(full); d != f.dir && d != "/"; d = filepath.Dir(d) {
		parents = append(parents, d)
	}
	slices.Reverse(parents)
	for _, d := range parents {
		if err := f.prog.Mkdir(ctx, d, 0o755); err != nil && providers.CodeOf(err) != providers.Exists {
			t.Fatal(err)
		}
	}
	if err := f.prog.WriteFile(ctx, full, strings.NewReader(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := f.prog.Chmod(ctx, full, perm); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeBox) read(t *testing.T, rel string) (string, providers.FileMode) {
	t.Helper()
	ctx := context.Background()
	fi, err := f.prog.Lstat(ctx, f.dir+"/"+rel)
	if err != nil {
		t.Fatalf("box %s: %v", rel, err)
	}
	r, err := f.prog.ReadFile(ctx, f.dir+"/"+rel)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var b bytes.Buffer
	b.ReadFrom(r)
	return b.String(), fi.Mode
}

func TestTakeMarkAndDiff(t *testing.T) {
	ctx := context.Background()
	f := newFakeBox(t)
	f.write(t, "a", "a", 0o644)
	f.write(t, "d/b", "b", 0o755)
	f.write(t, "d/c", "c", 0o600)
	if err := f.io.Symlink(ctx, "a", f.dir+"/l"); err != nil {
		t.Fatal(err)
	}
	m1, err := syncengine.TakeMark(ctx, f.io, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := m1.Paths(); !slices.Equal(got, []string{"a", "d", "d/b", "d/c", "l"}) {
		t.Fatalf("paths %v", got)
	}
	if e := m1.Entries["d/b"]; e.Kind != syncengine.KindFile || e.Size != 1 || e.Mode != 0o755 || e.MtimeNs == 0 {
		t.Errorf("d/b entry %+v", e)
	}
	if e := m1.Entries["l"]; e.Kind != syncengine.KindSymlink || e.Target != "a" {
		t.Errorf("l entry %+v", e)
	}
	if e := m1.Entries["d"]; e.Kind != syncengine.KindDir {
		t.Errorf("d entry %+v", e)
	}
	if !syncengine.Diff(m1, m1).Empty() {
		t.Error("a mark differs from itself")
	}

	f.write(t, "d/b", "bb", 0o755)                               // size
	if err := f.io.Chmod(ctx, f.dir+"/d/c", 0o644); err != nil { // mode
		t.Fatal(err)
	}
	if err := f.io.Remove(ctx, f.dir+"/a"); err != nil {
		t.Fatal(err)
	}
	f.write(t, "e", "e", 0o644)
	m2, err := syncengine.TakeMark(ctx, f.io, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	got := syncengine.Diff(m1, m2)
	want := syncengine.Changes{Added: []string{"e"}, Changed: []string{"d/b", "d/c"}, Removed: []string{"a"}}
	// The workspace's own entries changed too (d's mtime, if the box
	// counts an update of a file in it); compare what the test changed.
	got.Changed = slices.DeleteFunc(got.Changed, func(p string) bool { return p == "d" })
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Diff = %+v, want %+v", got, want)
	}

	// Only the mtime moved: a change, whatever the clocks say.
	m3 := syncengine.Mark{Entries: map[string]syncengine.Entry{}}
	m4 := syncengine.Mark{Entries: map[string]syncengine.Entry{}}
	m3.Entries["x"] = syncengine.Entry{Kind: syncengine.KindFile, Size: 1, Mode: 0o644, MtimeNs: 1}
	m4.Entries["x"] = syncengine.Entry{Kind: syncengine.KindFile, Size: 1, Mode: 0o644, MtimeNs: 2, SHA256: "ff"}
	if c := syncengine.Diff(m3, m4); !slices.Equal(c.Changed, []string{"x"}) {
		t.Errorf("an mtime change by 1 ns: %+v", c)
	}
	m4.Entries["x"] = syncengine.Entry{Kind: syncengine.KindFile, Size: 1, Mode: 0o644, MtimeNs: 1, SHA256: "ff"}
	if c := syncengine.Diff(m3, m4); !c.Empty() {
		t.Errorf("a hash alone is not a change: %+v", c)
	}
}

func TestTakeMarkLeavesOutUnsafeNames(t *testing.T) {
	w := walkerFunc(func(ctx context.Context, root string) ([]providers.FileInfo, error) {
		return []providers.FileInfo{
			{Name: "ok", Mode: 0o644},
			{Name: "../escape", Mode: 0o644},
			{Name: "/abs", Mode: 0o644},
			{Name: "a//b", Mode: 0o644},
		}, nil
	})
	m, err := syncengine.TakeMark(context.Background(), w, "/w")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Paths(); !slices.Equal(got, []string{"ok"}) {
		t.Errorf("paths %q, want only ok", got)
	}
}

type walkerFunc func(ctx context.Context, root string) ([]providers.FileInfo, error)

func (f walkerFunc) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	return f(ctx, root)
}

func TestMarkJSON(t *testing.T) {
	m := syncengine.Mark{
		Root:  "/work",
		Taken: time.Unix(1700000000, 5).UTC(),
		Entries: map[string]syncengine.Entry{
			"a":           {Kind: syncengine.KindFile, Size: 3, Mode: 0o644, MtimeNs: 1700000000123456789, SHA256: "abc"},
			"d":           {Kind: syncengine.KindDir, Mode: 0o755, MtimeNs: 1},
			"l":           {Kind: syncengine.KindSymlink, Target: "a", MtimeNs: 2},
			"bad\xffutf8": {Kind: syncengine.KindFile, Size: 1, Mode: 0o600, MtimeNs: 3},
		},
		Host: map[string]syncengine.HostStat{
			"a":    {Size: 3, Mode: 0o644, MtimeNs: 9, CtimeNs: 10, Ino: 11},
			"gone": {Size: 1}, // a host stat kept for a path no longer listed
		},
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back syncengine.Mark
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, back) {
		t.Errorf("round trip:\n got %+v\nwant %+v\n%s", back, m, b)
	}
	file := filepath.Join(t.TempDir(), "mark.json")
	if err := m.Save(file); err != nil {
		t.Fatal(err)
	}
	loaded, err := syncengine.LoadMark(file)
	if err != nil || !reflect.DeepEqual(m, loaded) {
		t.Errorf("LoadMark = %+v, %v", loaded, err)
	}
	if _, err := syncengine.LoadMark(filepath.Join(t.TempDir(), "none")); providers.CodeOf(err) != providers.NotFound {
		t.Errorf("LoadMark of a missing file: %v", err)
	}
	var bad syncengine.Mark
	if err := json.Unmarshal([]byte(`{"version":1,"entries":[{"path":"../x","kind":"file"}]}`), &bad); err == nil {
		t.Error("a mark naming ../x was accepted")
	}
}

func TestPatterns(t *testing.T) {
	tests := []struct {
		pats []string
		rel  string
		want bool
	}{
		{nil, "a", false},
		{[]string{"*.o"}, "x.o", true},
		{[]string{"*.o"}, "d/e/x.o", true},
		{[]string{"*.o"}, "x.oo", false},
		{[]string{"node_modules"}, "node_modules", true},
		{[]string{"node_modules"}, "a/node_modules/b/c", true},
		{[]string{"build/*"}, "build/x", true},
		{[]string{"build/*"}, "build/x/y", true},
		{[]string{"build/*"}, "src/build/x", false},
		{[]string{"/vendor"}, "vendor/a", true},
		{[]string{"/vendor"}, "a/vendor", false}, // a leading slash anchors at the root
		{[]string{"/a/vendor"}, "a/vendor/x", true},
		{[]string{"/a/vendor"}, "b/a/vendor", false},
		{[]string{"out/"}, "out/x", true},
	}
	for _, tt := range tests {
		if got := syncengine.Patterns(tt.pats).Match(tt.rel); got != tt.want {
			t.Errorf("%q.Match(%q) = %v, want %v", tt.pats, tt.rel, got, tt.want)
		}
	}
	if err := (syncengine.Patterns{"[x"}).Check(); providers.CodeOf(err) != providers.Invalid {
		t.Errorf("Check of a bad pattern: %v", err)
	}
	if err := (syncengine.Patterns{"/"}).Check(); providers.CodeOf(err) != providers.Invalid {
		t.Errorf("Check of an empty pattern: %v", err)
	}
}
