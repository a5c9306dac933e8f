package syncengine_test

import (
	"context"
	"fmt"
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/local"
	"github.com/boxfs/boxfs/syncengine"
)

// goSrc is the tree the round trips move: the Go source tree, ~11k files.
func goSrc(t *testing.T) string {
	t.Helper()
	src := filepath.Join(build.Default.GOROOT, "src")
	if _, err := os.Stat(filepath.Join(src, "go", "build", "build.go")); err != nil {
		t.Skipf("no Go source tree at %s: %v", src, err)
	}
	return src
}

// multiIO is a box's hands plus one-exec tars of path sets.
type multiIO struct {
	*hands.Hands
	syncengine.TarExec
}

// roundTrip seeds src into boxDir, pulls it back into a new host
// directory, checks the two trees are the same, has a command in the box
// change ten files, and checks an incremental pull moves exactly those ten
// in one archive.
func roundTrip(t *testing.T, ctx context.Context, box providers.Box, bio syncengine.BoxIO, boxDir, src string) {
	want := readTree(t, src)
	files := 0
	for _, n := range want {
		if !n.dir {
			files++
		}
	}

	t0 := time.Now()
	src0, err := syncengine.Seed(ctx, bio, src, boxDir, syncengine.SeedOptions{})
	if err != nil {
		t.Fatalf("Seed: %v", err)
	}
	seedTime := time.Since(t0)
	if src0.Files != files || src0.Archives != 1 {
		t.Errorf("seed moved %d files in %d archives, want %d in 1", src0.Files, src0.Archives, files)
	}

	host := filepath.Join(t.TempDir(), "back")
	t0 = time.Now()
	rc, m1, err := syncengine.Pull(ctx, bio, boxDir, host, nil, syncengine.PullOptions{})
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	pullTime := time.Since(t0)
	sameTrees(t, readTree(t, host), want, 20)
	if rc.Files != files || rc.Archives != 1 || len(rc.Skipped) != 0 {
		t.Errorf("first pull moved %d files in %d archives, skipped %d (%v); want %d in 1, none skipped",
			rc.Files, rc.Archives, len(rc.Skipped), rc.SkipsBy, files)
	}
	for rel, sum := range src0.Hashes {
		if m1.Entries[rel].SHA256 != sum {
			t.Errorf("%s: the mark's SHA-256 %s differs from the seeded file's %s", rel, m1.Entries[rel].SHA256, sum)
			break
		}
	}
	t.Logf("%d files, %d MB: seed %v, full pull %v (%d listed)", files, src0.Bytes>>20, seedTime.Round(time.Millisecond), pullTime.Round(time.Millisecond), rc.Listed)

	// A command in the box changes ten Go files spread over the tree.
	var goFiles, changed []string
	for _, rel := range slices.Sorted(mapKeys(want)) {
		if !want[rel].dir && strings.HasSuffix(rel, ".go") {
			goFiles = append(goFiles, rel)
		}
	}
	for i := range 10 {
		changed = append(changed, goFiles[i*len(goFiles)/10])
	}
	var script strings.Builder
	script.WriteString("set -e\n")
	args := []string{"sh", "-c", "", "sh"}
	for i, rel := range changed {
		fmt.Fprintf(&script, "printf '// changed in the box\\n' >> \"${%d}\"\n", i+1)
		args = append(args, boxDir+"/"+rel)
	}
	args[2] = script.String()
	var stderr strings.Builder
	p, err := box.Exec(ctx, providers.ExecRequest{Argv: args, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(); err != nil || code != 0 {
		t.Fatalf("the command that changes ten files: exit %d, %v: %s", code, err, stderr.String())
	}

	t0 = time.Now()
	rc, m2, err := syncengine.Pull(ctx, bio, boxDir, host, &m1, syncengine.PullOptions{Overwrite: syncengine.OverwriteIfUnchanged})
	if err != nil {
		t.Fatalf("incremental Pull: %v", err)
	}
	incTime := time.Since(t0)
	if !slices.Equal(rc.Moved, changed) || rc.Files != 10 || rc.Archives != 1 || len(rc.HostChanged) != 0 {
		t.Errorf("incremental pull moved %d files %q in %d archives (host_changed %q); want the 10 changed %q in 1",
			rc.Files, rc.Moved, rc.Archives, rc.HostChanged, changed)
	}
	for _, rel := range changed {
		n := want[rel]
		b, err := os.ReadFile(filepath.Join(host, filepath.FromSlash(rel)))
		if err != nil || int64(len(b)) != n.size+int64(len("// changed in the box\n")) || !strings.HasSuffix(string(b), "// changed in the box\n") {
			t.Errorf("%s did not come back changed (%d bytes, %v)", rel, len(b), err)
		}
	}
	if d := syncengine.Diff(m1, m2); !slices.Equal(d.Changed, changed) || len(d.Added)+len(d.Removed) != 0 {
		t.Errorf("the marks differ by %+v, want exactly the ten changed files", d)
	}
	t.Logf("incremental pull of 10 changed files among %d: %v, %d bytes", rc.Listed, incTime.Round(time.Millisecond), rc.Bytes)
}

func TestRoundTripLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("moves the Go source tree")
	}
	src := goSrc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p := local.New(t.TempDir())
	box, err := p.Create(ctx, providers.Spec{Lifetime: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Destroy(context.Background()) })
	h, err := hands.New(ctx, box, hands.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ws := box.(*local.Box).Workspace()
	roundTrip(t, ctx, box, multiIO{h, syncengine.TarExec{Box: box}}, ws+"/src", src)
}

// TestRoundTripLocalOneArchiveFallback runs a smaller round trip through
// the box's whole-tree GetArchive (no MultiArchiver): still one archive
// per pull, filtered to what changed.
func TestRoundTripLocalOneArchiveFallback(t *testing.T) {
	src := filepath.Join(goSrc(t), "archive")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := local.New(t.TempDir())
	box, err := p.Create(ctx, providers.Spec{Lifetime: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Destroy(context.Background()) })
	h, err := hands.New(ctx, box, hands.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	roundTrip(t, ctx, box, h, box.(*local.Box).Workspace()+"/archive", src)
}

// TestRoundTripDocker moves the Go source tree into a container and back:
// Docker's archive API in, one exec of GNU tar out.
func TestRoundTripDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("moves the Go source tree")
	}
	src := goSrc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	box := testbox.NewDocker(t)
	h, err := hands.New(ctx, box, hands.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	t.Logf("hands via %s", h.Via())
	roundTrip(t, ctx, box, multiIO{h, syncengine.TarExec{Box: box}}, "/workspace/src", src)
}

// TestRoundTripDockerOneArchiveFallback pulls through Docker's archive API
// alone (no MultiArchiver): one whole-tree archive per pull, filtered.
func TestRoundTripDockerOneArchiveFallback(t *testing.T) {
	src := filepath.Join(goSrc(t), "archive")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	box := testbox.NewDocker(t)
	h, err := hands.New(ctx, box, hands.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	roundTrip(t, ctx, box, h, "/workspace/archive", src)
}
