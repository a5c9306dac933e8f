package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pkg/sftp"

	"github.com/boxfs/boxfs/providers"
)

// removeResult renders one entry's result: "ok", or its code and errno.
func removeResult(err error) string {
	if err == nil {
		return "ok"
	}
	return providers.CodeOf(err).String() + " " + errnoString(err)
}

// A batch of removals is done in one round trip, in order: a directory
// emptied by the entries before it is removed, one whose children come
// after it is ENOTEMPTY; each entry answers its own errno, and a failed
// entry stops none after it. A final symlink is removed, not followed; a
// symlinked parent is followed, as Remove follows it.
func TestRemoveFilesInOrder(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	mk := func(rel string) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(rel, "/") {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(p, []byte(rel), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk("d/a")
	mk("d/sub/b")
	mk("late/c")
	mk("kept/k")
	mk("target/t")
	mk("real/r")
	if err := os.Symlink(filepath.Join(dir, "target"), filepath.Join(dir, "d/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(dir, "via")); err != nil {
		t.Fatal(err)
	}
	p := func(rel string) string { return filepath.Join(dir, rel) }
	rms := []providers.FileRemove{
		{Name: p("d/a")},
		{Name: p("d/sub/b")},
		{Name: p("d/link")},
		{Name: p("d/sub"), Dir: true},
		{Name: p("d"), Dir: true},      // emptied by the four before it
		{Name: p("late"), Dir: true},   // its child goes after it
		{Name: p("late/c")},            // done though the entry before failed
		{Name: p("d/a")},               // already gone
		{Name: p("kept"), Dir: true},   // not empty
		{Name: p("kept")},              // a directory given as a file
		{Name: p("kept/k"), Dir: true}, // a file given as a directory
		{Name: p("nodir/x")},           // its parent missing
		{Name: p("via/r")},             // through a symlinked parent
		{Name: "relative"},             // not sent
		{Name: ReservedDir + "/x"},     // not sent
	}
	want := []string{
		"ok", "ok", "ok", "ok", "ok",
		"exists errno ENOTEMPTY",
		"ok",
		"not_found errno ENOENT",
		"exists errno ENOTEMPTY",
		"invalid errno EISDIR",
		"invalid errno ENOTDIR",
		"not_found errno ENOENT",
		"ok",
		"invalid error", "unsupported error",
	}
	var errs []error
	oneTrip(t, c, "RemoveFiles", func() (err error) { errs, err = c.RemoveFiles(ctx, rms); return err })
	if len(errs) != len(rms) {
		t.Fatalf("RemoveFiles answered %d results for %d entries", len(errs), len(rms))
	}
	for i, err := range errs {
		if got := removeResult(err); !strings.HasPrefix(got, want[i]) {
			t.Errorf("entry %d (%+v): %s, want %s", i, rms[i], got, want[i])
		}
	}
	var pe *providers.Error
	if !errors.As(errs[8], &pe) || pe.Path != p("kept") || pe.Op != "agent.RemoveFiles" || !errors.Is(errs[8], syscall.ENOTEMPTY) {
		t.Errorf("the ENOTEMPTY entry's error: %#v", errs[8])
	}
	for _, gone := range []string{"d", "late/c", "real/r"} {
		if _, err := os.Lstat(p(gone)); !os.IsNotExist(err) {
			t.Errorf("%s after the batch: %v, want removed", gone, err)
		}
	}
	for _, kept := range []string{"late", "kept/k", "target/t", "via"} {
		if _, err := os.Lstat(p(kept)); err != nil {
			t.Errorf("%s after the batch: %v, want kept", kept, err)
		}
	}

	if errs, err := c.RemoveFiles(ctx, nil); err != nil || len(errs) != 0 {
		t.Errorf("RemoveFiles of no entries: %v %v", errs, err)
	}
}

// A batch larger than one request goes as several, cut at removeMax
// entries and at inlineMax of paths, still in order: a directory whose
// children went in an earlier request is removed.
func TestRemoveFilesChunks(t *testing.T) {
	c := newPipeServer(t, 30*time.Second).client
	ctx := bg(t)

	t.Run("cut=entries", func(t *testing.T) {
		// Only paths of under 10 bytes fill removeMax entries before
		// inlineMax: names under a missing /0, each NotFound.
		if _, err := os.Lstat("/0"); !os.IsNotExist(err) {
			t.Skipf("/0 is there: %v", err)
		}
		var rms []providers.FileRemove
		for i := range removeMax + 10 {
			rms = append(rms, providers.FileRemove{Name: fmt.Sprintf("/0/%d", i)})
		}
		dir := t.TempDir()
		f := filepath.Join(dir, "f")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		rms = append(rms, providers.FileRemove{Name: f}, providers.FileRemove{Name: dir, Dir: true})
		before := c.RoundTrips()
		errs, err := c.RemoveFiles(ctx, rms)
		if err != nil {
			t.Fatal(err)
		}
		if n := c.RoundTrips() - before; n != 2 {
			t.Errorf("%d entries took %d round trips, want 2", len(rms), n)
		}
		for i, err := range errs[:removeMax+10] {
			if !providers.IsCode(err, providers.NotFound) {
				t.Fatalf("entry %d (%s): %v, want NotFound", i, rms[i].Name, err)
			}
		}
		if errs[len(errs)-2] != nil || errs[len(errs)-1] != nil {
			t.Errorf("the last two entries: %v, %v", errs[len(errs)-2], errs[len(errs)-1])
		}
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Errorf("the batch's directory: %v, want removed", err)
		}
	})

	t.Run("cut=bytes", func(t *testing.T) {
		const depth = 4 // directory levels of 250-byte names above the files
		top := t.TempDir()
		dir := top
		for i := range depth {
			dir = filepath.Join(dir, strings.Repeat(string(rune('a'+i)), 250))
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var rms []providers.FileRemove
		for i := range 600 {
			p := filepath.Join(dir, fmt.Sprintf("%05d", i))
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			rms = append(rms, providers.FileRemove{Name: p})
		}
		for d := dir; d != top; d = filepath.Dir(d) {
			rms = append(rms, providers.FileRemove{Name: d, Dir: true})
		}
		// Each request takes as many files as fit; the directories, whose
		// paths are shorter, all fall in the last.
		per := inlineMax / (len(rms[0].Name) + 2)
		if per >= removeMax || len(rms)%per <= depth {
			t.Fatalf("the batch does not cut as the test assumes: %d entries, %d a request", len(rms), per)
		}
		wantTrips := (len(rms) + per - 1) / per
		before := c.RoundTrips()
		errs, err := c.RemoveFiles(ctx, rms)
		if err != nil {
			t.Fatal(err)
		}
		if n := c.RoundTrips() - before; n != int64(wantTrips) {
			t.Errorf("%d entries of %d bytes took %d round trips, want %d", len(rms), len(rms[0].Name), n, wantTrips)
		}
		for i, err := range errs {
			if err != nil {
				t.Errorf("entry %d (%s): %v", i, rms[i].Name, err)
			}
		}
		if ents, err := os.ReadDir(top); err != nil || len(ents) != 0 {
			t.Errorf("left under the batch's directory: %v %v", ents, err)
		}
	})
}

// The agent refuses a request that is not well-formed records, or holds
// more than removeMax, with EINVAL, having removed nothing.
func TestRemoveAllRefusesMalformed(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rec := "f" + f + "\x00"
	for name, data := range map[string]string{
		"empty":          "",
		"no NUL":         rec + "f" + f,
		"no path":        rec + "f\x00",
		"relative":       rec + "frel\x00",
		"unknown kind":   rec + "x" + f + "\x00",
		"over removeMax": strings.Repeat(rec, removeMax+1),
	} {
		var we *wireError
		if err := removeAll(data); !errors.As(err, &we) || we.errno != syscall.EINVAL {
			t.Errorf("%s: %v, want EINVAL", name, err)
		}
		if _, err := os.Lstat(f); err != nil {
			t.Fatalf("%s removed the file: %v", name, err)
		}
	}
}

// agentWithout serves as an agent without opRemoves: it checks the
// query's path as every agent does before its operations, then answers
// as an agent answers an operation it does not know (unknown: a plain
// failure, as agents before setattr did, or SSH_FX_OP_UNSUPPORTED).
type agentWithout struct {
	*handlers
	unknown error
}

func (o agentWithout) Filecmd(r *sftp.Request) error {
	if op, q, ok, _ := parseSynthetic(r.Filepath); ok && op == opRemoves {
		if !path.IsAbs(q.Get("path")) {
			return errnoErr(syscall.EINVAL)
		}
		return o.unknown
	}
	return o.handlers.Filecmd(r)
}

// An agent without the operation answers a batch Unsupported, having
// removed nothing, and the plain calls still work: the caller falls back.
func TestAgentWithoutRemoveFiles(t *testing.T) {
	for name, unknown := range map[string]error{
		"failure":        fmt.Errorf("agent: no operation %q", opRemoves),
		"op_unsupported": sftp.ErrSSHFxOpUnsupported,
	} {
		t.Run("answer="+name, func(t *testing.T) {
			cr, sw := io.Pipe()
			sr, cw := io.Pipe()
			h := &handlers{atomics: map[string]*atomicFile{}, batches: map[string]*batchFile{}}
			rs := sftp.NewRequestServer(stream{sr, sw},
				sftp.Handlers{FileGet: h, FilePut: h, FileCmd: agentWithout{h, unknown}, FileList: h},
				sftp.WithRSMaxTxPacket(maxPacket))
			go func() {
				rs.Serve()
				sw.Close()
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := NewClient(ctx, cr, cw, ClientOptions{Box: "older"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close(); rs.Close() })

			dir := t.TempDir()
			f := filepath.Join(dir, "f")
			if err := os.WriteFile(f, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			errs, err := c.RemoveFiles(ctx, []providers.FileRemove{{Name: f}, {Name: dir, Dir: true}})
			if !providers.IsCode(err, providers.Unsupported) || errs != nil {
				t.Errorf("RemoveFiles of an agent without it: %v %v, want Unsupported", errs, err)
			}
			if _, err := os.Lstat(f); err != nil {
				t.Errorf("the unsupported batch removed its file: %v", err)
			}
			if err := c.Remove(ctx, f); err != nil {
				t.Errorf("Remove of an agent without RemoveFiles: %v", err)
			}
		})
	}
}
