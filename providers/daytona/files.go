package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
)

var (
	_ providers.Walker   = (*Box)(nil)
	_ providers.Archiver = (*Box)(nil)
)

// special are the mode bits the toolbox's permissions call cannot set (it
// passes the number to os.Chmod, which takes only the permission bits).
const special = fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// unsettled is the answer of a file method when the toolbox cannot say
// exactly what the operation would do (or did not say why it failed):
// Unsupported, with nothing changed, so the caller can answer otherwise.
func (b *Box) unsettled(op, p string, cause error) error {
	if cause == nil {
		cause = fmt.Errorf("the toolbox cannot settle this exactly")
	}
	return &providers.Error{Code: providers.Unsupported, Op: op, Box: b.id, Path: p, Err: cause}
}

// fileErr classifies a failed toolbox file call. A 404 is ENOENT when
// enoent says that is all it can mean for this call; failures of the
// transport, the server or the key are returned as they are; anything else
// is unsettled.
func (b *Box) fileErr(op, p string, err error, enoent bool) error {
	switch st := statusOf(err); {
	case st == http.StatusNotFound && enoent:
		return providers.PathError(op, b.id, p, syscall.ENOENT)
	case st == 0, st == http.StatusUnauthorized, st == http.StatusTooManyRequests, st >= 500:
		return wrap(op, b.id, err).WithPath(p)
	}
	return b.unsettled(op, p, err)
}

// checkAbs refuses a path that is not absolute or holds a NUL byte.
func (b *Box) checkAbs(op, p string) error {
	if err := b.gone(op); err != nil {
		return err
	}
	if !path.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
		return providers.Errorf(providers.Invalid, op, "path %q is not absolute or holds NUL", p).WithBox(b.id)
	}
	return nil
}

// infoDTO is the toolbox's FileInfo.
type infoDTO struct {
	Name        string `json:"name"`
	Size        int64  `json:"size"`
	Mode        string `json:"mode"`
	Permissions string `json:"permissions"`
	ModTime     string `json:"modTime"`
	ModifiedAt  string `json:"modifiedAt"`
	IsDir       bool   `json:"isDir"`
	Owner       string `json:"owner"`
	Group       string `json:"group"`
}

// info reads files/info (which follows symlinks).
func (b *Box) info(ctx context.Context, p string) (infoDTO, error) {
	var out infoDTO
	u, err := b.tb(ctx, "/files/info")
	if err != nil {
		return out, err
	}
	err = b.p.c.json(ctx, request{method: http.MethodGet, url: u, query: url.Values{"path": {p}}, idempotent: true}, &out)
	return out, err
}

// fileInfo converts the toolbox's FileInfo: mode (with its type and
// special bits, from Go's FileMode.String), size, mtime, owner.
func (d infoDTO) fileInfo(name string) (providers.FileInfo, error) {
	mode, err := parseMode(d.Mode)
	if err != nil {
		return providers.FileInfo{}, err
	}
	fi := providers.FileInfo{Name: path.Base(name), Mode: mode, Size: d.Size, Mtime: parseModTime(d.ModifiedAt, d.ModTime)}
	if n, err := strconv.ParseUint(d.Owner, 10, 32); err == nil {
		fi.UID = uint32(n)
	}
	if n, err := strconv.ParseUint(d.Group, 10, 32); err == nil {
		fi.GID = uint32(n)
	}
	return fi, nil
}

// parseMode reads Go's FileMode.String: type and special letters, then
// nine permission characters.
func parseMode(s string) (fs.FileMode, error) {
	if len(s) < 10 {
		return 0, fmt.Errorf("daytona: file mode %q is not Go's FileMode text", s)
	}
	head, perm := s[:len(s)-9], s[len(s)-9:]
	var m fs.FileMode
	for i, c := range perm {
		if c != '-' {
			if byte(c) != "rwxrwxrwx"[i] {
				return 0, fmt.Errorf("daytona: file mode %q is not Go's FileMode text", s)
			}
			m |= 1 << uint(8-i)
		}
	}
	letters := map[rune]fs.FileMode{
		'd': fs.ModeDir, 'a': fs.ModeAppend, 'l': fs.ModeExclusive, 'T': fs.ModeTemporary,
		'L': fs.ModeSymlink, 'D': fs.ModeDevice, 'p': fs.ModeNamedPipe, 'S': fs.ModeSocket,
		'u': fs.ModeSetuid, 'g': fs.ModeSetgid, 'c': fs.ModeCharDevice, 't': fs.ModeSticky, '?': fs.ModeIrregular,
	}
	for _, c := range head {
		if c == '-' {
			continue
		}
		bit, ok := letters[c]
		if !ok {
			return 0, fmt.Errorf("daytona: file mode %q is not Go's FileMode text", s)
		}
		m |= bit
	}
	return m, nil
}

// parseModTime reads modifiedAt (RFC 3339), else modTime (RFC 3339, or Go's
// Time.String of older daemons).
func parseModTime(modifiedAt, modTime string) time.Time {
	for _, v := range []string{modifiedAt, modTime} {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t
		}
		if t, err := time.Parse("2006-01-02 15:04:05.999999999 -0700 MST", v); err == nil {
			return t
		}
	}
	return time.Time{}
}

// Stat stats name through files/info, following symlinks. It knows mode,
// size, mtime and owner; inode, link count, atime and ctime are left zero.
// A missing name is ENOENT; a failure the toolbox does not explain is
// Unsupported.
func (b *Box) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	const op = "daytona.Stat"
	if err := b.checkAbs(op, name); err != nil {
		return providers.FileInfo{}, err
	}
	d, err := b.info(ctx, name)
	if err != nil {
		return providers.FileInfo{}, b.fileErr(op, name, err, true)
	}
	fi, err := d.fileInfo(name)
	if err != nil {
		return providers.FileInfo{}, b.unsettled(op, name, err)
	}
	return fi, nil
}

// download opens files/download of name (with a Range header when rng is
// set).
func (b *Box) download(ctx context.Context, name, rng string) (*http.Response, error) {
	u, err := b.tb(ctx, "/files/download")
	if err != nil {
		return nil, err
	}
	req := request{method: http.MethodGet, url: u, query: url.Values{"path": {name}}, idempotent: true}
	if rng != "" {
		req.header = http.Header{"Range": {rng}}
	}
	return b.p.c.do(ctx, req)
}

// ReadFile streams name through files/download (following symlinks).
func (b *Box) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	const op = "daytona.ReadFile"
	if err := b.checkAbs(op, name); err != nil {
		return nil, err
	}
	resp, err := b.download(ctx, name, "")
	if err != nil {
		return nil, b.fileErr(op, name, err, true)
	}
	return resp.Body, nil
}

// ReadAt reads up to len(p) bytes of name at off, through files/download
// with a Range header (a server that ignores it sends the whole file,
// which is then skipped to off); io.EOF at the end.
func (b *Box) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	const op = "daytona.ReadAt"
	if err := b.checkAbs(op, name); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, providers.Errorf(providers.Invalid, op, "negative offset %d", off).WithBox(b.id).WithPath(name)
	}
	if len(p) == 0 {
		return 0, nil
	}
	resp, err := b.download(ctx, name, fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1))
	if err != nil {
		if statusOf(err) == http.StatusRequestedRangeNotSatisfiable {
			return 0, io.EOF
		}
		return 0, b.fileErr(op, name, err, true)
	}
	defer resp.Body.Close()
	r := io.Reader(resp.Body)
	if resp.StatusCode == http.StatusOK && off > 0 {
		if _, err := io.CopyN(io.Discard, r, off); err != nil {
			if err == io.EOF {
				return 0, io.EOF
			}
			return 0, providers.E(providers.TransportLost, op, err).WithBox(b.id).WithPath(name)
		}
	}
	n, err := io.ReadFull(r, p)
	switch err {
	case nil:
		return n, nil
	case io.EOF, io.ErrUnexpectedEOF:
		return n, io.EOF
	}
	return n, providers.E(providers.TransportLost, op, err).WithBox(b.id).WithPath(name)
}

// replayable returns a function that opens r afresh for each attempt of an
// upload: r itself when it can seek, else a spool file on the host. The
// cleanup removes the spool.
func replayable(r io.Reader) (func() (io.Reader, error), func(), error) {
	if rs, ok := r.(io.ReadSeeker); ok {
		start, err := rs.Seek(0, io.SeekCurrent)
		if err == nil {
			return func() (io.Reader, error) {
				_, err := rs.Seek(start, io.SeekStart)
				return rs, err
			}, func() {}, nil
		}
	}
	f, err := os.CreateTemp("", "boxfs-daytona-upload-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { f.Close(); os.Remove(f.Name()) }
	if _, err := io.Copy(f, r); err != nil {
		cleanup()
		return nil, nil, err
	}
	return func() (io.Reader, error) {
		_, err := f.Seek(0, io.SeekStart)
		return f, err
	}, cleanup, nil
}

// upload writes the bytes open returns to the box file name through
// files/bulk-upload (parts files[0].path, then files[0].file). The daemon
// makes name's directory if it is missing, and writes the file under a
// temporary name first. Sending the same bytes again is harmless, so the
// call is retried.
func (b *Box) upload(ctx context.Context, name string, open func() (io.Reader, error)) error {
	if strings.TrimSpace(name) != name {
		return fmt.Errorf("daytona: the toolbox would not upload to %q as it is (it trims the path)", name)
	}
	u, err := b.tb(ctx, "/files/bulk-upload")
	if err != nil {
		return err
	}
	boundary := "boxfs-" + providers.NewID(12)
	// Each attempt streams the content through a pipe from a goroutine of
	// its own; the next attempt (and the end) first stops the last one, so
	// that two never read the source at once.
	var last *io.PipeReader
	var lastDone chan struct{}
	stopLast := func() {
		if last != nil {
			last.CloseWithError(io.ErrClosedPipe)
			<-lastDone
			last = nil
		}
	}
	defer stopLast()
	body := func() (io.Reader, error) {
		stopLast()
		src, err := open()
		if err != nil {
			return nil, err
		}
		pr, pw := io.Pipe()
		done := make(chan struct{})
		last, lastDone = pr, done
		go func() {
			defer close(done)
			pw.CloseWithError(writeUploadForm(pw, boundary, name, src))
		}()
		return pr, nil
	}
	return b.p.c.json(ctx, request{method: http.MethodPost, url: u, body: body,
		contentType: "multipart/form-data; boundary=" + boundary, idempotent: true}, nil)
}

// writeUploadForm writes the bulk upload's form of one file to w.
func writeUploadForm(w io.Writer, boundary, name string, src io.Reader) error {
	mw := multipart.NewWriter(w)
	if err := mw.SetBoundary(boundary); err != nil {
		return err
	}
	if err := mw.WriteField("files[0].path", name); err != nil {
		return err
	}
	// The daemon takes the path from the field above; the part's file name
	// only has to be a valid header value.
	part, err := mw.CreateFormFile("files[0].file", strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, path.Base(name)))
	if err != nil {
		return err
	}
	if _, err := io.Copy(part, src); err != nil {
		return err
	}
	return mw.Close()
}

// remove deletes one file through files (not recursively).
func (b *Box) remove(ctx context.Context, name string) error {
	u, err := b.tb(ctx, "/files")
	if err != nil {
		return err
	}
	return b.p.c.json(ctx, request{method: http.MethodDelete, url: u, query: url.Values{"path": {name}}, idempotent: true}, nil)
}

// permissions calls files/permissions with q (path set by the caller).
func (b *Box) permissions(ctx context.Context, q url.Values) error {
	u, err := b.tb(ctx, "/files/permissions")
	if err != nil {
		return err
	}
	return b.p.c.json(ctx, request{method: http.MethodPost, url: u, query: q, idempotent: true}, nil)
}

// move calls files/move, which refuses an existing destination. Its answer
// lost, the names tell whether it happened: it is sent again only when the
// source is still there and the destination is not.
func (b *Box) move(ctx context.Context, op, from, to string) error {
	u, err := b.tb(ctx, "/files/move")
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		resp, err := b.p.c.do(ctx, request{method: http.MethodPost, url: u, query: url.Values{"source": {from}, "destination": {to}}})
		if err == nil {
			defer resp.Body.Close()
			var out struct {
				Message string `json:"message"`
				Error   string `json:"error"`
			}
			data, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyMax))
			if json.Unmarshal(data, &out) == nil && out.Error != "" {
				// The daemon copied across devices and could not delete the source.
				return providers.Errorf(providers.Unknown, op, "the toolbox copied %q but left the source: %s", to, out.Error).WithBox(b.id).WithPath(from)
			}
			return nil
		}
		st := statusOf(err)
		if !(st == 0 || st == http.StatusTooManyRequests || st >= 500) || attempt >= maxTries || ctx.Err() != nil {
			return err
		}
		_, ferr := b.info(ctx, from)
		_, terr := b.info(ctx, to)
		switch {
		case statusOf(ferr) == http.StatusNotFound && terr == nil:
			return nil // it happened
		case ferr == nil && statusOf(terr) == http.StatusNotFound:
			time.Sleep(backoff(attempt))
		default:
			return providers.E(providers.OutcomeUnknown, op, err).WithBox(b.id).WithPath(from)
		}
	}
}

// WriteFile writes a new file atomically: r's bytes are uploaded to a
// temporary name in name's directory, given perm, then moved to name. The
// toolbox's move never replaces a file, so a name that exists is
// Unsupported (before r is read), as is a perm with special bits; a
// directory is EISDIR, a missing parent ENOENT, a parent that is not a
// directory ENOTDIR.
func (b *Box) WriteFile(ctx context.Context, name string, r io.Reader, perm providers.FileMode) error {
	const op = "daytona.WriteFile"
	if err := b.checkAbs(op, name); err != nil {
		return err
	}
	d, err := b.info(ctx, name)
	switch {
	case err == nil && d.IsDir:
		return providers.PathError(op, b.id, name, syscall.EISDIR)
	case err == nil:
		return b.unsettled(op, name, fmt.Errorf("the toolbox's move does not replace an existing file"))
	case statusOf(err) != http.StatusNotFound:
		return b.fileErr(op, name, err, false)
	}
	dir := path.Dir(name)
	if _, err := b.parentDir(ctx, op, name, dir); err != nil {
		return err
	}
	if perm&special != 0 {
		return b.unsettled(op, name, fmt.Errorf("the toolbox cannot set mode %v", perm))
	}
	// From here on r is read: no answer may send the caller elsewhere.
	open, cleanup, err := replayable(r)
	if err != nil {
		return providers.E(providers.Invalid, op, fmt.Errorf("reading the content: %w", err)).WithBox(b.id).WithPath(name)
	}
	defer cleanup()
	tmp := dir + "/.boxfs-w." + providers.NewID(6)
	if dir == "/" {
		tmp = "/.boxfs-w." + providers.NewID(6)
	}
	fail := func(err error) error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.p.liveness)
		defer cancel()
		b.remove(rctx, tmp)
		e := wrap(op, b.id, err).WithPath(name)
		if e.Code == providers.Unsupported {
			e.Code = providers.Unknown // r is spent: no other path can take over
		}
		return e
	}
	if err := b.upload(ctx, tmp, open); err != nil {
		return fail(err)
	}
	if err := b.permissions(ctx, url.Values{"path": {tmp}, "mode": {fmt.Sprintf("%o", perm.Perm())}}); err != nil {
		return fail(err)
	}
	if err := b.move(ctx, op, tmp, name); err != nil {
		if statusOf(err) == http.StatusConflict {
			err = providers.Errorf(providers.Exists, op, "%q was made by someone else while it was written", name)
		}
		return fail(err)
	}
	return nil
}

// parentDir checks that dir, name's parent, is a directory, and returns
// what files/info says of it: ENOENT when it is missing, ENOTDIR when it
// is something else.
func (b *Box) parentDir(ctx context.Context, op, name, dir string) (infoDTO, error) {
	d, err := b.info(ctx, dir)
	switch {
	case err == nil && d.IsDir:
		return d, nil
	case err == nil:
		return d, providers.PathError(op, b.id, name, syscall.ENOTDIR)
	}
	return d, b.fileErr(op, name, err, true)
}

// Rename moves oldname to newname through files/move, when both are in one
// directory, newname is free and oldname exists (as the toolbox sees it,
// through symlinks); else it changes nothing and returns Unsupported (the
// toolbox's move cannot replace, and copies what it cannot rename, across
// file systems too).
func (b *Box) Rename(ctx context.Context, oldname, newname string) error {
	const op = "daytona.Rename"
	if err := b.checkAbs(op, oldname); err != nil {
		return err
	}
	if err := b.checkAbs(op, newname); err != nil {
		return err
	}
	if newname == oldname || path.Dir(newname) != path.Dir(oldname) {
		// The toolbox's move copies across file systems, where rename(2)
		// fails with EXDEV; only names in one directory are sure to be on
		// one file system (and neither can be inside the other).
		return b.unsettled(op, oldname, nil)
	}
	if _, err := b.info(ctx, newname); err == nil || statusOf(err) != http.StatusNotFound {
		if err != nil {
			return b.fileErr(op, newname, err, false)
		}
		return b.unsettled(op, newname, fmt.Errorf("the toolbox's move does not replace an existing name"))
	}
	if _, err := b.info(ctx, oldname); err != nil {
		return b.fileErr(op, oldname, err, false) // a 404 may be a dangling symlink, which rename(2) moves
	}
	if err := b.move(ctx, op, oldname, newname); err != nil {
		switch statusOf(err) {
		case http.StatusNotFound:
			return providers.PathError(op, b.id, newname, syscall.ENOENT) // newname's parent is missing
		case http.StatusConflict:
			return b.unsettled(op, newname, err)
		}
		return b.fileErr(op, oldname, err, false)
	}
	return nil
}

// Remove unlinks name through files (not recursively). The toolbox stats
// first, following symlinks, so a directory, a symlink to one and a
// dangling symlink are Unsupported.
func (b *Box) Remove(ctx context.Context, name string) error {
	const op = "daytona.Remove"
	if err := b.checkAbs(op, name); err != nil {
		return err
	}
	err := b.remove(ctx, name)
	if err == nil || statusOf(err) == http.StatusNotFound && tries(err) > 1 {
		return nil // a 404 after a lost answer: the first attempt removed it
	}
	return b.fileErr(op, name, err, false)
}

// Mkdir makes the directory name with exactly perm, through files/folder
// (which is MkdirAll) and files/permissions, when name's parent is a
// directory and name is free: an existing name is EEXIST, a missing parent
// ENOENT, a parent that is not a directory ENOTDIR.
func (b *Box) Mkdir(ctx context.Context, name string, perm providers.FileMode) error {
	const op = "daytona.Mkdir"
	if err := b.checkAbs(op, name); err != nil {
		return err
	}
	if perm&special != 0 {
		return b.unsettled(op, name, fmt.Errorf("the toolbox cannot set mode %v", perm))
	}
	if _, err := b.info(ctx, name); err == nil {
		return providers.PathError(op, b.id, name, syscall.EEXIST)
	} else if statusOf(err) != http.StatusNotFound {
		return b.fileErr(op, name, err, false)
	}
	parent, err := b.parentDir(ctx, op, name, path.Dir(name))
	if err != nil {
		return err
	}
	if pm, err := parseMode(parent.Mode); err != nil || pm&fs.ModeSetgid != 0 {
		// The permissions call after the folder's would drop the bit
		// mkdir(2) passes on.
		return b.unsettled(op, name, fmt.Errorf("the toolbox cannot keep a set-group-ID parent's bit"))
	}
	if err := b.folder(ctx, name, perm); err != nil {
		return b.fileErr(op, name, err, false)
	}
	if err := b.permissions(ctx, url.Values{"path": {name}, "mode": {fmt.Sprintf("%o", perm.Perm())}}); err != nil {
		return b.fileErr(op, name, err, false)
	}
	return nil
}

// folder calls files/folder: MkdirAll of name.
func (b *Box) folder(ctx context.Context, name string, perm providers.FileMode) error {
	u, err := b.tb(ctx, "/files/folder")
	if err != nil {
		return err
	}
	return b.p.c.json(ctx, request{method: http.MethodPost, url: u, query: url.Values{"path": {name}, "mode": {fmt.Sprintf("%o", perm.Perm())}}, idempotent: true}, nil)
}

// mkdirAll makes name and its parents (the workspace, at create).
func (b *Box) mkdirAll(ctx context.Context, name string) error {
	return b.folder(ctx, name, 0o755)
}

// Chmod sets name's permission bits through files/permissions (following
// symlinks). Special bits are Unsupported.
func (b *Box) Chmod(ctx context.Context, name string, mode providers.FileMode) error {
	const op = "daytona.Chmod"
	if err := b.checkAbs(op, name); err != nil {
		return err
	}
	if mode&special != 0 {
		return b.unsettled(op, name, fmt.Errorf("the toolbox cannot set mode %v", mode))
	}
	if err := b.permissions(ctx, url.Values{"path": {name}, "mode": {fmt.Sprintf("%o", mode.Perm())}}); err != nil {
		return b.fileErr(op, name, err, true)
	}
	return nil
}

// Chown sets name's owner through files/permissions (following symlinks);
// -1 leaves one unchanged.
func (b *Box) Chown(ctx context.Context, name string, uid, gid int) error {
	const op = "daytona.Chown"
	if err := b.checkAbs(op, name); err != nil {
		return err
	}
	q := url.Values{"path": {name}}
	if uid >= 0 {
		q.Set("owner", strconv.Itoa(uid))
	}
	if gid >= 0 {
		q.Set("group", strconv.Itoa(gid))
	}
	if err := b.permissions(ctx, q); err != nil {
		return b.fileErr(op, name, err, true)
	}
	return nil
}

// findScript lists with GNU find, its output base64-encoded: $2 L (the
// path itself, not following it), R (a directory's entries) or W (the whole
// tree). When it cannot answer exactly (no GNU find, a path that does not
// resolve to what the mode needs, find failing) it exits 3.
const findScript = `p=$1
find --version >/dev/null 2>&1 || exit 3
f=` + boxfsDir + `/find-$$
mkdir -p ` + boxfsDir + ` 2>/dev/null
case $2 in
L) { [ -e "$p" ] || [ -L "$p" ]; } || exit 3
	find -P "$p" -maxdepth 0 -printf '` + findFormat + `%f\0' >"$f" 2>/dev/null ;;
R) { [ -d "$p" ] && [ -r "$p" ] && [ -x "$p" ]; } || exit 3
	find -H "$p" -mindepth 1 -maxdepth 1 -printf '` + findFormat + `%f\0' >"$f" 2>/dev/null ;;
W) { [ -d "$p" ] && [ -r "$p" ] && [ -x "$p" ]; } || exit 3
	find -H "$p" -mindepth 1 -printf '` + findFormat + `%P\0' >"$f" 2>/dev/null ;;
*) exit 2 ;;
esac
r=$?
if [ $r -ne 0 ]; then rm -f "$f"; exit 3; fi
base64 <"$f"
r=$?
rm -f "$f"
exit $r
`

// findFormat is one entry: 12 NUL-terminated fields, then the name.
const findFormat = `%m\0%y\0%s\0%A@\0%T@\0%C@\0%i\0%n\0%U\0%G\0%D\0%l\0`

// find runs findScript.
func (b *Box) find(ctx context.Context, op, p, mode string) ([]providers.FileInfo, error) {
	code, out, err := b.run(ctx, op, findScript, []string{p, mode}, runOpts{idempotent: true, encoded: true, dir: "/"})
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, b.unsettled(op, p, fmt.Errorf("the find script exited %d", code))
	}
	infos, err := parseListing(out)
	if err != nil {
		return nil, b.unsettled(op, p, err)
	}
	return infos, nil
}

// Lstat stats name without following a final symlink, with one find over
// process/execute: every attribute, times to the nanosecond. A name that
// does not resolve is Unsupported (the errno is not found out here).
func (b *Box) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	const op = "daytona.Lstat"
	if err := b.checkAbs(op, name); err != nil {
		return providers.FileInfo{}, err
	}
	infos, err := b.find(ctx, op, name, "L")
	if err != nil {
		return providers.FileInfo{}, err
	}
	if len(infos) != 1 {
		return providers.FileInfo{}, b.unsettled(op, name, fmt.Errorf("find listed %d entries", len(infos)))
	}
	infos[0].Name = path.Base(name)
	return infos[0], nil
}

// ReadDir lists a directory with one find over process/execute, sorted by
// name, symlinks as themselves (the toolbox's own listing follows them and
// leaves dangling ones out). A name that is not a readable directory is
// Unsupported.
func (b *Box) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	const op = "daytona.ReadDir"
	if err := b.checkAbs(op, name); err != nil {
		return nil, err
	}
	infos, err := b.find(ctx, op, name, "R")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(infos, func(a, b providers.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return infos, nil
}

// Walk lists the tree under root with one find over process/execute:
// parents before children, siblings in byte order, symlinks not followed.
func (b *Box) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	const op = "daytona.Walk"
	if err := b.checkAbs(op, root); err != nil {
		return nil, err
	}
	infos, err := b.find(ctx, op, root, "W")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(infos, func(a, b providers.FileInfo) int { return comparePaths(a.Name, b.Name) })
	return infos, nil
}

// comparePaths orders slash-separated paths parents first, siblings in
// byte order: '/' sorts below every other byte.
func comparePaths(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		switch {
		case ca == '/':
			return -1
		case cb == '/':
			return 1
		case ca < cb:
			return -1
		}
		return 1
	}
	return len(a) - len(b)
}

// findTypes maps find's %y letters to Linux file type bits.
var findTypes = map[string]uint32{
	"f": 0o100000, "d": 0o040000, "l": 0o120000, "p": 0o010000, "s": 0o140000, "c": 0o020000, "b": 0o060000,
}

// parseListing reads records of findFormat followed by a name.
func parseListing(out []byte) ([]providers.FileInfo, error) {
	fields := bytes.Split(out, []byte{0})
	if len(fields) > 0 && len(fields[len(fields)-1]) == 0 {
		fields = fields[:len(fields)-1]
	}
	if len(fields)%13 != 0 {
		return nil, fmt.Errorf("daytona: a listing of %d fields is not records of 13", len(fields))
	}
	var infos []providers.FileInfo
	for i := 0; i < len(fields); i += 13 {
		f := fields[i : i+13]
		perm, err := strconv.ParseUint(string(f[0]), 8, 32)
		if err != nil {
			return nil, fmt.Errorf("daytona: listing mode %q: %v", f[0], err)
		}
		typ, ok := findTypes[string(f[1])]
		if !ok {
			typ = 0o100000
		}
		fi := providers.FileInfo{Mode: providers.FileModeFromUnix(typ | uint32(perm)), Name: string(f[12])}
		fi.Size, _ = strconv.ParseInt(string(f[2]), 10, 64)
		fi.Atime, _ = parseFindTime(string(f[3]))
		fi.Mtime, _ = parseFindTime(string(f[4]))
		fi.Ctime, _ = parseFindTime(string(f[5]))
		fi.Ino, _ = strconv.ParseUint(string(f[6]), 10, 64)
		n, _ := strconv.ParseUint(string(f[7]), 10, 32)
		fi.Nlink = uint32(n)
		u, _ := strconv.ParseUint(string(f[8]), 10, 32)
		g, _ := strconv.ParseUint(string(f[9]), 10, 32)
		fi.UID, fi.GID = uint32(u), uint32(g)
		fi.Dev, _ = strconv.ParseUint(string(f[10]), 10, 64)
		if fi.IsSymlink() {
			fi.Target = string(f[11])
		}
		infos = append(infos, fi)
	}
	return infos, nil
}

// parseFindTime reads find's "sec.frac" (the first nine fraction digits
// count).
func parseFindTime(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(s, ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	frac = (frac + "000000000")[:9]
	ns, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(n, ns), nil
}

// putScript extracts the uploaded tar $2 into the directory $1 and removes
// it. A tar that is no longer there was extracted by an attempt whose
// answer was lost. Exit 64+errno when the directory does not resolve.
const putScript = `d=$1 f=$2
if ! [ -d "$d" ]; then
	rm -f "$f"
	if [ -e "$d" ]; then exit $((64 + 20)); fi
	exit $((64 + 2))
fi
[ -e "$f" ] || exit 0
tar -xf "$f" -C "$d"
r=$?
rm -f "$f"
exit $r
`

// PutArchive extracts a tar stream into the box directory dir: the tar is
// uploaded, then extracted by one command.
func (b *Box) PutArchive(ctx context.Context, dir string, tr io.Reader) error {
	const op = "daytona.PutArchive"
	if err := b.checkAbs(op, dir); err != nil {
		return err
	}
	open, cleanup, err := replayable(tr)
	if err != nil {
		return providers.E(providers.Invalid, op, fmt.Errorf("reading the tar: %w", err)).WithBox(b.id).WithPath(dir)
	}
	defer cleanup()
	f := boxfsDir + "/put-" + providers.NewID(8) + ".tar"
	if err := b.upload(ctx, f, open); err != nil {
		return b.fail(ctx, op, err)
	}
	code, out, err := b.run(ctx, op, putScript, []string{dir, f}, runOpts{idempotent: true, dir: "/"})
	if err != nil {
		return err
	}
	return b.scriptErr(op, dir, code, out)
}

// scriptErr turns a script's exit status into its error: 64+errno is that
// errno.
func (b *Box) scriptErr(op, p string, code int, out []byte) error {
	switch {
	case code == 0:
		return nil
	case code > 64 && code < 64+134:
		return providers.PathError(op, b.id, p, syscall.Errno(code-64))
	}
	return providers.Errorf(providers.Unknown, op, "exit %d: %s", code, bytes.TrimSpace(out)).WithBox(b.id).WithPath(p)
}

// getScript writes a tar of $1 (member names start with its base name) to
// $2. Exit 64+errno when $1 does not exist.
const getScript = `p=$1 f=$2
{ [ -e "$p" ] || [ -L "$p" ]; } || exit $((64 + 2))
mkdir -p "${f%/*}" 2>/dev/null
d=${p%/*}
[ -n "$d" ] || d=/
tar -cf "$f" -C "$d" -- "${p##*/}"
`

// GetArchive returns a tar of path (a file or a directory), member names
// starting with its base name: one command writes it in the box, then it
// is downloaded, and removed when the stream is closed.
func (b *Box) GetArchive(ctx context.Context, p string) (io.ReadCloser, error) {
	const op = "daytona.GetArchive"
	if err := b.checkAbs(op, p); err != nil {
		return nil, err
	}
	p = path.Clean(p)
	if p == "/" {
		return nil, providers.Errorf(providers.Invalid, op, "a tar of / is not taken").WithBox(b.id)
	}
	f := boxfsDir + "/get-" + providers.NewID(8) + ".tar"
	code, out, err := b.run(ctx, op, getScript, []string{p, f}, runOpts{idempotent: true, dir: "/"})
	if err != nil {
		return nil, err
	}
	if err := b.scriptErr(op, p, code, out); err != nil {
		b.removeLater(f)
		return nil, err
	}
	resp, err := b.download(ctx, f, "")
	if err != nil {
		b.removeLater(f)
		return nil, b.fail(ctx, op, err)
	}
	return &removeOnClose{ReadCloser: resp.Body, done: func() { b.removeLater(f) }}, nil
}

// removeLater deletes a box file of boxfs's own, in the background.
func (b *Box) removeLater(name string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), b.p.liveness)
		defer cancel()
		b.remove(ctx, name)
	}()
}

type removeOnClose struct {
	io.ReadCloser
	done func()
}

func (r *removeOnClose) Close() error {
	err := r.ReadCloser.Close()
	if r.done != nil {
		r.done()
		r.done = nil
	}
	return err
}
