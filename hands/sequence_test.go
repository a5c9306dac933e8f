package hands_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// seqNames is the namespace the randomized sequence works in: few enough
// names that operations collide (EEXIST, ENOTEMPTY, ENOTDIR ...) often.
var seqNames = []string{"a", "b", "c", "d", "d/x", "d/y", "e", "e/f", "e/f/g", "sp ace", "nl\nx", "\xff"}

var seqPerms = []providers.FileMode{0o644, 0o600, 0o755, 0o640, 0o700}

// seqOp is one randomly drawn operation, with its arguments fixed so that
// it can be applied to the reference and to the box alike.
type seqOp struct {
	kind    string
	a, b    string
	data    []byte
	n       int64
	perm    providers.FileMode
	exclude bool
}

func (o seqOp) String() string {
	return fmt.Sprintf("%s(%q, %q, %d bytes, n=%d, perm=%v, excl=%v)", o.kind, o.a, o.b, len(o.data), o.n, o.perm, o.exclude)
}

var seqKinds = []string{"create", "writefile", "writeat", "rename", "remove", "rmdir", "truncate", "chmod", "symlink", "mkdir", "readfile", "lstat", "stat", "readdir"}

func drawOp(rng *rand.Rand) seqOp {
	name := func() string { return seqNames[rng.IntN(len(seqNames))] }
	o := seqOp{kind: seqKinds[rng.IntN(len(seqKinds))], a: name(), b: name(), perm: seqPerms[rng.IntN(len(seqPerms))]}
	o.data = make([]byte, rng.IntN(48))
	for i := range o.data {
		o.data[i] = byte(rng.IntN(256))
	}
	o.n = int64(rng.IntN(80))
	o.exclude = rng.IntN(2) == 0
	return o
}

// apply runs o on f under root and renders what a user would see.
func (o seqOp) apply(ctx context.Context, f providers.Files, root string, partial bool) string {
	a, b := root+"/"+o.a, root+"/"+o.b
	switch o.kind {
	case "create":
		return errs(f.Create(ctx, a, o.perm, o.exclude))
	case "writefile":
		return errs(f.WriteFile(ctx, a, bytes.NewReader(o.data), o.perm))
	case "writeat":
		n, err := f.WriteAt(ctx, a, o.data, o.n)
		if err != nil {
			return errs(err)
		}
		return "n=" + strconv.Itoa(n)
	case "rename":
		return errs(f.Rename(ctx, a, b))
	case "remove":
		return errs(f.Remove(ctx, a))
	case "rmdir":
		return errs(f.Rmdir(ctx, a))
	case "truncate":
		return errs(f.Truncate(ctx, a, o.n))
	case "chmod":
		return errs(f.Chmod(ctx, a, o.perm))
	case "symlink":
		return errs(f.Symlink(ctx, o.b, a))
	case "mkdir":
		return errs(f.Mkdir(ctx, a, o.perm))
	case "readfile":
		return readStr(ctx, f, a)
	case "lstat":
		fi, err := f.Lstat(ctx, a)
		return statStr(fi, err, partial)
	case "stat":
		fi, err := f.Stat(ctx, a)
		return statStr(fi, err, partial)
	case "readdir":
		return dirStr(ctx, f, a, partial)
	}
	panic(o.kind)
}

// seed is the sequence's seed: BOXFS_HANDS_SEED, else fixed, so a failure
// reproduces.
func seed(t *testing.T) uint64 {
	if s := os.Getenv("BOXFS_HANDS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("BOXFS_HANDS_SEED: %v", err)
		}
		return v
	}
	return 20261202
}

// runSequence applies n random operations to the os package on a host
// directory and to the row, comparing every result, then the whole trees.
func runSequence(t *testing.T, rw row, n int, skip func(seqOp) bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	s := seed(t)
	rng := rand.New(rand.NewPCG(s, uint64(n)))
	ref := t.TempDir()
	done := 0
	for i := 0; done < n; i++ {
		o := drawOp(rng)
		if skip != nil && skip(o) {
			continue
		}
		done++
		want := o.apply(ctx, osFiles{}, ref, rw.partial)
		got := o.apply(ctx, rw.files, rw.root, rw.partial)
		if got != want {
			t.Fatalf("seed %d, op %d %v:\n got: %s\nwant: %s", s, done, o, got, want)
		}
	}
	want, err := osWalk(ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rw.walker.Walk(ctx, rw.root)
	if err != nil {
		t.Fatalf("Walk: %v", err)
	}
	if g, w := walkStr(got, false), walkStr(want, false); g != w {
		t.Fatalf("seed %d: trees differ after %d ops:\n got: %s\nwant: %s", s, n, g, w)
	}
	files := 0
	for _, fi := range want {
		if fi.IsRegular() {
			files++
			if g, w := readStr(ctx, rw.files, rw.root+"/"+fi.Name), readStr(ctx, osFiles{}, ref+"/"+fi.Name); g != w {
				t.Errorf("seed %d: %q holds %s, want %s", s, fi.Name, g, w)
			}
		}
	}
	t.Logf("seed %d: %d ops, %d entries (%d files) at the end, all equal", s, n, len(want), files)
}

// TestSequence runs a seeded, reproducible random sequence of create,
// write, rename, remove, truncate, chmod, symlink and mkdir operations
// (plus reads) against local and Docker boxes, compared with the os package
// on a host directory. Set BOXFS_HANDS_SEED to draw another sequence.
func TestSequence(t *testing.T) {
	rows := []struct {
		target
		n     int
		short bool // skipped under -short
		skip  func(seqOp) bool
	}{
		{target: targetNamed(t, "via=native-files/box=local"), n: 5000},
		{target: targetNamed(t, "via=agent/box=local"), n: 5000},
		{target: targetNamed(t, "via=agent/box=docker"), n: 3000},
		{target: targetNamed(t, "via=script/box=hostbox"), n: 1000},
		{target: targetNamed(t, "via=native/box=docker"), n: 150, short: true},
	}
	for _, r := range rows {
		t.Run(fmt.Sprintf("%s/ops=%d", r.name, r.n), func(t *testing.T) {
			if r.short && testing.Short() {
				t.Skip("-short: a few hundred execs of ~150 ms")
			}
			h, root := r.open(t)
			runSequence(t, row{name: r.name, files: h, walker: h, root: root, partial: r.partial}, r.n, r.skip)
		})
	}
}

func targetNamed(t *testing.T, name string) target {
	for _, tg := range targets() {
		if tg.name == name {
			return tg
		}
	}
	t.Fatalf("no target %q", name)
	return target{}
}
