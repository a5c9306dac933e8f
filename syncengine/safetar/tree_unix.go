//go:build linux || darwin

package safetar

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

// tree holds the destination directory open, and the chain of directories
// under it that the last member lived in, each opened from its parent's
// handle with O_NOFOLLOW. Archives list a directory's members together, so
// the chain is mostly reused.
type tree struct {
	root  int
	names []string // the chain's path segments
	fds   []int    // fds[i] is the directory names[:i+1]
}

func openTree(dst string) (*tree, error) {
	fd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, hostError(op, dst, err)
	}
	return &tree{root: fd}, nil
}

func (t *tree) close() {
	t.truncate(0)
	unix.Close(t.root)
}

func (t *tree) top() int {
	if len(t.fds) == 0 {
		return t.root
	}
	return t.fds[len(t.fds)-1]
}

func (t *tree) truncate(k int) {
	for i := len(t.fds) - 1; i >= k; i-- {
		unix.Close(t.fds[i])
	}
	t.names, t.fds = t.names[:k], t.fds[:k]
}

const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// dir returns a handle of the directory segs under the root, opening (and
// with create, making) each segment from its parent's handle without
// following links. A link or a non-directory on the way is a Reason, not an
// error; with !create a missing segment is a NotFound error.
func (t *tree) dir(segs []string, create bool) (int, Reason, error) {
	k := 0
	for k < len(segs) && k < len(t.names) && segs[k] == t.names[k] {
		k++
	}
	t.truncate(k)
	for _, seg := range segs[k:] {
		parent := t.top()
		fd, err := unix.Openat(parent, seg, dirFlags, 0)
		if err == unix.ENOENT && create {
			made := false
			if err = unix.Mkdirat(parent, seg, 0o700); err == nil || err == unix.EEXIST {
				made = err == nil
				fd, err = unix.Openat(parent, seg, dirFlags, 0)
				if err == nil && made {
					err = unix.Fchmod(fd, 0o755) // an implied parent; mkdirat's mode passed the umask
				}
			}
		}
		if err != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			if reason := classify(parent, seg, err); reason != "" {
				return -1, reason, nil
			}
			return -1, "", hostError(op, seg, err)
		}
		t.names = append(t.names, seg)
		t.fds = append(t.fds, fd)
	}
	return t.top(), "", nil
}

// classify tells why seg under parent could not be opened as a directory:
// ReasonThroughLink for a link, ReasonParentNotDir for anything else that is
// not a directory, "" for a real error.
func classify(parent int, seg string, err error) Reason {
	if err != unix.ELOOP && err != unix.ENOTDIR && err != unix.EEXIST {
		return ""
	}
	var st unix.Stat_t
	if unix.Fstatat(parent, seg, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return ""
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return ReasonThroughLink
	case unix.S_IFDIR:
		return ""
	}
	return ReasonParentNotDir
}

// mkdir makes (or finds) the directory base in the directory pfd, which is
// the chain's top, and pushes it on the chain. A directory it makes gets
// mode; one that was there keeps its own (the host's choice).
func (t *tree) mkdir(pfd int, base string, mode fs.FileMode) (Reason, error) {
	err := unix.Mkdirat(pfd, base, 0o700)
	if err != nil && err != unix.EEXIST {
		return "", hostError(op, base, err)
	}
	made := err == nil
	fd, err := unix.Openat(pfd, base, dirFlags, 0)
	if err != nil {
		if reason := classify(pfd, base, err); reason != "" {
			return ReasonTypeConflict, nil // a link or a file where a directory goes
		}
		return "", hostError(op, base, err)
	}
	if made {
		if err := unix.Fchmod(fd, uint32(mode.Perm())); err != nil {
			unix.Close(fd)
			return "", hostError(op, base, err)
		}
	}
	t.names = append(t.names, base)
	t.fds = append(t.fds, fd)
	return "", nil
}

// checkFile looks at what is at base in pfd: nothing, something a file may
// replace, or a directory (a type conflict).
func (t *tree) checkFile(pfd int, base string) (exists bool, reason Reason, err error) {
	var st unix.Stat_t
	switch err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err {
	case nil:
	case unix.ENOENT:
		return false, "", nil
	default:
		return false, "", hostError(op, base, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return true, ReasonTypeConflict, nil
	}
	return true, "", nil
}

// writeFile writes size bytes of src to a new temporary file in pfd, gives
// it mode and mtime, and renames it to base. An error of src is returned
// wrapped in sourceError; the temporary file never outlives a failure.
func (t *tree) writeFile(pfd int, base string, src io.Reader, size int64, mode fs.FileMode, mtime time.Time) (int64, Reason, error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := ".boxfs-" + hex.EncodeToString(rnd[:]) + ".tmp"
	fd, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, "", hostError(op, base, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	ok := false
	defer func() {
		if !ok {
			f.Close()
			unix.Unlinkat(pfd, tmp, 0)
		}
	}()
	n, err := io.CopyN(f, &sourceReader{src}, size)
	if err != nil {
		var se sourceError
		if errors.As(err, &se) {
			return n, "", se
		}
		if err == io.EOF { // the member ended before its size
			return n, "", sourceError{io.ErrUnexpectedEOF}
		}
		return n, "", hostError(op, base, err)
	}
	if err := f.Chmod(mode.Perm()); err != nil {
		return n, "", hostError(op, base, err)
	}
	// The mtime is kept where the host takes it; a time it refuses (out of
	// range) leaves the file's own, which is no reason to lose the file.
	ts := unix.NsecToTimespec(mtime.UnixNano())
	_ = unix.UtimesNanoAt(pfd, tmp, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	if err := f.Close(); err != nil {
		return n, "", hostError(op, base, err)
	}
	if err := unix.Renameat(pfd, tmp, pfd, base); err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		ok = true
		if err == unix.EISDIR || err == unix.ENOTEMPTY || err == unix.EEXIST {
			return n, ReasonTypeConflict, nil // a directory appeared there
		}
		return n, "", hostError(op, base, err)
	}
	ok = true
	return n, "", nil
}

// sourceReader marks the errors of the archive stream.
type sourceReader struct{ r io.Reader }

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		err = sourceError{err}
	}
	return n, err
}

func hostError(op, path string, err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return providers.PathError(op, "", path, errno)
	}
	return &providers.Error{Code: providers.CodeOf(err), Op: op, Path: path, Err: err}
}

// Remove removes the file, link or empty directory rel (a slash-separated
// relative name, checked as a member name is) under dst, reaching it
// through handles held from dst with O_NOFOLLOW: no link on the way is
// followed, and a link at rel is removed itself. Errors: Invalid for a bad
// name, NotFound when rel or a parent is missing, Unsafe when a parent is
// a link or not a directory, Exists when a directory is not empty.
func Remove(dst, rel string) error {
	const op = "syncengine/safetar.Remove"
	if reason := CheckName(rel); reason != "" {
		return providers.Errorf(providers.Invalid, op, "bad name (%s)", reason).WithPath(rel)
	}
	t, err := openTree(dst)
	if err != nil {
		return err
	}
	defer t.close()
	parent, base := splitPath(rel)
	pfd, reason, err := t.dir(parent, false)
	if err != nil {
		return &providers.Error{Code: providers.CodeOf(err), Op: op, Path: rel, Err: err}
	}
	if reason != "" {
		return providers.Errorf(providers.Unsafe, op, "a parent is not a directory (%s)", reason).WithPath(rel)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return hostError(op, rel, err)
	}
	flags := 0
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(pfd, base, flags); err != nil {
		return hostError(op, rel, err)
	}
	return nil
}
