package archil

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// errnoBase is what boxfs's own file scripts add to an errno for their
// exit status.
const errnoBase = 64

// spoolMemMax is the most of an upload kept in memory; more goes to a
// temporary file, so that a retried upload sends the same bytes.
const spoolMemMax = 8 << 20

// The scripts behind the object API's uploads: each puts a staged object
// (outside the workspace, so that its upload needs no checkout) in place.
const (
	// PATH STAGED PERM: replace PATH with STAGED; an existing PATH keeps
	// its mode, a new one gets PERM under the umask.
	scriptPlace = `f=$1 t=$2 perm=$3
fail() { rm -f -- "$t"; exit $((64 + $1)); }
d=${f%/*}
[ -n "$d" ] || d=/
[ -e "$d" ] || fail 2
[ -d "$d" ] || fail 20
[ -d "$f" ] && fail 21
if [ -e "$f" ]; then m=$(stat -L -c %a -- "$f"); else m=$(printf %o $((8#$perm & ~8#$(umask)))); fi
chmod -- "$m" "$t" || fail 1
mv -f -- "$t" "$f" || fail 13
`
	// PATH STAGED OFF: write STAGED's bytes into the existing PATH at OFF.
	scriptWriteAt = `f=$1 t=$2 off=$3
fail() { rm -f -- "$t"; exit $((64 + $1)); }
[ -e "$f" ] || fail 2
[ -d "$f" ] && fail 21
dd if="$t" of="$f" bs=65536 seek="$off" oflag=seek_bytes conv=notrunc status=none || fail 5
rm -f -- "$t"
`
	// DIR STAGED: extract the tar STAGED into the existing DIR.
	scriptUntar = `p=$1 t=$2
fail() { rm -f -- "$t"; exit $((64 + $1)); }
[ -e "$p" ] || fail 2
[ -d "$p" ] || fail 20
tar -C "$p" -xf "$t" || { rm -f -- "$t"; exit 1; }
rm -f -- "$t"
`
	// PATH OUT: a tar of PATH (its base name first) into OUT, in a new
	// directory made for it.
	scriptTar = `p=$1 o=$2
[ -e "$p" ] || [ -L "$p" ] || exit 66
mkdir -- "${o%/*}" || exit 1
d=${p%/*}
[ -n "$d" ] || d=/
tar -C "$d" -cf "$o" -- "${p##*/}"
`
)

// inWorkspace returns the object key of a box path in the workspace (the
// workspace itself included).
func (b *Box) inWorkspace(p string) (string, bool) {
	ws := b.workspace()
	if b.rec.Root == "" || !path.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
		return "", false
	}
	p = path.Clean(p)
	if p == ws {
		return boxesDir + "/" + b.id, true
	}
	if rest, ok := strings.CutPrefix(p, ws+"/"); ok {
		return boxesDir + "/" + b.id + "/" + rest, true
	}
	return "", false
}

// unsettled leaves an operation to the caller's script.
func unsettled(op, box, p string) error {
	return providers.Errorf(providers.Unsupported, op, "not served by the object API").WithBox(box).WithPath(p)
}

// ReadFile streams a file of the workspace from the object API. A name the
// object API has no object for (missing, a directory, outside the
// workspace) is Unsupported, for a script to answer exactly.
func (b *Box) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	const op = "archil.ReadFile"
	key, ok := b.inWorkspace(name)
	if !ok {
		return nil, unsettled(op, b.id, name)
	}
	if err := b.checkLifetime(ctx, op); err != nil {
		return nil, err
	}
	resp, err := b.p.c.getObject(ctx, b.disk, key, nil)
	if statusOf(err) == http.StatusNotFound {
		return nil, unsettled(op, b.id, name)
	}
	if err != nil {
		return nil, wrap(op, b.id, err).WithPath(name)
	}
	return resp.Body, nil
}

// ReadAt reads up to len(p) bytes of a workspace file at off, with a
// ranged GET.
func (b *Box) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	const op = "archil.ReadAt"
	key, ok := b.inWorkspace(name)
	if !ok || off < 0 {
		return 0, unsettled(op, b.id, name)
	}
	if err := b.checkLifetime(ctx, op); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	h := http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1)}}
	resp, err := b.p.c.getObject(ctx, b.disk, key, h)
	switch statusOf(err) {
	case http.StatusNotFound:
		return 0, unsettled(op, b.id, name)
	case http.StatusRequestedRangeNotSatisfiable:
		return 0, io.EOF
	}
	if err != nil {
		return 0, wrap(op, b.id, err).WithPath(name)
	}
	defer resp.Body.Close()
	body := io.Reader(resp.Body)
	if resp.StatusCode == http.StatusOK { // the range was not honoured
		if _, err := io.CopyN(io.Discard, body, off); err == io.EOF {
			return 0, io.EOF
		} else if err != nil {
			return 0, wrap(op, b.id, err).WithPath(name)
		}
	}
	n, err := io.ReadFull(body, p)
	switch err {
	case nil:
		return n, nil
	case io.EOF, io.ErrUnexpectedEOF:
		return n, io.EOF
	}
	return n, wrap(op, b.id, err).WithPath(name)
}

// spool keeps an upload's bytes so that each attempt sends the same.
type spool struct {
	mem  []byte
	file *os.File
	size int64
}

func newSpool(r io.Reader) (*spool, error) {
	var buf bytes.Buffer
	n, err := io.CopyN(&buf, r, spoolMemMax+1)
	if err == io.EOF {
		return &spool{mem: buf.Bytes(), size: n}, nil
	}
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "boxfs-archil-upload-")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	m, err := io.Copy(f, io.MultiReader(&buf, r))
	if err != nil {
		f.Close()
		return nil, err
	}
	return &spool{file: f, size: m}, nil
}

// src gives the bytes to read at any offset, for each attempt and part.
func (s *spool) src() io.ReaderAt {
	if s.file == nil {
		return bytes.NewReader(s.mem)
	}
	return s.file
}

func (s *spool) close() {
	if s.file != nil {
		s.file.Close()
	}
}

// stage uploads r to an object under the box's command directory, which
// no command's checkout covers, retrying while the path is held. It
// returns the staged object's key.
func (b *Box) stage(ctx context.Context, op string, r io.Reader) (string, error) {
	sp, err := newSpool(r)
	if err != nil {
		return "", providers.E(providers.Unknown, op, err).WithBox(b.id)
	}
	defer sp.close()
	key := cmdsDir + "/" + b.id + "/up-" + providers.NewID(8)
	until := time.Now().Add(b.p.queueWait)
	for tries := 1; ; tries++ {
		err := b.p.c.putObject(ctx, b.disk, key, sp.src(), sp.size)
		if err == nil {
			return key, nil
		}
		if s3CodeOf(err) != s3Busy || time.Now().After(until) {
			return "", wrap(op, b.id, err)
		}
		if err := sleep(ctx, min(backoff(tries), time.Second)); err != nil {
			return "", wrap(op, b.id, err)
		}
	}
}

// script runs one of boxfs's file scripts in this process's turn: an
// exit of errnoBase+errno is that errno. owns are the disk-relative paths
// outside the box's directory the script changes, which its command
// checks out first.
func (b *Box) script(ctx context.Context, op, name, script string, owns []string, args ...string) ([]byte, error) {
	var out, errb bytes.Buffer
	req := providers.ExecRequest{Argv: append([]string{"bash", "-c", script, "boxfs"}, args...), Stdout: &out, Stderr: &errb}
	code, err := b.command(ctx, nil, req, owns...)
	if err != nil {
		return nil, providers.E(0, op, err).WithBox(b.id).WithPath(name)
	}
	switch {
	case code == 0:
		return out.Bytes(), nil
	case code > errnoBase && code < 126:
		return nil, providers.PathError(op, b.id, name, syscall.Errno(code-errnoBase))
	}
	return nil, providers.Errorf(providers.Unknown, op, "boxfs's script exited %d: %s", code, clip(errb.String())).WithBox(b.id).WithPath(name)
}

// upload stages r and runs script with the staged path, in one turn.
func (b *Box) upload(ctx context.Context, op, name string, r io.Reader, script string, args func(staged string) []string) error {
	if err := b.checkLifetime(ctx, op); err != nil {
		return err
	}
	release, err := b.st.turn(ctx)
	if err != nil {
		return wrap(op, b.id, err)
	}
	defer release()
	key, err := b.stage(ctx, op, r)
	if err != nil {
		return err
	}
	// The script moves or removes the staged file: its command checks it
	// out first, as shared mode needs for a change.
	_, err = b.script(ctx, op, name, script, []string{key}, args(b.rec.Root+"/"+key)...)
	return err
}

// refused is the answer to a mutation outside the workspace.
func (b *Box) refused(op, p string) error {
	return providers.PathError(op, b.id, p, syscall.EACCES)
}

// WriteFile replaces a workspace file with r's bytes: an upload, then one
// command that gives it its mode and renames it into place.
func (b *Box) WriteFile(ctx context.Context, name string, r io.Reader, perm providers.FileMode) error {
	const op = "archil.WriteFile"
	if _, ok := b.inWorkspace(name); !ok {
		return b.refused(op, name)
	}
	mode := strconv.FormatUint(uint64(perm.Perm()), 8)
	return b.upload(ctx, op, name, r, scriptPlace, func(staged string) []string { return []string{path.Clean(name), staged, mode} })
}

// WriteAt writes p into an existing workspace file at off: an upload,
// then one command that writes it in.
func (b *Box) WriteAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	const op = "archil.WriteAt"
	if _, ok := b.inWorkspace(name); !ok {
		return 0, b.refused(op, name)
	}
	if off < 0 {
		return 0, providers.PathError(op, b.id, name, syscall.EINVAL)
	}
	err := b.upload(ctx, op, name, bytes.NewReader(p), scriptWriteAt, func(staged string) []string {
		return []string{path.Clean(name), staged, strconv.FormatInt(off, 10)}
	})
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// PutArchive extracts a tar into a workspace directory: an upload, then
// one tar command.
func (b *Box) PutArchive(ctx context.Context, dir string, tar io.Reader) error {
	const op = "archil.PutArchive"
	if _, ok := b.inWorkspace(dir); !ok {
		return b.refused(op, dir)
	}
	return b.upload(ctx, op, dir, tar, scriptUntar, func(staged string) []string { return []string{path.Clean(dir), staged} })
}

// GetArchive returns a tar of path, made by one command into an object
// and read from it (member names start with path's base name).
func (b *Box) GetArchive(ctx context.Context, p string) (io.ReadCloser, error) {
	const op = "archil.GetArchive"
	if !path.IsAbs(p) || strings.IndexByte(p, 0) >= 0 || b.rec.Root == "" {
		return nil, providers.Errorf(providers.Invalid, op, "path %q is not absolute", p).WithBox(b.id)
	}
	if err := b.checkLifetime(ctx, op); err != nil {
		return nil, err
	}
	// The script makes the archive's directory, which gives it to the
	// command's container on a shared disk; the host reads the archive
	// once the command has ended.
	key := cmdsDir + "/" + b.id + "/tar-" + providers.NewID(8) + "/archive.tar"
	release, err := b.st.turn(ctx)
	if err != nil {
		return nil, wrap(op, b.id, err)
	}
	_, err = b.script(ctx, op, p, scriptTar, nil, path.Clean(p), b.rec.Root+"/"+key)
	release()
	if err != nil {
		return nil, err
	}
	resp, err := b.p.c.getObject(ctx, b.disk, key, nil)
	if err != nil {
		return nil, wrap(op, b.id, err).WithPath(p)
	}
	return &removeOnClose{ReadCloser: resp.Body, remove: func() {
		b.p.c.deleteObject(context.WithoutCancel(ctx), b.disk, key)
	}}, nil
}

// removeOnClose deletes a temporary object once its reader is closed.
type removeOnClose struct {
	io.ReadCloser
	remove func()
}

func (r *removeOnClose) Close() error {
	err := r.ReadCloser.Close()
	r.remove()
	return err
}

// The mutations the object API does not serve: each is refused outside
// the workspace, and left to the caller's script (Unsupported) inside it.

// guard refuses names outside the workspace and leaves the rest.
func (b *Box) guard(op string, names ...string) error {
	for _, n := range names {
		if _, ok := b.inWorkspace(n); !ok {
			return b.refused(op, n)
		}
	}
	return unsettled(op, b.id, names[0])
}

// Create is served by a script in the workspace; refused elsewhere.
func (b *Box) Create(ctx context.Context, name string, perm providers.FileMode, exclusive bool) error {
	return b.guard("archil.Create", name)
}

// Mkdir is served by a script in the workspace; refused elsewhere.
func (b *Box) Mkdir(ctx context.Context, name string, perm providers.FileMode) error {
	return b.guard("archil.Mkdir", name)
}

// Remove is served by a script in the workspace; refused elsewhere.
func (b *Box) Remove(ctx context.Context, name string) error {
	return b.guard("archil.Remove", name)
}

// Rmdir is served by a script in the workspace; refused elsewhere.
func (b *Box) Rmdir(ctx context.Context, name string) error {
	return b.guard("archil.Rmdir", name)
}

// Rename is served by a script within the workspace; refused elsewhere.
func (b *Box) Rename(ctx context.Context, oldname, newname string) error {
	return b.guard("archil.Rename", oldname, newname)
}

// Chmod is served by a script in the workspace; refused elsewhere.
func (b *Box) Chmod(ctx context.Context, name string, mode providers.FileMode) error {
	return b.guard("archil.Chmod", name)
}

// Chown is served by a script in the workspace; refused elsewhere.
func (b *Box) Chown(ctx context.Context, name string, uid, gid int) error {
	return b.guard("archil.Chown", name)
}

// Utimes is served by a script in the workspace; refused elsewhere.
func (b *Box) Utimes(ctx context.Context, name string, atime, mtime time.Time) error {
	return b.guard("archil.Utimes", name)
}

// Truncate is served by a script in the workspace; refused elsewhere.
func (b *Box) Truncate(ctx context.Context, name string, size int64) error {
	return b.guard("archil.Truncate", name)
}

// Symlink is served by a script in the workspace; refused elsewhere.
func (b *Box) Symlink(ctx context.Context, target, name string) error {
	return b.guard("archil.Symlink", name)
}

// Link is served by a script within the workspace; refused elsewhere.
func (b *Box) Link(ctx context.Context, oldname, newname string) error {
	return b.guard("archil.Link", oldname, newname)
}
