//go:build linux

package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

// Serve serves the agent protocol (SFTP v3 with boxfs's extensions, see
// wire.go) on in and out, with the box's file system at "/", until in ends.
// A clean end of in returns nil.
func Serve(in io.Reader, out io.WriteCloser) error {
	h := &handlers{atomics: map[string]*atomicFile{}, batches: map[string]*batchFile{}}
	rs := sftp.NewRequestServer(stream{in, out},
		sftp.Handlers{FileGet: h, FilePut: h, FileCmd: h, FileList: h},
		sftp.WithRSMaxTxPacket(maxPacket))
	err := rs.Serve()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

type stream struct {
	io.Reader
	io.WriteCloser
}

// protocolStreams returns the agent's protocol streams: stdin, and a new
// descriptor for what was stdout. File descriptor 1 is then pointed at
// stderr, so nothing but protocol can ever reach the host's end of stdout
// (a stray print, a runtime message).
func protocolStreams() (io.Reader, io.WriteCloser, error) {
	fd, err := unix.FcntlInt(1, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, nil, fmt.Errorf("agent: dup stdout: %w", err)
	}
	if err := unix.Dup3(2, 1, 0); err != nil {
		return nil, nil, fmt.Errorf("agent: point stdout at stderr: %w", err)
	}
	return os.Stdin, os.NewFile(uintptr(fd), "protocol"), nil
}

// verifySelf checks that the running binary's SHA-256 is want (hex).
// Hashing the ~50 MB binary costs tens of milliseconds at every start of
// an agent (the files channel, each watch, each command channel), so a
// match is recorded beside the binary (NAME.sum) with the file's identity
// and times; a later start of the same file, unchanged since, trusts the
// record. The check guards against a stale or partly written file, not
// against the box: a binary the box replaced would not check itself.
func verifySelf(want string) error {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("agent: reading own binary: %w", err)
	}
	defer f.Close()
	var st unix.Stat_t
	stamp := ""
	if unix.Fstat(int(f.Fd()), &st) == nil {
		stamp = fmt.Sprintf("%d %d %d %d.%d %d.%d %s\n", st.Dev, st.Ino, st.Size,
			st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, want)
	}
	record := ""
	if exe, err := os.Readlink("/proc/self/exe"); err == nil && path.IsAbs(exe) && !strings.HasSuffix(exe, " (deleted)") {
		record = exe + ".sum"
	}
	if stamp != "" && record != "" {
		if b, err := readCapped(record, 512); err == nil && string(b) == stamp {
			return nil
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("agent: reading own binary: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("agent: binary checksum %s does not match %s", got, want)
	}
	if stamp != "" && record != "" {
		writeSumRecord(record, stamp)
	}
	return nil
}

// readCapped reads at most max bytes of name, not following a final
// symlink.
func readCapped(name string, max int) ([]byte, error) {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, int64(max)))
}

// writeSumRecord replaces name with text (a temporary file renamed over it);
// a failure leaves the next start to hash again.
func writeSumRecord(name, text string) {
	tmp := fmt.Sprintf("%s.%d.tmp", name, os.Getpid())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
	}
}

// wireError is a failed system call as the agent answers it: pkg/sftp's
// statusFromError asks errors.As for its status code type, and As answers
// with errnoStatusCode; the message is errnoMessage.
type wireError struct{ errno syscall.Errno }

func (e *wireError) Error() string { return errnoMessage(e.errno) }

var fxerrType = reflect.TypeOf(sftp.ErrSSHFxFailure)

func (e *wireError) As(target any) bool {
	v := reflect.ValueOf(target)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Type() != fxerrType {
		return false
	}
	v.Elem().SetUint(uint64(errnoStatusCode(e.errno)))
	return true
}

// statAnswer is a mutation's success carrying the attributes it left
// (statStatusCode; see wire.go).
type statAnswer struct {
	s    statNS
	more []statNS // of other paths, for the answers that carry several
}

func (a *statAnswer) Error() string { return statsStatusMessage(append([]statNS{a.s}, a.more...)) }

func (a *statAnswer) As(target any) bool {
	v := reflect.ValueOf(target)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Type() != fxerrType {
		return false
	}
	v.Elem().SetUint(uint64(statStatusCode))
	return true
}

// answerStat is the answer to a mutation of p that succeeded: its
// attributes when q asks for them and Lstat gives them, else a plain OK.
func answerStat(q url.Values, p string) error {
	if q.Get("stat") != "1" {
		return nil
	}
	var st unix.Stat_t
	if unix.Lstat(p, &st) != nil {
		return nil
	}
	return &statAnswer{s: statNSOf(&st)}
}

// answerStats is answerStat of several paths: the attributes of as many
// of them, in order, as Lstat gives, when q asks for them and the first
// has them.
func answerStats(q url.Values, paths ...string) error {
	if q.Get("stat") != "1" {
		return nil
	}
	var a *statAnswer
	for _, p := range paths {
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			break
		}
		if a == nil {
			a = &statAnswer{s: statNSOf(&st)}
		} else {
			a.more = append(a.more, statNSOf(&st))
		}
	}
	if a == nil {
		return nil
	}
	return a
}

// renameAt renames p to the query's to and answers the attributes it
// left when asked: to's, to's directory's, and p's directory's when it is
// another.
func renameAt(p string, q url.Values) error {
	to := q.Get("to")
	if !path.IsAbs(to) {
		return errnoErr(syscall.EINVAL)
	}
	if err := unix.Rename(p, to); err != nil {
		return toWire(err)
	}
	dirs := []string{path.Dir(to)}
	if d := path.Dir(p); d != dirs[0] {
		dirs = append(dirs, d)
	}
	return answerStats(q, append([]string{to}, dirs...)...)
}

// toWire turns an error carrying an errno into a wireError; io.EOF and
// nil pass through.
func toWire(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	var errno syscall.Errno
	if errors.As(err, &errno) && errno != 0 {
		return &wireError{errno}
	}
	return err
}

func errnoErr(errno syscall.Errno) error { return &wireError{errno} }

// handlers serves pkg/sftp's request server from the OS.
type handlers struct {
	mu      sync.Mutex
	atomics map[string]*atomicFile // open opAtomic files by id
	batches map[string]*batchFile  // open opBatch files by id
}

var (
	_ sftp.FileReader           = (*handlers)(nil)
	_ sftp.OpenFileWriter       = (*handlers)(nil)
	_ sftp.PosixRenameFileCmder = (*handlers)(nil)
	_ sftp.StatVFSFileCmder     = (*handlers)(nil)
	_ sftp.LstatFileLister      = (*handlers)(nil)
	_ sftp.ReadlinkFileLister   = (*handlers)(nil)
	_ sftp.RealPathFileLister   = (*handlers)(nil)
)

// Fileread opens a file for reading, or answers opWalk and opList.
func (h *handlers) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	if op, q, ok, err := parseSynthetic(r.Filepath); ok {
		if err != nil {
			return nil, errnoErr(syscall.EINVAL)
		}
		var b []byte
		switch op {
		case opWalk:
			b, err = listTree(q.Get("root"), true, walkMax(q))
		case opList:
			b, err = listTree(q.Get("dir"), false, 0)
		default:
			return nil, fmt.Errorf("agent: no read operation %q", op)
		}
		if err != nil {
			return nil, err
		}
		return bytes.NewReader(b), nil
	}
	// O_NONBLOCK: opening a FIFO must not hang the agent.
	f, err := os.OpenFile(r.Filepath, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, toWire(err)
	}
	return newOSFile(f), nil
}

// Filewrite opens a file for writing, or starts an opAtomic file.
func (h *handlers) Filewrite(r *sftp.Request) (io.WriterAt, error) { return h.openWrite(r) }

// OpenFile opens a file for reading and writing.
func (h *handlers) OpenFile(r *sftp.Request) (sftp.WriterAtReaderAt, error) { return h.openWrite(r) }

func (h *handlers) openWrite(r *sftp.Request) (sftp.WriterAtReaderAt, error) {
	if op, q, ok, err := parseSynthetic(r.Filepath); ok {
		switch {
		case err != nil:
			return nil, errnoErr(syscall.EINVAL)
		case op == opAtomic:
			return h.newAtomic(q)
		case op == opBatch:
			return h.newBatch(q)
		}
		return nil, errnoErr(syscall.EINVAL)
	}
	pf := r.Pflags()
	flags := os.O_WRONLY
	if pf.Read {
		flags = os.O_RDWR
	}
	if pf.Append {
		flags |= os.O_APPEND
	}
	if pf.Creat {
		flags |= os.O_CREATE
	}
	if pf.Trunc {
		flags |= os.O_TRUNC
	}
	if pf.Excl {
		flags |= os.O_EXCL
	}
	f, err := os.OpenFile(r.Filepath, flags|syscall.O_NONBLOCK, 0o666)
	if err != nil {
		return nil, toWire(err)
	}
	return newOSFile(f), nil
}

// osFile serves reads and writes of one open file. WriteAt uses pwrite
// directly, which also works on an O_APPEND file (Linux appends).
type osFile struct {
	f  *os.File
	fd int
}

func newOSFile(f *os.File) *osFile { return &osFile{f: f, fd: int(f.Fd())} }

func (o *osFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := o.f.ReadAt(p, off)
	return n, toWire(err)
}

func (o *osFile) WriteAt(p []byte, off int64) (int, error) { return pwriteAll(o.fd, p, off) }

func (o *osFile) Close() error { return toWire(o.f.Close()) }

func pwriteAll(fd int, p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Pwrite(fd, p[n:], off+int64(n))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, toWire(err)
		}
		if m == 0 {
			return n, errnoErr(syscall.EIO)
		}
		n += m
	}
	return n, nil
}

// atomicFile is a file written under a temporary name in its directory and
// renamed over its destination when the handle is closed, unless the client
// aborted it or the transfer broke; then the temporary file is removed.
type atomicFile struct {
	h        *handlers
	id       string
	f        *os.File
	fd       int
	tmp, dst string
	q        url.Values      // the request: "stat=1" asks for the attributes at CLOSE
	times    []unix.Timespec // set just before the rename, when asked

	mu     sync.Mutex
	failed error // the first write error, a transfer error, or errAborted
}

var errAborted = errors.New("aborted")

// newAtomic starts the replacement of dst: a new file of mode perm (under
// the umask), or of the mode (and owner) of the regular file dst is.
func (h *handlers) newAtomic(q url.Values) (*atomicFile, error) {
	dst, id := q.Get("path"), q.Get("id")
	if id == "" || strings.ContainsRune(id, '/') {
		return nil, errnoErr(syscall.EINVAL)
	}
	a, perm, err := h.atomicFor(q, path.Join(path.Dir(dst), ".boxfs-tmp-"+id))
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(a.tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, toWire(err)
	}
	if err := a.adopt(fd); err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.atomics[id] = a
	h.mu.Unlock()
	return a, nil
}

// atomicFor reads the query of a replacement of q's path by the temporary
// file tmp: the atomicFile, not yet open, and the mode a new file gets.
func (h *handlers) atomicFor(q url.Values, tmp string) (*atomicFile, uint32, error) {
	dst := q.Get("path")
	perm, err := strconv.ParseUint(q.Get("perm"), 8, 32)
	if !path.IsAbs(dst) || err != nil || perm > 0o7777 {
		return nil, 0, errnoErr(syscall.EINVAL)
	}
	times, err := timesQuery(q)
	if err != nil {
		return nil, 0, err
	}
	return &atomicFile{h: h, id: q.Get("id"), dst: dst, tmp: tmp, q: q, times: times}, uint32(perm & 0o7777), nil
}

// adopt takes fd, open on a.tmp, as the new content's file, and gives it
// the attributes the replacement keeps or sets: an existing regular file's
// mode (and owner, where the agent may set it), then the query's owner
// ("uid", "gid"; -1 keeps one) and exact mode ("force=1"). The times
// ("atime", "mtime", ns since the epoch) are set after the last write. On
// failure fd is closed and a.tmp removed.
func (a *atomicFile) adopt(fd int) (err error) {
	a.f, a.fd = os.NewFile(uintptr(fd), a.tmp), fd
	defer func() {
		if err != nil {
			a.f.Close()
			unix.Unlink(a.tmp)
		}
	}()
	q := a.q
	var st unix.Stat_t
	keep := false
	switch err := unix.Lstat(a.dst, &st); {
	case err == nil && q.Get("excl") == "1":
		return errnoErr(syscall.EEXIST)
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return errnoErr(syscall.EISDIR)
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG:
		keep = true
	case err != nil && err != syscall.ENOENT:
		return toWire(err)
	}
	uid, gid, chown, err := ownerQuery(q)
	if err != nil {
		return err
	}
	if keep {
		// The replacement keeps the file's mode, and its owner where the
		// agent may set it. Owner first: chown clears the setuid and
		// setgid bits.
		var err error
		if os.Geteuid() == 0 {
			err = unix.Fchown(a.fd, int(st.Uid), int(st.Gid))
		}
		if err == nil {
			err = unix.Fchmod(a.fd, st.Mode&0o7777)
		}
		if err != nil {
			return toWire(err)
		}
	}
	if chown || q.Get("force") == "1" {
		var err error
		if chown {
			err = unix.Fchown(a.fd, uid, gid)
		}
		if err == nil && q.Get("force") == "1" {
			perm, _ := strconv.ParseUint(q.Get("perm"), 8, 32)
			err = unix.Fchmod(a.fd, uint32(perm&0o7777))
		}
		if err != nil {
			return toWire(err)
		}
	}
	return nil
}

// commit replaces q's path with the file q's "tmp" names, which the box's
// bulk path (its provider's archive API) put beside it: as an opAtomic's
// CLOSE does, with the query's attributes.
func (h *handlers) commit(q url.Values) error {
	dst, tmp := q.Get("path"), q.Get("tmp")
	if !path.IsAbs(tmp) || path.Dir(tmp) != path.Dir(dst) || !strings.HasPrefix(path.Base(tmp), ".boxfs-tmp-") {
		return errnoErr(syscall.EINVAL)
	}
	a, _, err := h.atomicFor(q, tmp)
	if err != nil {
		return err
	}
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return toWire(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		unix.Unlink(tmp)
		return errnoErr(syscall.EINVAL)
	}
	if int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid() {
		// The bulk path made it as another user: ours, as a file we made.
		if err := unix.Fchown(fd, os.Geteuid(), os.Getegid()); err != nil {
			unix.Close(fd)
			unix.Unlink(tmp)
			return toWire(err)
		}
	}
	if err := a.adopt(fd); err != nil {
		return err
	}
	return a.Close()
}

// writeAtomic replaces q's path with data in one go.
func (h *handlers) writeAtomic(q url.Values, data string) error {
	a, err := h.newAtomic(q)
	if err != nil {
		return err
	}
	if _, err := a.WriteAt([]byte(data), 0); err != nil {
		a.Close()
		return err
	}
	return a.Close()
}

func (a *atomicFile) fail(err error) {
	a.mu.Lock()
	if a.failed == nil {
		a.failed = err
	}
	a.mu.Unlock()
}

func (a *atomicFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := pwriteAll(a.fd, p, off)
	if err != nil {
		a.fail(err)
	}
	return n, err
}

func (a *atomicFile) ReadAt(p []byte, off int64) (int, error) { return 0, errnoErr(syscall.EBADF) }

// TransferError is called by pkg/sftp when the session ends with the file
// still open.
func (a *atomicFile) TransferError(err error) { a.fail(err) }

func (a *atomicFile) Close() error {
	a.h.mu.Lock()
	delete(a.h.atomics, a.id)
	a.h.mu.Unlock()
	cerr := a.f.Close()
	a.mu.Lock()
	failed := a.failed
	a.mu.Unlock()
	if failed != nil || cerr != nil {
		unix.Unlink(a.tmp)
		if cerr != nil {
			return toWire(cerr)
		}
		if failed == errAborted {
			return nil
		}
		return failed
	}
	if a.times != nil {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, a.tmp, a.times, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			unix.Unlink(a.tmp)
			return toWire(err)
		}
	}
	if err := a.rename(); err != nil {
		unix.Unlink(a.tmp)
		return toWire(err)
	}
	return answerStat(a.q, a.dst)
}

// rename gives the new content its name: over what is there, or with
// "excl=1" only if the name is free (EEXIST otherwise).
func (a *atomicFile) rename() error {
	if a.q.Get("excl") != "1" {
		return unix.Rename(a.tmp, a.dst)
	}
	err := unix.Renameat2(unix.AT_FDCWD, a.tmp, unix.AT_FDCWD, a.dst, unix.RENAME_NOREPLACE)
	if err != unix.EINVAL && err != unix.ENOSYS {
		return err
	}
	// A file system without RENAME_NOREPLACE: link(2) does not replace.
	if err := unix.Link(a.tmp, a.dst); err != nil {
		return err
	}
	return unix.Unlink(a.tmp)
}

// ownerQuery reads the optional "uid" and "gid" of a write; chown is
// whether either is there (a missing one is -1, kept).
func ownerQuery(q url.Values) (uid, gid int, chown bool, err error) {
	uid, gid = -1, -1
	for _, f := range []struct {
		key string
		v   *int
	}{{"uid", &uid}, {"gid", &gid}} {
		s := q.Get(f.key)
		if s == "" {
			continue
		}
		n, perr := strconv.ParseInt(s, 10, 64)
		if perr != nil || n < -1 || n > math.MaxUint32-1 {
			return 0, 0, false, errnoErr(syscall.EINVAL)
		}
		*f.v, chown = int(n), true
	}
	return uid, gid, chown, nil
}

// timesQuery reads the optional "atime" and "mtime" (ns) of a write; nil
// when neither is there.
func timesQuery(q url.Values) ([]unix.Timespec, error) {
	at, mt := q.Get("atime"), q.Get("mtime")
	if at == "" && mt == "" {
		return nil, nil
	}
	ts := make([]unix.Timespec, 2)
	for i, s := range []string{at, mt} {
		if s == "" {
			ts[i] = unix.Timespec{Nsec: unix.UTIME_OMIT}
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, errnoErr(syscall.EINVAL)
		}
		ts[i] = unix.NsecToTimespec(n)
	}
	return ts, nil
}

// Filecmd serves SETSTAT (with the reserved mutations), RENAME, RMDIR,
// MKDIR, LINK, SYMLINK and REMOVE.
func (h *handlers) Filecmd(r *sftp.Request) error {
	if r.Method == "Setstat" {
		if op, q, ok, err := parseSynthetic(r.Filepath); ok {
			if err != nil {
				return errnoErr(syscall.EINVAL)
			}
			return h.syntheticCmd(r, op, q)
		}
		return toWire(setstat(r.Filepath, r))
	}
	var err error
	switch r.Method {
	case "Rename":
		// SFTP's RENAME does not replace; boxfs's client uses POSIX-RENAME.
		err = unix.Renameat2(unix.AT_FDCWD, r.Filepath, unix.AT_FDCWD, r.Target, unix.RENAME_NOREPLACE)
	case "Rmdir":
		err = unix.Rmdir(r.Filepath)
	case "Mkdir":
		err = unix.Mkdir(r.Filepath, 0o777)
	case "Link":
		err = unix.Link(r.Filepath, r.Target)
	case "Symlink":
		// pkg/sftp: Filepath is the target, as sent; Target the new link.
		err = unix.Symlink(r.Filepath, r.Target)
	case "Remove":
		err = unix.Unlink(r.Filepath)
	default:
		return sftp.ErrSSHFxOpUnsupported
	}
	return toWire(err)
}

// syntheticCmd serves the operations boxfs adds to SFTP, each a SETSTAT
// of a synthetic path naming the operation and its query: an atomic
// write's abort, or one operation on the query's path.
func (h *handlers) syntheticCmd(r *sftp.Request, op string, q url.Values) error {
	var data *string
	abort := false
	if a := r.Attributes(); a != nil {
		for _, e := range a.Extended {
			switch e.ExtType {
			case extData:
				data = &e.ExtData
			case extAbort:
				abort = true
			}
		}
	}
	switch {
	case op == opAtomic:
		return h.abortAtomic(q, abort)
	case op == opBatch && abort:
		return h.abortBatch(q)
	case op == opBatch && data != nil:
		return h.applyBatch(strings.NewReader(*data))
	case op == opBatch:
		return errnoErr(syscall.EINVAL)
	}
	p := q.Get("path")
	if !path.IsAbs(p) {
		return errnoErr(syscall.EINVAL)
	}
	switch op {
	case opCommit:
		return h.commit(q)
	case opRename:
		return renameAt(p, q)
	case opMkdir, opCreate:
		return makeAt(op, p, q)
	case opMknod:
		return mknodAt(p, q)
	case opUnlink:
		return toWire(unix.Unlink(p))
	case opUnlinkStat:
		return unlinkStat(p)
	case opRemoves:
		if data == nil {
			return errnoErr(syscall.EINVAL)
		}
		return removeAll(*data)
	case opSetattr:
		return setattrAt(p, q)
	case opLchown, opLutimes:
		return linkAttrs(op, p, q)
	case opFsync:
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return toWire(err)
		}
		err = unix.Fsync(fd)
		unix.Close(fd)
		return toWire(err)
	case opWrite:
		if data == nil {
			return errnoErr(syscall.EINVAL)
		}
		return h.writeAtomic(q, *data)
	case opPwrite:
		return pwriteAt(p, q, data)
	}
	// The client takes this for an operation of a later agent.
	return sftp.ErrSSHFxOpUnsupported
}

// abortAtomic ends the atomic write q's id names, which fails it.
func (h *handlers) abortAtomic(q url.Values, abort bool) error {
	if !abort {
		return errnoErr(syscall.EINVAL)
	}
	h.mu.Lock()
	a := h.atomics[q.Get("id")]
	h.mu.Unlock()
	if a == nil {
		return errnoErr(syscall.EBADF)
	}
	a.fail(errAborted)
	return nil
}

// makeAt makes the directory (opMkdir) or regular file (opCreate) p with
// the query's perm, and answers its attributes when asked.
func makeAt(op, p string, q url.Values) error {
	v, err := strconv.ParseUint(q.Get("perm"), 8, 32)
	if err != nil || v > 0o7777 {
		return errnoErr(syscall.EINVAL)
	}
	m := uint32(v)
	if op == opMkdir {
		if err := unix.Mkdir(p, m); err != nil {
			return toWire(err)
		}
		return answerStat(q, p)
	}
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_NONBLOCK | unix.O_CLOEXEC
	if q.Get("excl") == "1" {
		flags |= unix.O_EXCL
	} else {
		flags |= unix.O_TRUNC
	}
	fd, err := unix.Open(p, flags, m)
	if err != nil {
		return toWire(err)
	}
	if err := unix.Close(fd); err != nil {
		return toWire(err)
	}
	return answerStat(q, p)
}

// unlinkStat unlinks p and answers the attributes of the file it named as
// they are after the unlink: the link count and change time its other
// names show now. The file is opened (O_PATH, not following a symlink)
// before the unlink and fstat'ed after it, so no name is resolved again.
func unlinkStat(p string) error {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return toWire(err)
	}
	defer unix.Close(fd)
	if err := unix.Unlink(p); err != nil {
		return toWire(err)
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return nil // removed; the caller asks for what is left
	}
	return &statAnswer{s: statNSOf(&st)}
}

// setattrAt sets p's owner, mode and times, each when the query has it
// (the owner first: chown(2) clears the setuid and setgid bits), following
// a final symlink as chmod(2) does, and answers the attributes they left
// when asked.
func setattrAt(p string, q url.Values) error {
	uid, gid, chown, err := ownerQuery(q)
	if err != nil {
		return err
	}
	ts, err := timesQuery(q)
	if err != nil {
		return err
	}
	var mode uint32
	if s := q.Get("mode"); s != "" {
		v, err := strconv.ParseUint(s, 8, 32)
		if err != nil || v > 0o7777 {
			return errnoErr(syscall.EINVAL)
		}
		mode = uint32(v)
	}
	if chown {
		if err := unix.Chown(p, uid, gid); err != nil {
			return toWire(err)
		}
	}
	if q.Get("mode") != "" {
		if err := unix.Chmod(p, mode); err != nil {
			return toWire(err)
		}
	}
	if ts != nil {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0); err != nil {
			return toWire(err)
		}
	}
	return answerStat(q, p)
}

// linkAttrs sets the owner (opLchown) or times (opLutimes) of p itself,
// never following a final symlink.
func linkAttrs(op, p string, q url.Values) error {
	if op == opLchown {
		uid, gid, _, err := ownerQuery(q)
		if err != nil {
			return err
		}
		return toWire(unix.Lchown(p, uid, gid))
	}
	ts, err := timesQuery(q)
	if err != nil {
		return err
	}
	if ts == nil {
		omit := unix.Timespec{Nsec: unix.UTIME_OMIT}
		ts = []unix.Timespec{omit, omit} // nil would set both to now
	}
	return toWire(unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
}

// pwriteAt writes data into the existing file p at the query's off.
func pwriteAt(p string, q url.Values, data *string) error {
	off, err := strconv.ParseInt(q.Get("off"), 10, 64)
	if data == nil || err != nil || off < 0 {
		return errnoErr(syscall.EINVAL)
	}
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return toWire(err)
	}
	_, err = pwriteAll(fd, []byte(*data), off)
	if cerr := unix.Close(fd); err == nil {
		err = toWire(cerr)
	}
	return err
}

// setstat applies a SETSTAT: size, permissions, owner, second times, and
// the utimes-ns extension, in that order.
func setstat(p string, r *sftp.Request) error {
	fl := r.AttrFlags()
	a := r.Attributes()
	if a == nil {
		return syscall.EINVAL
	}
	if fl.Size {
		if err := unix.Truncate(p, int64(a.Size)); err != nil {
			return err
		}
	}
	if fl.Permissions {
		if err := unix.Chmod(p, a.Mode&0o7777); err != nil {
			return err
		}
	}
	if fl.UidGid {
		id := func(v uint32) int {
			if v == math.MaxUint32 {
				return -1
			}
			return int(v)
		}
		if err := unix.Chown(p, id(a.UID), id(a.GID)); err != nil {
			return err
		}
	}
	if fl.Acmodtime {
		ts := []unix.Timespec{{Sec: int64(a.Atime)}, {Sec: int64(a.Mtime)}}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0); err != nil {
			return err
		}
	}
	for _, e := range a.Extended {
		if e.ExtType != extUtimesNS {
			continue
		}
		at, mt, err := unmarshalUtimes(e.ExtData)
		if err != nil {
			return syscall.EINVAL
		}
		ts := []unix.Timespec{timespec(at), timespec(mt)}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0); err != nil {
			return err
		}
	}
	return nil
}

func timespec(ns int64) unix.Timespec {
	if ns == utimeOmit {
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	return unix.NsecToTimespec(ns)
}

// PosixRename renames, replacing the target (rename(2)).
func (h *handlers) PosixRename(r *sftp.Request) error {
	return toWire(unix.Rename(r.Filepath, r.Target))
}

// StatVFS answers statvfs@openssh.com.
func (h *handlers) StatVFS(r *sftp.Request) (*sftp.StatVFS, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(r.Filepath, &st); err != nil {
		return nil, toWire(err)
	}
	return &sftp.StatVFS{
		Bsize:   uint64(st.Bsize),
		Frsize:  uint64(st.Frsize),
		Blocks:  st.Blocks,
		Bfree:   st.Bfree,
		Bavail:  st.Bavail,
		Files:   st.Files,
		Ffree:   st.Ffree,
		Favail:  st.Ffree,
		Fsid:    uint64(uint32(st.Fsid.Val[0]))<<32 | uint64(uint32(st.Fsid.Val[1])),
		Flag:    uint64(st.Flags),
		Namemax: uint64(st.Namelen),
	}, nil
}

// Filelist serves READDIR ("List") and STAT ("Stat", with opSHA256).
func (h *handlers) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	switch r.Method {
	case "List":
		b, err := listTree(r.Filepath, false, 0)
		if err != nil {
			return nil, err
		}
		fis, err := parseWalk(b)
		if err != nil {
			return nil, err
		}
		l := make(listing, len(fis))
		for i, fi := range fis {
			l[i] = &statInfo{name: fi.Name, s: statNSOfInfo(fi)}
		}
		return l, nil
	case "Stat":
		if op, q, ok, err := parseSynthetic(r.Filepath); ok {
			if err != nil {
				return nil, errnoErr(syscall.EINVAL)
			}
			return syntheticStat(op, q)
		}
		var st unix.Stat_t
		if err := unix.Stat(r.Filepath, &st); err != nil {
			return nil, toWire(err)
		}
		return listing{newStatInfo(path.Base(r.Filepath), &st)}, nil
	}
	return nil, sftp.ErrSSHFxOpUnsupported
}

// Lstat serves LSTAT, with a symlink's target in extTarget.
func (h *handlers) Lstat(r *sftp.Request) (sftp.ListerAt, error) {
	var st unix.Stat_t
	if err := unix.Lstat(r.Filepath, &st); err != nil {
		return nil, toWire(err)
	}
	si := newStatInfo(path.Base(r.Filepath), &st)
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		t, err := os.Readlink(r.Filepath)
		if err != nil {
			return nil, toWire(err)
		}
		si.ext = []sftp.StatExtended{{ExtType: extTarget, ExtData: t}}
	}
	return listing{si}, nil
}

// Readlink serves READLINK with the target byte for byte.
func (h *handlers) Readlink(p string) (string, error) {
	t, err := os.Readlink(p)
	return t, toWire(err)
}

// RealPath cleans p against "/" without resolving symlinks.
func (h *handlers) RealPath(p string) (string, error) {
	if !path.IsAbs(p) {
		p = "/" + p
	}
	return path.Clean(p), nil
}

// syntheticStat answers the STAT-borne operations.
func syntheticStat(op string, q url.Values) (sftp.ListerAt, error) {
	switch op {
	case opSHA256:
		return hashFile(q.Get("path"))
	case opReadSmall:
		return readSmall(q)
	case opRead:
		off, err1 := strconv.ParseInt(q.Get("off"), 10, 64)
		n, err2 := strconv.Atoi(q.Get("len"))
		if err1 != nil || err2 != nil || off < 0 || n < 0 || n > inlineMax {
			return nil, errnoErr(syscall.EINVAL)
		}
		return readInline(q.Get("path"), off, n)
	case opWalk, opList:
		root := q.Get("root")
		if op == opList {
			root = q.Get("dir")
		}
		b, err := listTree(root, op == opWalk, walkMax(q))
		if err != nil {
			return nil, err
		}
		si := &statInfo{name: path.Base(root)}
		if len(b) > inlineMax {
			si.ext = []sftp.StatExtended{{ExtType: extSize, ExtData: strconv.Itoa(len(b))}}
		} else {
			si.ext = []sftp.StatExtended{{ExtType: extData, ExtData: string(b)}}
		}
		return listing{si}, nil
	}
	return nil, fmt.Errorf("agent: no operation %q", op)
}

// readSmall reads the regular files q names in q's dir whole, in order,
// while they fit the budget (q's max, at most smallMax).
func readSmall(q url.Values) (sftp.ListerAt, error) {
	dir := q.Get("dir")
	budget, err := strconv.Atoi(q.Get("max"))
	if !path.IsAbs(dir) || err != nil || budget < 0 {
		return nil, errnoErr(syscall.EINVAL)
	}
	budget = min(budget, smallMax)
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, toWire(err)
	}
	defer unix.Close(dfd)
	var out []byte
	for _, name := range q["n"] {
		if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
			continue
		}
		fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > int64(budget) {
			unix.Close(fd)
			continue
		}
		buf := make([]byte, st.Size+1) // one more: a file that grew is seen
		got := 0
		for got < len(buf) {
			m, err := unix.Pread(fd, buf[got:], int64(got))
			if err == syscall.EINTR {
				continue
			}
			if err != nil || m == 0 {
				break
			}
			got += m
		}
		var after unix.Stat_t
		ok := unix.Fstat(fd, &after) == nil && int64(got) == st.Size && after.Size == st.Size && after.Mtim == st.Mtim
		unix.Close(fd)
		if !ok {
			continue // changed while read: the caller reads it itself
		}
		budget -= got
		out = appendSmallRecord(out, name, statNSOf(&after), buf[:got])
	}
	var dst unix.Stat_t
	if err := unix.Fstat(dfd, &dst); err != nil {
		return nil, toWire(err)
	}
	si := newStatInfo(path.Base(dir), &dst)
	si.ext = []sftp.StatExtended{{ExtType: extData, ExtData: string(out)}}
	return listing{si}, nil
}

// readInline reads up to n bytes of p at off; fewer at the end of the file.
func readInline(p string, off int64, n int) (sftp.ListerAt, error) {
	if !path.IsAbs(p) {
		return nil, errnoErr(syscall.EINVAL)
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, toWire(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, n)
	got := 0
	for got < n {
		m, err := unix.Pread(fd, buf[got:], off+int64(got))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, toWire(err)
		}
		if m == 0 {
			break
		}
		got += m
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, toWire(err)
	}
	si := newStatInfo(path.Base(p), &st)
	si.ext = []sftp.StatExtended{{ExtType: extData, ExtData: string(buf[:got])}}
	return listing{si}, nil
}

func hashFile(p string) (sftp.ListerAt, error) {
	if !path.IsAbs(p) {
		return nil, errnoErr(syscall.EINVAL)
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, toWire(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, toWire(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, toWire(err)
	}
	si := newStatInfo(path.Base(p), &st)
	si.ext = []sftp.StatExtended{{ExtType: extSHA256, ExtData: string(h.Sum(nil))}}
	return listing{si}, nil
}

// statInfo is the os.FileInfo the handlers answer with: pkg/sftp takes the
// uid and gid from it (FileInfoUidGid) and sends Extended on every
// attribute block (FileInfoExtendedData).
type statInfo struct {
	name string
	s    statNS
	ext  []sftp.StatExtended
}

var (
	_ sftp.FileInfoUidGid       = (*statInfo)(nil)
	_ sftp.FileInfoExtendedData = (*statInfo)(nil)
)

func newStatInfo(name string, st *unix.Stat_t) *statInfo {
	return &statInfo{name: name, s: statNSOf(st)}
}

func statNSOf(st *unix.Stat_t) statNS {
	return statNS{
		Mode: st.Mode, UID: st.Uid, GID: st.Gid, Nlink: uint32(st.Nlink),
		Size:  st.Size,
		Mtime: st.Mtim.Nano(), Atime: st.Atim.Nano(), Ctime: st.Ctim.Nano(),
		Ino: st.Ino, Dev: uint64(st.Dev), Rdev: uint64(st.Rdev),
	}
}

func statNSOfInfo(fi providers.FileInfo) statNS {
	return statNS{
		Mode: providers.UnixMode(fi.Mode), UID: fi.UID, GID: fi.GID, Nlink: fi.Nlink,
		Size:  fi.Size,
		Mtime: fi.Mtime.UnixNano(), Atime: fi.Atime.UnixNano(), Ctime: fi.Ctime.UnixNano(),
		Ino: fi.Ino, Dev: fi.Dev, Rdev: fi.Rdev,
	}
}

func (i *statInfo) Name() string       { return i.name }
func (i *statInfo) Size() int64        { return i.s.Size }
func (i *statInfo) Mode() fs.FileMode  { return providers.FileModeFromUnix(i.s.Mode) }
func (i *statInfo) ModTime() time.Time { return time.Unix(0, i.s.Mtime) }
func (i *statInfo) IsDir() bool        { return i.s.Mode&unix.S_IFMT == unix.S_IFDIR }
func (i *statInfo) Sys() any           { return nil }
func (i *statInfo) Uid() uint32        { return i.s.UID }
func (i *statInfo) Gid() uint32        { return i.s.GID }
func (i *statInfo) Extended() []sftp.StatExtended {
	return append([]sftp.StatExtended{{ExtType: extStatNS, ExtData: i.s.marshal()}}, i.ext...)
}

// listing serves a fixed list of entries.
type listing []os.FileInfo

func (l listing) ListAt(dst []os.FileInfo, off int64) (int, error) {
	if off >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(dst, l[off:])
	if off+int64(n) >= int64(len(l)) {
		return n, io.EOF
	}
	return n, nil
}

// listTree lists dir (following it if it is a symlink) in the walk listing
// format: its entries, and with recursive their whole trees, never
// following a symlink below dir. An entry that vanishes while it is listed
// is left out; any other error ends the listing.
// walkMax is a walk's or a listing's optional entry cap ("max"); 0 is
// none.
func walkMax(q url.Values) int {
	n, err := strconv.Atoi(q.Get("max"))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// listTree lists dir (recursively: the whole tree). With max > 0, a tree
// of more than max entries is EFBIG: the caller wanted it only if small.
func listTree(dir string, recursive bool, max int) ([]byte, error) {
	if !path.IsAbs(dir) {
		return nil, errnoErr(syscall.EINVAL)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, toWire(err)
	}
	var b []byte
	left := -1
	if max > 0 {
		left = max
	}
	if err := listDir(fd, "", recursive, &b, &left); err != nil {
		return nil, toWire(err)
	}
	return b, nil
}

// listDir lists the directory open at fd, and closes fd.
// left counts the entries still allowed (-1: no cap).
func listDir(fd int, prefix string, recursive bool, b *[]byte, left *int) error {
	f := os.NewFile(uintptr(fd), prefix)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return err
	}
	sort.Strings(names)
	var link []byte
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == syscall.ENOENT {
				continue
			}
			return err
		}
		target := ""
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if link == nil {
				link = make([]byte, 4096)
			}
			n, err := unix.Readlinkat(fd, name, link)
			if err == syscall.ENOENT {
				continue
			}
			if err != nil {
				return err
			}
			target = string(link[:n])
		}
		rel := prefix + name
		if *left == 0 {
			return syscall.EFBIG
		}
		if *left > 0 {
			*left--
		}
		*b = appendWalkRecord(*b, statNSOf(&st), rel, target)
		if !recursive || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == syscall.ENOENT || err == syscall.ENOTDIR || err == syscall.ELOOP {
			continue // replaced while we listed
		}
		if err != nil {
			return err
		}
		if err := listDir(cfd, rel+"/", true, b, left); err != nil {
			return err
		}
	}
	return nil
}
