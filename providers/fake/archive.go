package fake

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// MaxArchive bounds the tar stream PutArchive takes, in bytes.
const MaxArchive = 1 << 30

// PutArchive extracts a tar stream into the directory dir. Member names
// must be local ("a/b", "./a"; never "/a" or "../a"): anything else is
// Unsafe, and so is a member that would pass through a symlink. Directories,
// regular files, symlinks and hard links (to members already extracted) are
// made with the modes, owners and mtimes the headers give; other kinds are
// Unsupported. A malformed stream is Invalid. Members extracted before an
// error stay, as with Docker.
func (v view) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	const op = "fake.PutArchive"
	raw, rerr := io.ReadAll(io.LimitReader(r, MaxArchive+1))
	var failure error
	switch {
	case rerr != nil:
		failure = providers.E(0, op, rerr).WithBox(v.b.id).WithPath(dir)
	case len(raw) > MaxArchive:
		failure = providers.Errorf(providers.TooLarge, op, "archive is over %d bytes", MaxArchive).WithBox(v.b.id).WithPath(dir)
	}
	return v.doErr(ctx, Call{Op: "PutArchive", Path: dir, Size: int64(len(raw))}, raw, func(t *tree) (int64, error) {
		if failure != nil {
			return 0, failure
		}
		w, errno := t.existing(dir, follow)
		if errno == 0 && !w.n.isDir() {
			errno = syscall.ENOTDIR
		}
		if errno != 0 {
			return 0, providers.PathError(op, v.b.id, dir, errno)
		}
		return 0, t.untar(w.n, raw, op, v.b.id, dir)
	})
}

// untar extracts raw, a tar stream, into dst (the box path dir), as tar
// and Docker do: members replace what is there, directory times are set
// last, and a member that would leave dst is Unsafe.
func (t *tree) untar(dst *node, raw []byte, op, box, dir string) error {
	u := &untar{t: t, dst: dst, op: op, box: box, dir: dir, dirTimes: map[*node]time.Time{}}
	// Directory times are set last: the members extracted into a
	// directory would change them.
	defer func() {
		for n, mt := range u.dirTimes {
			n.mtime, n.atime = mt, mt
		}
	}()
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return providers.E(providers.Invalid, op, err).WithBox(box).WithPath(dir)
		}
		if err := u.member(tr, hdr); err != nil {
			return err
		}
	}
}

// untar is one extraction into a tree.
type untar struct {
	t            *tree
	dst          *node
	op, box, dir string
	dirTimes     map[*node]time.Time
	path         string // the member being extracted, as a box path
}

func (u *untar) bad(code providers.Code, format string, args ...any) error {
	return providers.Errorf(code, u.op, format, args...).WithBox(u.box).WithPath(u.path)
}

func (u *untar) errno(errno syscall.Errno) error {
	return providers.PathError(u.op, u.box, u.path, errno)
}

// member extracts one member.
func (u *untar) member(tr *tar.Reader, hdr *tar.Header) error {
	t := u.t
	name := strings.TrimPrefix(hdr.Name, "./")
	u.path = path.Join(u.dir, name)
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader, tar.TypeXHeader:
		return nil
	}
	clean := strings.TrimSuffix(name, "/")
	if clean == "" || clean == "." {
		return nil // the directory itself
	}
	if !filepath.IsLocal(clean) {
		return u.bad(providers.Unsafe, "member name %q is not local", hdr.Name)
	}
	parentDir, base, err := t.extractParent(u.dst, path.Clean(clean), true)
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return u.errno(errno)
		}
		return u.bad(providers.Unsafe, "member %q: %v", hdr.Name, err)
	}
	mode := providers.FileModeFromUnix(uint32(hdr.Mode) & 0o7777)
	old := parentDir.kids[base]
	var n *node
	switch hdr.Typeflag {
	case tar.TypeDir:
		n = u.dirNode(parentDir, base, old, mode)
	case tar.TypeReg, tar.TypeRegA:
		n, err = u.fileNode(tr, old, mode)
	case tar.TypeSymlink:
		n, err = u.symlinkNode(hdr, old)
	case tar.TypeLink:
		return u.hardlink(hdr, parentDir, base, old)
	default:
		return u.bad(providers.Unsupported, "member %q is of tar type %q, which the fake does not make", hdr.Name, hdr.Typeflag)
	}
	if err != nil {
		return err
	}
	parentDir.kids[base] = n
	n.uid, n.gid = uint32(hdr.Uid), uint32(hdr.Gid)
	t.touchDir(parentDir)
	switch {
	case hdr.ModTime.IsZero():
	case n.isDir():
		u.dirTimes[n] = hdr.ModTime
	default:
		n.mtime, n.atime = hdr.ModTime, hdr.ModTime
	}
	return nil
}

// dirNode is the directory base of parentDir: old, kept, when it is one.
func (u *untar) dirNode(parentDir *node, base string, old *node, mode providers.FileMode) *node {
	if old != nil && old.isDir() {
		old.mode = fs.ModeDir | mode
		return old
	}
	if old != nil {
		u.t.unlinked(old)
	}
	n := u.t.newNode(fs.ModeDir|mode, 0, 0)
	n.parent = parentDir
	parentDir.nlink++
	return n
}

// fileNode is a new regular file of the member's data, replacing old.
func (u *untar) fileNode(tr *tar.Reader, old *node, mode providers.FileMode) (*node, error) {
	if old != nil && old.isDir() {
		return nil, u.errno(syscall.EISDIR)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		return nil, providers.E(providers.Invalid, u.op, err).WithBox(u.box).WithPath(u.path)
	}
	if old != nil {
		u.t.unlinked(old)
	}
	n := u.t.newNode(mode, 0, 0)
	n.data = data
	u.t.bytes += int64(len(data))
	return n, nil
}

// symlinkNode is a new symbolic link, replacing old.
func (u *untar) symlinkNode(hdr *tar.Header, old *node) (*node, error) {
	if old != nil && old.isDir() {
		return nil, u.errno(syscall.EISDIR)
	}
	if hdr.Linkname == "" {
		return nil, u.bad(providers.Invalid, "symlink %q has no target", hdr.Name)
	}
	if old != nil {
		u.t.unlinked(old)
	}
	n := u.t.newNode(fs.ModeSymlink|0o777, 0, 0)
	n.target = hdr.Linkname
	return n, nil
}

// hardlink makes base in parentDir one more name of the archive's member
// the link names, replacing old.
func (u *untar) hardlink(hdr *tar.Header, parentDir *node, base string, old *node) error {
	t := u.t
	link := strings.TrimPrefix(hdr.Linkname, "./")
	if !filepath.IsLocal(link) {
		return u.bad(providers.Unsafe, "hard link %q -> %q leaves the directory", hdr.Name, hdr.Linkname)
	}
	ld, lbase, err := t.extractParent(u.dst, path.Clean(link), false)
	if err != nil {
		return u.bad(providers.Unsafe, "hard link %q -> %q: %v", hdr.Name, hdr.Linkname, err)
	}
	target := ld.kids[lbase]
	if target == nil || target.isDir() {
		return u.bad(providers.Invalid, "hard link %q -> %q: no such file in the archive", hdr.Name, hdr.Linkname)
	}
	if old == target {
		return nil
	}
	if old != nil {
		if old.isDir() {
			return u.errno(syscall.EISDIR)
		}
		t.unlinked(old)
	}
	target.nlink++
	target.ctime = t.now()
	parentDir.kids[base] = target
	t.touchDir(parentDir)
	return nil
}

// extractParent finds, from dst, the directory that holds the local name
// rel, making missing directories (0755) on the way when mkdir is set. A
// symlink or a file on the way is an error: extraction never follows a
// link.
func (t *tree) extractParent(dst *node, rel string, mkdir bool) (*node, string, error) {
	comps := splitPath(rel)
	cur := dst
	for _, c := range comps[:len(comps)-1] {
		n := cur.kids[c]
		switch {
		case n == nil && !mkdir:
			return nil, "", syscall.ENOENT
		case n == nil:
			n = t.newNode(fs.ModeDir|0o755, 0, 0)
			n.parent = cur
			cur.nlink++
			cur.kids[c] = n
			t.touchDir(cur)
		case n.isSymlink():
			return nil, "", errors.New("a symlink on the way")
		case !n.isDir():
			return nil, "", syscall.ENOTDIR
		}
		cur = n
	}
	last := comps[len(comps)-1]
	if len(last) > maxNameLen {
		return nil, "", syscall.ENAMETOOLONG
	}
	return cur, last, nil
}

// GetArchive returns a tar of name (not following a symlink at it) whose
// member names start with name's base name, as Docker's archive API gives
// them; a second name of a hard-linked file is a hard link member.
func (v view) GetArchive(ctx context.Context, name string) (io.ReadCloser, error) {
	var buf bytes.Buffer
	err := v.do(ctx, Call{Op: "GetArchive", Path: name}, nil, func(t *tree) (int64, syscall.Errno) {
		w, errno := t.existing(name, noFollow)
		if errno != 0 {
			return 0, errno
		}
		base := baseName(name)
		if base == "/" {
			base = "."
		}
		tw := tar.NewWriter(&buf)
		t.tar(tw, base, w.n, map[uint64]string{})
		_ = tw.Close() // into a bytes.Buffer: cannot fail
		return int64(buf.Len()), 0
	})
	if err != nil {
		return nil, err
	}
	return io.NopCloser(&buf), nil
}

func (t *tree) tar(tw *tar.Writer, name string, n *node, seen map[uint64]string) {
	hdr := &tar.Header{
		Name:    name,
		Mode:    int64(providers.UnixMode(n.mode) & 0o7777),
		Uid:     int(n.uid),
		Gid:     int(n.gid),
		ModTime: n.mtime,
		Format:  tar.FormatPAX, // keeps nanoseconds
	}
	switch {
	case n.isDir():
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
	case n.isSymlink():
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = n.target
	case n.nlink > 1 && seen[n.ino] != "":
		hdr.Typeflag = tar.TypeLink
		hdr.Linkname = seen[n.ino]
	default:
		hdr.Typeflag = tar.TypeReg
		hdr.Size = int64(len(n.data))
		seen[n.ino] = name
	}
	// Writes go to a bytes.Buffer: they cannot fail.
	_ = tw.WriteHeader(hdr)
	if hdr.Typeflag == tar.TypeReg {
		_, _ = tw.Write(n.data)
	}
	if n.isDir() {
		for _, k := range slices.Sorted(maps.Keys(n.kids)) {
			t.tar(tw, name+"/"+k, n.kids[k], seen)
		}
	}
}
