package daytona_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/daytona"
)

// liveLabel marks every sandbox the live suite makes, with the run's own
// value, so what it leaves can be found and deleted.
const liveLabel = "boxfs-live-test"

// TestLive runs against Daytona itself, only with BOXFS_LIVE_DAYTONA=1 and
// DAYTONA_API_KEY set (DAYTONA_API_URL, DAYTONA_SNAPSHOT and DAYTONA_TARGET
// are taken when set; DAYTONA_API_URL may point it at a daytonatest fake
// run on its own). It makes boxes (named boxfs-..., labelled for the run),
// drives them through exec, files, suspend and resume, a snapshot and a box
// made from it, and List, deletes them and checks that no box of the run
// is left. The snapshot stays: its name is logged.
func TestLive(t *testing.T) {
	if os.Getenv("BOXFS_LIVE_DAYTONA") != "1" || os.Getenv("DAYTONA_API_KEY") == "" {
		t.Skip("live Daytona suite not configured: set BOXFS_LIVE_DAYTONA=1 and DAYTONA_API_KEY to run it")
	}
	opts := map[string]string{}
	for env, opt := range map[string]string{"DAYTONA_API_URL": "api_url", "DAYTONA_SNAPSHOT": "snapshot", "DAYTONA_TARGET": "target"} {
		if v := os.Getenv(env); v != "" {
			opts[opt] = v
		}
	}
	p, err := daytona.New(providers.Config{Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	rand.Read(b)
	run := "r" + hex.EncodeToString(b)
	labels := map[string]string{liveLabel: run}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	t.Cleanup(func() { liveCleanup(t, p, labels, run) })

	start := time.Now()
	box, err := p.Create(ctx, providers.Spec{Lifetime: 30 * time.Minute, Labels: labels, Env: map[string]string{"BOXFS_LIVE": run}})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Logf("created %s in %v", box.ID(), time.Since(start).Round(time.Millisecond))
	f, err := box.Facts(ctx)
	if err != nil {
		t.Fatalf("Facts: %v", err)
	}
	t.Logf("facts: %+v", f)
	liveExec(t, ctx, box, run)
	liveFiles(t, ctx, box.(*daytona.Box), f.Workspace)
	box = liveSuspendSnapshot(t, ctx, p, box, labels, run)

	listed, err := p.List(ctx, labels)
	if err != nil || len(listed) != 1 || listed[0].ID() != box.ID() {
		t.Errorf("List(%v) = %v, %v", labels, listed, err)
	}
	if err := box.Destroy(ctx); err != nil {
		t.Errorf("Destroy: %v", err)
	}
	// Daytona reads a deleted sandbox's old state for a while; it is gone
	// at once all the same.
	if _, err := p.Attach(ctx, box.ID()); !providers.IsCode(err, providers.NotFound) {
		t.Errorf("Attach after Destroy: %v, want NotFound", err)
	}
	liveCancelledCreate(t, ctx, p, labels)
}

// liveExec checks argv fidelity, stdin, stderr apart from stdout, and the
// exit status.
func liveExec(t *testing.T, ctx context.Context, box providers.Box, run string) {
	hostile := []string{"", "two words", "it's \"q\"", "new\nline", "$HOME", "\xff\xfe"}
	var out bytes.Buffer
	start := time.Now()
	pr, err := box.Exec(ctx, providers.ExecRequest{Argv: append([]string{"printf", `%s\0`}, hostile...), Stdout: &out})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if code, err := pr.Wait(); err != nil || code != 0 {
		t.Fatalf("Exec: exit %d, %v", code, err)
	}
	if want := strings.Join(hostile, "\x00") + "\x00"; out.String() != want {
		t.Errorf("argv came back as %q, want %q", out.String(), want)
	}
	t.Logf("one command in %v", time.Since(start).Round(time.Millisecond))

	out.Reset()
	var errb bytes.Buffer
	pr, err = box.Exec(ctx, providers.ExecRequest{Argv: []string{"sh", "-c", `cat; echo "$BOXFS_LIVE" >&2; exit 7`}, Stdin: strings.NewReader("stdin\x00bytes"), Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if code, err := pr.Wait(); err != nil || code != 7 || out.String() != "stdin\x00bytes" || errb.String() != run+"\n" {
		t.Errorf("stdin/stderr/exit: exit %d, %v, stdout %q, stderr %q", code, err, out.String(), errb.String())
	}
}

// liveFiles checks an upload (WriteFile), Stat, ReadFile and Walk.
func liveFiles(t *testing.T, ctx context.Context, db *daytona.Box, ws string) {
	name := ws + "/live file"
	if err := db.WriteFile(ctx, name, strings.NewReader("hello"), 0o640); err != nil {
		t.Errorf("WriteFile: %v", err)
	} else if fi, err := db.Stat(ctx, name); err != nil || fi.Size != 5 || fi.Mode.Perm() != 0o640 {
		t.Errorf("Stat = %+v, %v", fi, err)
	} else if rc, err := db.ReadFile(ctx, name); err != nil {
		t.Errorf("ReadFile: %v", err)
	} else {
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != "hello" {
			t.Errorf("ReadFile = %q", got)
		}
	}
	if ents, err := db.Walk(ctx, ws); err != nil || len(ents) == 0 {
		t.Errorf("Walk = %v, %v", ents, err)
	}
}

// liveSuspendSnapshot writes a file in box, suspends and resumes it, and
// checks the file is there as Facts.Suspend says it is kept; then it
// snapshots the resumed box, makes a box from the snapshot, checks the
// file there and destroys that box. It returns the resumed box.
func liveSuspendSnapshot(t *testing.T, ctx context.Context, p *daytona.Provider, box providers.Box, labels map[string]string, run string) providers.Box {
	liveSh(t, ctx, box, `printf %s "$1" >live-mark`, run)
	start := time.Now()
	id, err := p.Suspend(ctx, box)
	if err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	rb, err := p.Resume(ctx, id)
	if err != nil {
		t.Fatalf("Resume(%s): %v", id, err)
	}
	t.Logf("suspended and resumed in %v", time.Since(start).Round(time.Millisecond))
	f, err := rb.Facts(ctx)
	if err != nil {
		t.Fatalf("Facts of the resumed box: %v", err)
	}
	if f.Suspend != providers.SuspendSnapshot && rb.ID() != box.ID() {
		t.Errorf("a box that keeps its %s was resumed as %s, not as itself (%s)", f.Suspend, rb.ID(), box.ID())
	}
	if got := liveSh(t, ctx, rb, `cat live-mark`); got != run {
		t.Errorf("the file written before Suspend reads %q after Resume, want %q", got, run)
	}

	sid, err := p.Snapshot(ctx, rb, "live-"+run)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	t.Logf("snapshot %s (not removed by the suite)", sid)
	sb, err := p.Create(ctx, providers.Spec{Lifetime: 30 * time.Minute, Labels: labels, Snapshot: sid})
	if err != nil {
		t.Fatalf("Create from snapshot %s: %v", sid, err)
	}
	if got := liveSh(t, ctx, sb, `cat live-mark`); got != run {
		t.Errorf("the file in a box made from the snapshot reads %q, want %q", got, run)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Errorf("Destroy of the box made from the snapshot: %v", err)
	}
	return rb
}

// liveSh runs script with sh in box's workspace, with args, and returns
// its stdout; anything but exit 0 ends the test.
func liveSh(t *testing.T, ctx context.Context, box providers.Box, script string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	pr, err := box.Exec(ctx, providers.ExecRequest{Argv: append([]string{"sh", "-c", script, "sh"}, args...), Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("Exec %q: %v", script, err)
	}
	if code, err := pr.Wait(); err != nil || code != 0 {
		t.Fatalf("Exec %q: exit %d, %v, stderr %q", script, code, err, errb.String())
	}
	return out.String()
}

// liveCancelledCreate checks that a create whose ctx ends while Daytona
// is still starting the sandbox (when Daytona refuses to delete it) leaves
// no sandbox: the cleanup in liveCleanup then finds none of it.
func liveCancelledCreate(t *testing.T, ctx context.Context, p *daytona.Provider, labels map[string]string) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cl := map[string]string{"cancelled": "1"}
	for k, v := range labels {
		cl[k] = v
	}
	if b, err := p.Create(cctx, providers.Spec{Lifetime: 30 * time.Minute, Labels: cl}); err == nil {
		t.Logf("the create finished within 2 s; the cancelled-create check did not run")
		b.Destroy(ctx)
		return
	}
	left, err := p.List(ctx, cl)
	if err != nil || len(left) > 0 {
		t.Errorf("a cancelled create left %d boxes (%v)", len(left), err)
	}
}

// liveCleanup deletes whatever of the run is left and checks that none of
// it is listed within a minute.
func liveCleanup(t *testing.T, p *daytona.Provider, labels map[string]string, run string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
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
	deadline := time.Now().Add(time.Minute)
	for {
		left, err := p.List(ctx, labels)
		if err == nil && len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("boxes of run %s are still listed a minute after their delete: %v (%v)", run, len(left), err)
			return
		}
		time.Sleep(2 * time.Second)
	}
}
