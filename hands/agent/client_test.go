//go:build linux

package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

// pipeServer runs Serve in this process over pipes and returns a client
// for it. freeze, when set, makes the server's answers stop (a hung box).
type pipeServer struct {
	client *Client
	out    *freezeWriter // the server's stdout
	stop   func()        // ends the server abruptly (a killed agent)
	done   chan struct{} // closed when Serve returned
}

func newPipeServer(t *testing.T, liveness time.Duration) *pipeServer {
	t.Helper()
	cr, sw := io.Pipe() // server to client
	sr, cw := io.Pipe() // client to server
	ps := &pipeServer{out: &freezeWriter{w: sw}, done: make(chan struct{})}
	go func() {
		defer close(ps.done)
		Serve(sr, ps.out)
		sw.Close()
	}()
	ps.stop = func() {
		sr.CloseWithError(io.ErrUnexpectedEOF)
		sw.CloseWithError(io.ErrUnexpectedEOF)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := NewClient(ctx, cr, cw, ClientOptions{Box: "pipe", Liveness: liveness})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	ps.client = c
	t.Cleanup(func() {
		ps.out.thaw()
		c.Close()
		ps.stop()
		<-ps.done
	})
	return ps
}

// freezeWriter passes writes through until frozen; then they block until
// thawed or closed.
type freezeWriter struct {
	w      io.WriteCloser
	mu     sync.Mutex
	frozen chan struct{}
}

func (f *freezeWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	ch := f.frozen
	f.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return f.w.Write(p)
}

func (f *freezeWriter) Close() error { f.thaw(); return f.w.Close() }

func (f *freezeWriter) freeze() {
	f.mu.Lock()
	if f.frozen == nil {
		f.frozen = make(chan struct{})
	}
	f.mu.Unlock()
}

func (f *freezeWriter) thaw() {
	f.mu.Lock()
	if f.frozen != nil {
		close(f.frozen)
		f.frozen = nil
	}
	f.mu.Unlock()
}

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// errnoString renders an error by its errno, the part the two sides must
// agree on.
func errnoString(err error) string {
	if err == nil {
		return "ok"
	}
	if err == io.EOF {
		return "EOF"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return "errno " + unix.ErrnoName(errno)
	}
	return "error " + err.Error()
}

func infoString(fi providers.FileInfo) string {
	return fmt.Sprintf("%s %s size=%d nlink=%d uid=%d gid=%d target=%q", fi.Name, fi.Mode, fi.Size, fi.Nlink, fi.UID, fi.GID, fi.Target)
}

func infosString(fis []providers.FileInfo) string {
	var b strings.Builder
	for _, fi := range fis {
		if fi.IsDir() {
			fi.Size = 0 // directory sizes depend on the directory's history
		}
		b.WriteString(infoString(fi))
		b.WriteByte('\n')
	}
	return b.String()
}

func readAll(ctx context.Context, f providers.Files, name string) (string, error) {
	rc, err := f.ReadFile(ctx, name)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

// fileOp is one step of the differential test: it runs against a Files
// rooted at root and describes what it saw.
type fileOp struct {
	name string
	run  func(ctx context.Context, f providers.Files, root string) (string, error)
}

func j(root string, elem ...string) string { return filepath.Join(append([]string{root}, elem...)...) }

var longName = strings.Repeat("n", 300)

// fileOps exercises every operation, including its failures. Each runs
// after the ones before it, on the same tree.
var fileOps = []fileOp{
	{"mkdir", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Mkdir(ctx, j(r, "d"), 0o755)
	}},
	{"mkdir/exists", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Mkdir(ctx, j(r, "d"), 0o755)
	}},
	{"mkdir/no-parent", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Mkdir(ctx, j(r, "missing", "x"), 0o755)
	}},
	{"mkdir/0777-umask", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.Mkdir(ctx, j(r, "wide"), 0o777); err != nil {
			return "", err
		}
		fi, err := f.Stat(ctx, j(r, "wide"))
		return fi.Mode.String(), err
	}},
	{"create/excl", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Create(ctx, j(r, "d", "f"), 0o644, true)
	}},
	{"create/excl-exists", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Create(ctx, j(r, "d", "f"), 0o644, true)
	}},
	{"writefile", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.WriteFile(ctx, j(r, "d", "f"), strings.NewReader("hello"), 0o600); err != nil {
			return "", err
		}
		fi, err := f.Stat(ctx, j(r, "d", "f"))
		return infoString(fi), err // an existing file keeps its mode (0644)
	}},
	{"readfile", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return readAll(ctx, f, j(r, "d", "f"))
	}},
	{"writeat", func(ctx context.Context, f providers.Files, r string) (string, error) {
		n, err := f.WriteAt(ctx, j(r, "d", "f"), []byte(" world"), 5)
		return fmt.Sprint(n), err
	}},
	{"readat", func(ctx context.Context, f providers.Files, r string) (string, error) {
		p := make([]byte, 64)
		n, err := f.ReadAt(ctx, j(r, "d", "f"), p, 0)
		return string(p[:n]), err
	}},
	{"readat/middle", func(ctx context.Context, f providers.Files, r string) (string, error) {
		p := make([]byte, 3)
		n, err := f.ReadAt(ctx, j(r, "d", "f"), p, 2)
		return string(p[:n]), err
	}},
	{"readat/past-end", func(ctx context.Context, f providers.Files, r string) (string, error) {
		p := make([]byte, 8)
		n, err := f.ReadAt(ctx, j(r, "d", "f"), p, 100)
		return fmt.Sprint(n), err
	}},
	{"writeat/missing", func(ctx context.Context, f providers.Files, r string) (string, error) {
		n, err := f.WriteAt(ctx, j(r, "d", "nope"), []byte("x"), 0)
		return fmt.Sprint(n), err
	}},
	{"writefile/new-perm", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.WriteFile(ctx, j(r, "d", "new"), strings.NewReader("new"), 0o640); err != nil {
			return "", err
		}
		fi, err := f.Stat(ctx, j(r, "d", "new"))
		return infoString(fi), err
	}},
	{"writefile/no-parent", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.WriteFile(ctx, j(r, "missing", "x"), strings.NewReader("x"), 0o644)
	}},
	{"truncate", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.Truncate(ctx, j(r, "d", "f"), 3); err != nil {
			return "", err
		}
		return readAll(ctx, f, j(r, "d", "f"))
	}},
	{"truncate/grow", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.Truncate(ctx, j(r, "d", "new"), 10); err != nil {
			return "", err
		}
		s, err := readAll(ctx, f, j(r, "d", "new"))
		return fmt.Sprintf("%q", s), err
	}},
	{"truncate/dir", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Truncate(ctx, j(r, "d"), 0)
	}},
	{"chmod", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.Chmod(ctx, j(r, "d", "new"), 0o600); err != nil {
			return "", err
		}
		fi, err := f.Stat(ctx, j(r, "d", "new"))
		return fi.Mode.String(), err
	}},
	{"chmod/setuid-sticky", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.Chmod(ctx, j(r, "d", "new"), 0o755|fs.ModeSetuid|fs.ModeSetgid); err != nil {
			return "", err
		}
		if err := f.Chmod(ctx, j(r, "wide"), 0o777|fs.ModeSticky); err != nil {
			return "", err
		}
		a, err := f.Stat(ctx, j(r, "d", "new"))
		if err != nil {
			return "", err
		}
		b, err := f.Stat(ctx, j(r, "wide"))
		return a.Mode.String() + " " + b.Mode.String(), err
	}},
	{"writefile/keeps-setuid", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.WriteFile(ctx, j(r, "d", "new"), strings.NewReader("replaced"), 0o644); err != nil {
			return "", err
		}
		fi, err := f.Stat(ctx, j(r, "d", "new"))
		return infoString(fi), err
	}},
	{"chmod/missing", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Chmod(ctx, j(r, "zz"), 0o644)
	}},
	{"chown/self", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.Chown(ctx, j(r, "d", "f"), os.Getuid(), os.Getgid()); err != nil {
			return "", err
		}
		if err := f.Chown(ctx, j(r, "d", "f"), -1, -1); err != nil {
			return "", err
		}
		fi, err := f.Stat(ctx, j(r, "d", "f"))
		return infoString(fi), err
	}},
	{"symlink", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.Symlink(ctx, "f", j(r, "d", "l")); err != nil {
			return "", err
		}
		t, err := f.Readlink(ctx, j(r, "d", "l"))
		if err != nil {
			return "", err
		}
		li, err := f.Lstat(ctx, j(r, "d", "l"))
		if err != nil {
			return "", err
		}
		si, err := f.Stat(ctx, j(r, "d", "l"))
		return t + " | " + infoString(li) + " | " + infoString(si), err
	}},
	{"symlink/dangling-odd-target", func(ctx context.Context, f providers.Files, r string) (string, error) {
		target := "../x/./y//z \n\"'-\xff"
		if err := f.Symlink(ctx, target, j(r, "d", "dangling")); err != nil {
			return "", err
		}
		t, err := f.Readlink(ctx, j(r, "d", "dangling"))
		if err != nil {
			return "", err
		}
		_, serr := f.Stat(ctx, j(r, "d", "dangling"))
		return fmt.Sprintf("%q stat:%s", t, errnoString(serr)), nil
	}},
	{"symlink/exists", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Symlink(ctx, "f", j(r, "d", "l"))
	}},
	{"readlink/not-link", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return f.Readlink(ctx, j(r, "d", "f"))
	}},
	{"link", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.Link(ctx, j(r, "d", "f"), j(r, "d", "h")); err != nil {
			return "", err
		}
		fi, err := f.Stat(ctx, j(r, "d", "f"))
		return infoString(fi), err
	}},
	{"link/exists", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Link(ctx, j(r, "d", "f"), j(r, "d", "h"))
	}},
	{"rename", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Rename(ctx, j(r, "d", "h"), j(r, "d", "g"))
	}},
	{"rename/replace", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.Rename(ctx, j(r, "d", "new"), j(r, "d", "g")); err != nil {
			return "", err
		}
		return readAll(ctx, f, j(r, "d", "g"))
	}},
	{"rename/missing", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Rename(ctx, j(r, "d", "new"), j(r, "d", "g2"))
	}},
	{"rename/file-over-dir", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Rename(ctx, j(r, "d", "g"), j(r, "wide"))
	}},
	{"rename/dir-over-file", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Rename(ctx, j(r, "wide"), j(r, "d", "g"))
	}},
	{"rename/dir-over-nonempty", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Rename(ctx, j(r, "wide"), j(r, "d"))
	}},
	{"rename/dir-into-itself", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Rename(ctx, j(r, "d"), j(r, "d", "sub"))
	}},
	{"remove/dir", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Remove(ctx, j(r, "wide"))
	}},
	{"remove/missing", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Remove(ctx, j(r, "zz"))
	}},
	{"remove/symlink-not-target", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.Remove(ctx, j(r, "d", "l")); err != nil {
			return "", err
		}
		return readAll(ctx, f, j(r, "d", "f"))
	}},
	{"rmdir/nonempty", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Rmdir(ctx, j(r, "d"))
	}},
	{"rmdir/file", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Rmdir(ctx, j(r, "d", "f"))
	}},
	{"rmdir", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Rmdir(ctx, j(r, "wide"))
	}},
	{"notdir/mkdir", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Mkdir(ctx, j(r, "d", "f", "x"), 0o755)
	}},
	{"notdir/stat", func(ctx context.Context, f providers.Files, r string) (string, error) {
		_, err := f.Stat(ctx, j(r, "d", "f", "x"))
		return "", err
	}},
	{"notdir/readdir", func(ctx context.Context, f providers.Files, r string) (string, error) {
		_, err := f.ReadDir(ctx, j(r, "d", "f"))
		return "", err
	}},
	{"isdir/readfile", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return readAll(ctx, f, j(r, "d"))
	}},
	{"isdir/readat", func(ctx context.Context, f providers.Files, r string) (string, error) {
		_, err := f.ReadAt(ctx, j(r, "d"), make([]byte, 4), 0)
		return "", err
	}},
	{"isdir/writefile", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.WriteFile(ctx, j(r, "d"), strings.NewReader("x"), 0o644)
	}},
	{"isdir/writeat", func(ctx context.Context, f providers.Files, r string) (string, error) {
		_, err := f.WriteAt(ctx, j(r, "d"), []byte("x"), 0)
		return "", err
	}},
	{"isdir/create", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Create(ctx, j(r, "d"), 0o644, false)
	}},
	{"nametoolong", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Create(ctx, j(r, longName), 0o644, false)
	}},
	{"create/truncates", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.Create(ctx, j(r, "d", "g"), 0o600, false); err != nil {
			return "", err
		}
		fi, err := f.Stat(ctx, j(r, "d", "g"))
		return infoString(fi), err
	}},
	{"utimes/ns", func(ctx context.Context, f providers.Files, r string) (string, error) {
		at := time.Date(2021, 3, 4, 5, 6, 7, 123456789, time.UTC)
		mt := time.Date(2022, 8, 9, 10, 11, 12, 987654321, time.UTC)
		if err := f.Utimes(ctx, j(r, "d", "f"), at, mt); err != nil {
			return "", err
		}
		if err := f.Utimes(ctx, j(r, "d", "f"), time.Time{}, mt.Add(1)); err != nil { // atime unchanged
			return "", err
		}
		fi, err := f.Stat(ctx, j(r, "d", "f"))
		return fi.Atime.UTC().Format(time.RFC3339Nano) + " " + fi.Mtime.UTC().Format(time.RFC3339Nano), err
	}},
	{"utimes/missing", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Utimes(ctx, j(r, "zz"), time.Now(), time.Now())
	}},
	{"fsync", func(ctx context.Context, f providers.Files, r string) (string, error) {
		if err := f.Fsync(ctx, j(r, "d", "f")); err != nil {
			return "", err
		}
		return "", f.Fsync(ctx, j(r, "d"))
	}},
	{"fsync/missing", func(ctx context.Context, f providers.Files, r string) (string, error) {
		return "", f.Fsync(ctx, j(r, "zz"))
	}},
	{"statfs", func(ctx context.Context, f providers.Files, r string) (string, error) {
		st, err := f.Statfs(ctx, r)
		return fmt.Sprintf("bsize=%d namelen=%d files>0:%v", st.Bsize, st.NameLen, st.Files > 0), err
	}},
	{"statfs/missing", func(ctx context.Context, f providers.Files, r string) (string, error) {
		_, err := f.Statfs(ctx, j(r, "zz"))
		return "", err
	}},
	{"readdir", func(ctx context.Context, f providers.Files, r string) (string, error) {
		fis, err := f.ReadDir(ctx, j(r, "d"))
		return infosString(fis), err
	}},
	{"readdir/missing", func(ctx context.Context, f providers.Files, r string) (string, error) {
		_, err := f.ReadDir(ctx, j(r, "zz"))
		return "", err
	}},
	{"walk", func(ctx context.Context, f providers.Files, r string) (string, error) {
		fis, err := f.(providers.Walker).Walk(ctx, r)
		return infosString(fis), err
	}},
	{"walk/file", func(ctx context.Context, f providers.Files, r string) (string, error) {
		_, err := f.(providers.Walker).Walk(ctx, j(r, "d", "f"))
		return "", err
	}},
	{"walk/missing", func(ctx context.Context, f providers.Files, r string) (string, error) {
		_, err := f.(providers.Walker).Walk(ctx, j(r, "zz"))
		return "", err
	}},
}

// runDifferential runs ops against the reference on one tree and against
// f on another, and checks that every result and errno and the final trees
// are the same; boxSnap is the box tree as snapshot makes it.
func runDifferential(t *testing.T, f providers.Files, refRoot, boxRoot string, boxSnap func() (map[string]string, error)) {
	ctx := bg(t)
	for _, op := range fileOps {
		want, werr := op.run(ctx, osFiles{}, refRoot)
		got, gerr := op.run(ctx, f, boxRoot)
		if errnoString(gerr) != errnoString(werr) || got != want {
			t.Errorf("%s:\n  os:    %q %s\n  agent: %q %s", op.name, want, errnoString(werr), got, errnoString(gerr))
		}
		if werr != nil && gerr != nil && gerr != io.EOF {
			if _, ok := providers.ErrnoOf(gerr); !ok || providers.CodeOf(gerr) == providers.Unknown {
				t.Errorf("%s: agent error %v carries no errno or code", op.name, gerr)
			}
		}
	}
	ws, err := snapshot(refRoot)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := boxSnap()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(sortedKeys(ws), "\n") != strings.Join(sortedKeys(gs), "\n") {
		t.Errorf("trees differ:\n os:    %q\n agent: %q", sortedKeys(ws), sortedKeys(gs))
	}
	for k, v := range ws {
		if k != "." && gs[k] != v {
			t.Errorf("entry %s: os %q, agent %q", k, v, gs[k])
		}
	}
}

func TestClientMatchesOS(t *testing.T) {
	ps := newPipeServer(t, 10*time.Second)
	ref, box := t.TempDir(), t.TempDir()
	runDifferential(t, ps.client, ref, box, func() (map[string]string, error) { return snapshot(box) })
}

func TestStatIsExact(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("abc"), 0o640); err != nil {
		t.Fatal(err)
	}
	os.Link(p, filepath.Join(dir, "f2"))
	at := time.Unix(1714979289, 123456789)
	mt := time.Unix(1714979300, 987654321)
	if err := os.Chtimes(p, at, mt); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	for _, via := range []string{"stat", "lstat", "readdir", "walk"} {
		var fi providers.FileInfo
		var err error
		switch via {
		case "stat":
			fi, err = c.Stat(ctx, p)
		case "lstat":
			fi, err = c.Lstat(ctx, p)
		case "readdir", "walk":
			var fis []providers.FileInfo
			if via == "readdir" {
				fis, err = c.ReadDir(ctx, dir)
			} else {
				fis, err = c.Walk(ctx, dir)
			}
			if err == nil {
				fi = fis[0]
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", via, err)
		}
		if !fi.Mtime.Equal(mt) || !fi.Atime.Equal(at) || fi.Ctime.UnixNano() != st.Ctim.Nano() {
			t.Errorf("%s: times m=%v a=%v c=%v, want m=%v a=%v c=%d", via, fi.Mtime, fi.Atime, fi.Ctime, mt, at, st.Ctim.Nano())
		}
		if fi.Ino != st.Ino || fi.Nlink != 2 || fi.Dev != uint64(st.Dev) || fi.UID != st.Uid || fi.GID != st.Gid ||
			fi.Size != 3 || fi.Mode != 0o640 || fi.Name != "f" {
			t.Errorf("%s: got %+v, want ino=%d nlink=2 dev=%d uid=%d gid=%d size=3 mode=0640 name=f", via, fi, st.Ino, st.Dev, st.Uid, st.Gid)
		}
	}
}

// TestOddNames: a path with spaces, newlines, quotes, a leading '-', shell
// metacharacters and bytes that are not UTF-8 goes through every operation
// untouched.
func TestOddNames(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	names := []string{
		"with space", "new\nline", `q"uo'te`, "-dash", "--", "$(touch pwned)", "`x`;*?[]",
		"\xff\xfe bytes", "tab\there", "back\\slash", "..dots", "a=b&c%2Fd?e", "#hash",
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := c.Mkdir(ctx, p, 0o755); err != nil {
			t.Fatalf("mkdir %q: %v", n, err)
		}
		f := filepath.Join(p, n)
		if err := c.WriteFile(ctx, f, strings.NewReader(n), 0o644); err != nil {
			t.Fatalf("writefile %q: %v", n, err)
		}
		if b, err := os.ReadFile(f); err != nil || string(b) != n {
			t.Fatalf("on disk %q: %q %v", n, b, err)
		}
		if s, err := readAll(ctx, c, f); err != nil || s != n {
			t.Fatalf("readfile %q: %q %v", n, s, err)
		}
		if err := c.Symlink(ctx, n, f+".l"); err != nil {
			t.Fatalf("symlink %q: %v", n, err)
		}
		if tg, err := c.Readlink(ctx, f+".l"); err != nil || tg != n {
			t.Fatalf("readlink %q: %q %v", n, tg, err)
		}
		if err := c.Rename(ctx, f, f+".r"); err != nil {
			t.Fatalf("rename %q: %v", n, err)
		}
		if _, err := c.SHA256(ctx, f+".r"); err != nil {
			t.Fatalf("sha256 %q: %v", n, err)
		}
	}
	fis, err := c.Walk(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := osFiles{}.Walk(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if infosString(fis) != infosString(ref) {
		t.Errorf("walk differs:\nagent:\n%s\nos:\n%s", infosString(fis), infosString(ref))
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Error("a name was run by a shell")
	}
}

func TestReservedPrefixRefused(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	_, err := c.Stat(bg(t), ReservedDir+"/walk?root=%2F")
	if providers.CodeOf(err) != providers.Unsupported {
		t.Fatalf("stat under %s: %v, want unsupported", ReservedDir, err)
	}
	_, err = c.Stat(bg(t), "relative")
	if providers.CodeOf(err) != providers.Invalid {
		t.Fatalf("relative path: %v, want invalid", err)
	}
}

func TestErrnoCodes(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), nil, 0o644)
	os.MkdirAll(filepath.Join(dir, "full", "x"), 0o755)
	cases := []struct {
		name  string
		err   error
		errno syscall.Errno
		code  providers.Code
	}{
		{"ENOENT", c.Remove(ctx, filepath.Join(dir, "nope")), syscall.ENOENT, providers.NotFound},
		{"EEXIST", c.Mkdir(ctx, filepath.Join(dir, "f"), 0o755), syscall.EEXIST, providers.Exists},
		{"ENOTEMPTY", c.Rmdir(ctx, filepath.Join(dir, "full")), syscall.ENOTEMPTY, providers.Exists},
		{"EISDIR", c.Remove(ctx, filepath.Join(dir, "full")), syscall.EISDIR, providers.Invalid},
		{"ENOTDIR", c.Mkdir(ctx, filepath.Join(dir, "f", "x"), 0o755), syscall.ENOTDIR, providers.Invalid},
		{"ENAMETOOLONG", c.Mkdir(ctx, filepath.Join(dir, longName), 0o755), syscall.ENAMETOOLONG, providers.Invalid},
	}
	if _, err := os.Stat("/dev/shm"); err == nil {
		other, err := os.MkdirTemp("/dev/shm", "agent-test")
		if err == nil {
			defer os.RemoveAll(other)
			cases = append(cases, struct {
				name  string
				err   error
				errno syscall.Errno
				code  providers.Code
			}{"EXDEV", c.Link(ctx, filepath.Join(dir, "f"), filepath.Join(other, "f")), syscall.EXDEV, providers.Invalid})
		}
	}
	for _, tc := range cases {
		errno, ok := providers.ErrnoOf(tc.err)
		if !ok || errno != tc.errno || providers.CodeOf(tc.err) != tc.code {
			t.Errorf("%s: got %v (errno %v, code %v), want errno %v code %v", tc.name, tc.err, errno, providers.CodeOf(tc.err), tc.errno, tc.code)
		}
		var pe *providers.Error
		if !errors.As(tc.err, &pe) || pe.Box != "pipe" || pe.Path == "" || !strings.HasPrefix(pe.Op, "agent.") {
			t.Errorf("%s: error fields %+v", tc.name, pe)
		}
	}
	if os.Geteuid() == 0 {
		t.Log("EACCES not tested: running as root")
	}
}

// makeTree makes n files in nested directories under dir.
func makeTree(t testing.TB, dir string, n int, nameLen int) {
	for i := range n {
		d := filepath.Join(dir, fmt.Sprintf("d%02d", i%17), fmt.Sprintf("e%d", i%5))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("f%05d-%s", i, strings.Repeat("x", nameLen))
		if err := os.WriteFile(filepath.Join(d, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			os.Symlink(name, filepath.Join(d, name+".lnk"))
		}
	}
}

func TestWalkTree(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	for _, tc := range []struct {
		name    string
		n, nlen int
	}{
		{"1000-files-inline", 1000, 4},
		{"3000-files-streamed", 3000, 60}, // a listing larger than inlineMax
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			makeTree(t, dir, tc.n, tc.nlen)
			want, err := osFiles{}.Walk(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Walk(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("walk: %d entries, want %d", len(got), len(want))
			}
			for i := range want {
				w, g := want[i], got[i]
				if w.Name != g.Name || w.Mode != g.Mode || w.Size != g.Size || !w.Mtime.Equal(g.Mtime) ||
					w.Ino != g.Ino || w.Target != g.Target || w.Nlink != g.Nlink {
					t.Fatalf("entry %d: got %+v, want %+v", i, g, w)
				}
			}
			st, _ := c.Stat(ctx, dir) // check that the session still works
			if !st.IsDir() {
				t.Fatal("stat after walk failed")
			}
		})
	}
}

func TestLargeData(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	rnd := rand.New(rand.NewSource(1))
	for _, size := range []int{0, 1, inlineMax - 1, inlineMax, inlineMax + 1, 5<<20 + 17} {
		data := make([]byte, size)
		rnd.Read(data)
		p := filepath.Join(dir, fmt.Sprintf("f%d", size))
		// A reader with no Len, so the client cannot know the size ahead.
		if err := c.WriteFile(ctx, p, io.MultiReader(bytes.NewReader(data)), 0o644); err != nil {
			t.Fatalf("writefile %d: %v", size, err)
		}
		if b, _ := os.ReadFile(p); !bytes.Equal(b, data) {
			t.Fatalf("writefile %d: on disk %d bytes differ", size, len(b))
		}
		s, err := readAll(ctx, c, p)
		if err != nil || s != string(data) {
			t.Fatalf("readfile %d: %d bytes, %v", size, len(s), err)
		}
		sum, err := c.SHA256(ctx, p)
		if err != nil || sum != sha256.Sum256(data) {
			t.Fatalf("sha256 %d: %x %v", size, sum, err)
		}
		if size > 100 {
			buf := make([]byte, size-50)
			n, err := c.ReadAt(ctx, p, buf, 50)
			if err != nil || n != len(buf) || !bytes.Equal(buf, data[50:]) {
				t.Fatalf("readat %d: %d %v", size, n, err)
			}
			n, err = c.ReadAt(ctx, p, make([]byte, size), 50)
			if err != io.EOF || n != size-50 {
				t.Fatalf("readat %d past end: %d %v, want %d EOF", size, n, err, size-50)
			}
			patch := make([]byte, min(size/2, inlineMax+5))
			rnd.Read(patch)
			if n, err := c.WriteAt(ctx, p, patch, 30); err != nil || n != len(patch) {
				t.Fatalf("writeat %d: %d %v", size, n, err)
			}
			copy(data[30:], patch)
			if b, _ := os.ReadFile(p); !bytes.Equal(b, data) {
				t.Fatalf("writeat %d: content differs", size)
			}
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 6 {
		t.Errorf("temporary files left: %d entries", len(ents))
	}
}

type failingReader struct {
	r     io.Reader
	after int
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.after <= 0 {
		return 0, errors.New("reader broke")
	}
	p = p[:min(len(p), f.after)]
	n, err := f.r.Read(p)
	f.after -= n
	return n, err
}

// TestWriteFileAtomic: a reader in the box sees the old file or the new
// one, never half; a write that fails leaves the old file and no debris.
func TestWriteFileAtomic(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	old := bytes.Repeat([]byte("o"), 1<<20)
	os.WriteFile(p, old, 0o600)
	for _, after := range []int{10, inlineMax + 10, 3 << 20} {
		src := &failingReader{r: bytes.NewReader(bytes.Repeat([]byte("n"), 4<<20)), after: after}
		err := c.WriteFile(ctx, p, src, 0o644)
		if err == nil || !strings.Contains(err.Error(), "reader broke") {
			t.Fatalf("after %d: WriteFile with a broken reader: %v", after, err)
		}
		if b, _ := os.ReadFile(p); !bytes.Equal(b, old) {
			t.Fatalf("after %d: the old file was changed (%d bytes)", after, len(b))
		}
	}
	// Concurrent readers see whole files only.
	newData := bytes.Repeat([]byte("N"), 1<<20)
	stop := make(chan struct{})
	var bad []int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(p)
			if err == nil && !bytes.Equal(b, old) && !bytes.Equal(b, newData) {
				bad = append(bad, len(b))
			}
		}
	}()
	for i := range 10 {
		data := old
		if i%2 == 0 {
			data = newData
		}
		if err := c.WriteFile(ctx, p, bytes.NewReader(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("a reader saw a partial file: sizes %v", bad)
	}
	if fi, _ := os.Stat(p); fi.Mode() != 0o600 {
		t.Errorf("mode %v, want the old 0600 kept", fi.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("debris left: %v", ents)
	}
}

func TestConcurrentCalls(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	ctx := bg(t)
	dir := t.TempDir()
	makeTree(t, dir, 200, 3)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				p := filepath.Join(dir, fmt.Sprintf("g%d-%d", g, i))
				if err := c.WriteFile(ctx, p, strings.NewReader(p), 0o644); err != nil {
					errs <- err
					return
				}
				if s, err := readAll(ctx, c, p); err != nil || s != p {
					errs <- fmt.Errorf("read back %q: %q %v", p, s, err)
					return
				}
				if _, err := c.Stat(ctx, dir); err != nil {
					errs <- err
					return
				}
			}
			if _, err := c.Walk(ctx, dir); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := c.RoundTrips(); n < 8*50*3 {
		t.Errorf("RoundTrips = %d, want at least %d", n, 8*50*3)
	}
}

// TestHungAgent: an agent that stops answering is given up within the
// liveness bound; the call in flight and every later call fail.
func TestHungAgent(t *testing.T) {
	ps := newPipeServer(t, 300*time.Millisecond)
	c := ps.client
	dir := t.TempDir()
	if _, err := c.Stat(bg(t), dir); err != nil {
		t.Fatal(err)
	}
	ps.out.freeze()
	start := time.Now()
	_, err := c.Stat(context.Background(), dir)
	took := time.Since(start)
	if providers.CodeOf(err) != providers.Liveness {
		t.Fatalf("stat on a hung agent: %v, want liveness", err)
	}
	if took > 5*time.Second {
		t.Errorf("liveness took %v with a 300ms bound", took)
	}
	err = c.Mkdir(context.Background(), filepath.Join(dir, "x"), 0o755)
	if providers.CodeOf(err) != providers.Liveness {
		t.Fatalf("call after the teardown: %v, want liveness", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed")
	}
}

// TestHungAgentMutation: a mutation in flight when the channel is lost
// may or may not have happened.
func TestHungAgentMutation(t *testing.T) {
	ps := newPipeServer(t, 300*time.Millisecond)
	ps.out.freeze()
	err := ps.client.Mkdir(context.Background(), filepath.Join(t.TempDir(), "x"), 0o755)
	if providers.CodeOf(err) != providers.OutcomeUnknown || !errors.Is(err, providers.ErrLiveness) {
		t.Fatalf("mutation on a hung agent: %v, want outcome_unknown wrapping liveness", err)
	}
}

func TestCallerDeadline(t *testing.T) {
	ps := newPipeServer(t, 10*time.Second)
	ps.out.freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := ps.client.Stat(ctx, "/")
	if providers.CodeOf(err) != providers.Timeout {
		t.Fatalf("stat past the caller's deadline: %v, want timeout", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = ps.client.Stat(ctx, "/")
	if providers.CodeOf(err) != providers.Aborted {
		t.Fatalf("stat cancelled: %v, want aborted", err)
	}
	ps.out.thaw()
	if _, err := ps.client.Stat(bg(t), "/"); err != nil {
		t.Fatalf("the channel did not survive a caller's deadline: %v", err)
	}
}

func TestAgentGone(t *testing.T) {
	ps := newPipeServer(t, 10*time.Second)
	ps.stop()
	_, err := ps.client.Stat(bg(t), "/")
	if providers.CodeOf(err) != providers.TransportLost {
		t.Fatalf("stat after the agent went: %v, want transport_lost", err)
	}
	select {
	case <-ps.client.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed")
	}
}

func TestClientClose(t *testing.T) {
	ps := newPipeServer(t, 10*time.Second)
	if err := ps.client.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ps.done: // the agent saw its stdin close and returned
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
	_, err := ps.client.Stat(bg(t), "/")
	if providers.CodeOf(err) != providers.Invalid {
		t.Fatalf("stat after Close: %v, want invalid", err)
	}
}

// TestHandshakeLiveness: an agent that never answers the SFTP INIT is
// given up within the liveness bound.
func TestHandshakeLiveness(t *testing.T) {
	cr, _ := io.Pipe() // nothing is ever written
	_, cw := io.Pipe()
	go io.Copy(io.Discard, cr)
	r, w := io.Pipe()
	go func() { io.Copy(io.Discard, r) }()
	start := time.Now()
	_, err := NewClient(context.Background(), cr, w, ClientOptions{Box: "mute", Liveness: 200 * time.Millisecond})
	if providers.CodeOf(err) != providers.Liveness {
		t.Fatalf("handshake with a mute agent: %v, want liveness", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v with a 200ms bound", took)
	}
	cw.Close()
}

// TestReadFileStreamEndsWithCtx: a streamed read stops with the context's
// error once the context ends.
func TestReadFileStreamEndsWithCtx(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	p := filepath.Join(t.TempDir(), "big")
	os.WriteFile(p, bytes.Repeat([]byte("z"), 8<<20), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	rc, err := c.ReadFile(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	cancel()
	_, err = io.Copy(io.Discard, rc)
	if providers.CodeOf(err) != providers.Aborted {
		t.Fatalf("read after cancel: %v, want aborted", err)
	}
	if _, err := c.Stat(bg(t), p); err != nil {
		t.Fatalf("the session did not survive: %v", err)
	}
}

// A panic while an answer is decoded (a hostile or broken agent) is that
// call's error; the daemon and the channel go on.
func TestCallPanicIsAnError(t *testing.T) {
	c := newPipeServer(t, 10*time.Second).client
	for _, ctx := range []context.Context{context.Background(), bg(t)} {
		_, err := call(ctx, c, "agent.Test", "/x", false, func() (int, error) { panic("bad answer") })
		if err == nil || !strings.Contains(err.Error(), "bad answer") {
			t.Errorf("a panic in the answer's decoding: %v", err)
		}
	}
	_, err := c.Lstat(bg(t), "/")
	if err != nil {
		t.Errorf("the channel after the panic: %v", err)
	}
}
