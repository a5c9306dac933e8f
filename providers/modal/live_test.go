package modal_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal"
)

// liveLabel marks every sandbox the live suite makes, with the run's own
// value, so what it leaves can be found and ended.
const liveLabel = "boxfs-live-test"

// TestLive runs against Modal itself, only with MODAL_TOKEN_ID and
// MODAL_TOKEN_SECRET set and never in CI (CI set). BOXFS_MODAL_KINDS
// chooses the kinds of box, comma-separated: default (gVisor, the default
// kind), vm, gpu. MODAL_SERVER_URL and MODAL_ENVIRONMENT are taken when
// set (MODAL_SERVER_URL may point it at a modaltest fake run on its own).
// Each box is driven through exec, an archive in and out, a port, suspend
// and resume, a snapshot and a box made from it, and List. Every box is
// labelled for the run and ended, and the suite checks that none of the
// run is left running.
func TestLive(t *testing.T) {
	if os.Getenv("MODAL_TOKEN_ID") == "" || os.Getenv("MODAL_TOKEN_SECRET") == "" {
		t.Skip("live Modal suite not configured: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET to run it")
	}
	if os.Getenv("CI") != "" {
		t.Skip("the live Modal suite never runs in CI")
	}
	p, err := modal.New(providers.Config{})
	require.NoError(t, err)
	// Cleanups run last first: the provider closes after endRun used it.
	t.Cleanup(func() { p.Close() })
	run := "r" + strings.ToLower(time.Now().UTC().Format("20060102t150405"))
	labels := map[string]string{liveLabel: run}
	t.Cleanup(func() { endRun(t, p, labels) })

	kinds := strings.Split(os.Getenv("BOXFS_MODAL_KINDS"), ",")
	if os.Getenv("BOXFS_MODAL_KINDS") == "" {
		kinds = []string{"default"}
	}
	for _, kind := range kinds {
		t.Run("kind="+kind, func(t *testing.T) {
			spec := providers.Spec{Lifetime: 20 * time.Minute, Labels: map[string]string{liveLabel: run, "kind": kind}, Ports: []int{8000}, Env: map[string]string{"BOXFS_LIVE": run}}
			switch kind {
			case "vm":
				spec.Isolation = providers.IsolationMicroVM
			case "gpu":
				spec.GPU = "any"
			case "default":
			default:
				t.Fatalf("BOXFS_MODAL_KINDS: unknown kind %q (default, vm, gpu)", kind)
			}
			liveBox(t, p, spec)
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	listed, err := p.List(ctx, labels)
	require.NoError(t, err)
	assert.Empty(t, listed, "boxes of run %s still listed after their Destroy", run)
}

func liveBox(t *testing.T, p *modal.Provider, spec providers.Spec) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	box, err := p.Create(ctx, spec)
	require.NoError(t, err)
	t.Logf("created %s in %v", box.ID(), time.Since(start).Round(time.Millisecond))
	f, err := box.Facts(ctx)
	require.NoError(t, err)
	t.Logf("facts: %+v", f)
	if spec.GPU != "" {
		assert.NotEmpty(t, f.GPU)
	}

	hostile := []string{"", "two words", "it's \"q\"", "new\nline", "$HOME", "\xff\xfe"}
	var out, errb bytes.Buffer
	start = time.Now()
	pr, err := box.Exec(ctx, providers.ExecRequest{Argv: append([]string{"printf", `%s\0`}, hostile...), Stdout: &out})
	require.NoError(t, err)
	code, err := pr.Wait()
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, strings.Join(hostile, "\x00")+"\x00", out.String())
	t.Logf("one command in %v", time.Since(start).Round(time.Millisecond))

	out.Reset()
	pr, err = box.Exec(ctx, providers.ExecRequest{Argv: []string{"sh", "-c", `cat; echo "$BOXFS_LIVE" >&2; exit 7`}, Stdin: strings.NewReader("stdin\x00bytes"), Stdout: &out, Stderr: &errb})
	require.NoError(t, err)
	code, err = pr.Wait()
	require.NoError(t, err)
	assert.Equal(t, 7, code)
	assert.Equal(t, "stdin\x00bytes", out.String())
	assert.Equal(t, spec.Labels[liveLabel]+"\n", errb.String())

	ar := box.(providers.Archiver)
	rc, err := ar.GetArchive(ctx, f.Workspace)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, rc)
	assert.NoError(t, err)
	rc.Close()
	ep, err := box.(providers.Endpointer).Endpoint(ctx, 8000)
	assert.NoError(t, err)
	t.Logf("port 8000 at %s", ep)
	liveFiles(t, ctx, box, f.Workspace, spec.Labels[liveLabel])
	box = liveSuspendSnapshot(t, ctx, p, box, spec)

	listed, err := p.List(ctx, spec.Labels)
	require.NoError(t, err)
	if assert.Len(t, listed, 1) {
		assert.Equal(t, box.ID(), listed[0].ID())
	}
	require.NoError(t, box.Destroy(ctx))
	_, err = p.Attach(ctx, box.ID())
	assert.True(t, providers.IsCode(err, providers.NotFound), "Attach after Destroy: %v", err)
}

// liveFiles puts a file into the workspace as a tar and reads it back
// as one.
func liveFiles(t *testing.T, ctx context.Context, box providers.Box, ws, content string) {
	ar := box.(providers.Archiver)
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "live.txt", Mode: 0o640, Size: int64(len(content)), Typeflag: tar.TypeReg}))
	_, err := tw.Write([]byte(content))
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	require.NoError(t, ar.PutArchive(ctx, ws, &in), "PutArchive")
	rc, err := ar.GetArchive(ctx, ws+"/live.txt")
	require.NoError(t, err, "GetArchive")
	defer rc.Close()
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	require.NoError(t, err, "the archive's first member")
	assert.Equal(t, "live.txt", h.Name)
	assert.Equal(t, int64(0o640), h.Mode&0o777, "the file's mode")
	got, err := io.ReadAll(tr)
	require.NoError(t, err)
	assert.Equal(t, content, string(got), "the file read back")
}

// liveSuspendSnapshot writes a file in box, suspends and resumes it, and
// checks the file is there as Facts.Suspend says it is kept; then it
// snapshots the resumed box, makes a box from the snapshot, checks the
// file there and destroys that box. It returns the resumed box.
func liveSuspendSnapshot(t *testing.T, ctx context.Context, p *modal.Provider, box providers.Box, spec providers.Spec) providers.Box {
	mark := spec.Labels[liveLabel]
	liveSh(t, ctx, box, `printf %s "$1" >live-mark`, mark)
	start := time.Now()
	id, err := p.Suspend(ctx, box)
	require.NoError(t, err, "Suspend")
	rb, err := p.Resume(ctx, id)
	require.NoError(t, err, "Resume(%s)", id)
	t.Logf("suspended and resumed in %v, as %s", time.Since(start).Round(time.Millisecond), rb.ID())
	f, err := rb.Facts(ctx)
	require.NoError(t, err, "Facts of the resumed box")
	if f.Suspend != providers.SuspendSnapshot {
		assert.Equal(t, box.ID(), rb.ID(), "a box that keeps its %s is resumed as itself", f.Suspend)
	}
	assert.Equal(t, mark, liveSh(t, ctx, rb, `cat live-mark`), "the file written before Suspend, after Resume")

	sid, err := p.Snapshot(ctx, rb, "live-"+mark)
	require.NoError(t, err, "Snapshot")
	t.Logf("snapshot %s", sid)
	sspec := spec
	sspec.Snapshot = sid
	sspec.Ports = nil
	sb, err := p.Create(ctx, sspec)
	require.NoError(t, err, "Create from snapshot %s", sid)
	assert.Equal(t, mark, liveSh(t, ctx, sb, `cat live-mark`), "the file in a box made from the snapshot")
	assert.NoError(t, sb.Destroy(ctx), "Destroy of the box made from the snapshot")
	return rb
}

// liveSh runs script with sh in box's workspace, with args, and returns
// its stdout; anything but exit 0 ends the test.
func liveSh(t *testing.T, ctx context.Context, box providers.Box, script string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	pr, err := box.Exec(ctx, providers.ExecRequest{Argv: append([]string{"sh", "-c", script, "sh"}, args...), Stdout: &out, Stderr: &errb})
	require.NoError(t, err, "Exec %q", script)
	code, err := pr.Wait()
	require.NoError(t, err, "Exec %q", script)
	require.Equal(t, 0, code, "Exec %q: stderr %q", script, errb.String())
	return out.String()
}

// endRun ends whatever of the run is still listed.
func endRun(t *testing.T, p *modal.Provider, labels map[string]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	left, err := p.List(ctx, labels)
	if err != nil {
		t.Errorf("cleanup: List: %v", err)
		return
	}
	for _, b := range left {
		if err := b.Destroy(ctx); err != nil {
			t.Errorf("cleanup: Destroy(%s): %v", b.ID(), err)
		}
	}
}
