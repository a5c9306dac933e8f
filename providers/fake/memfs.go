package fake

import (
	"io/fs"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// The in-memory file tree of one box. Every method answers with the errno
// Linux gives for the same call on a local file system (ext4, tmpfs), as
// root: permissions are not checked. Callers hold the box's lock.

const (
	maxSymlinks = 40 // Linux's MAXSYMLINKS: the 41st link in one lookup is ELOOP
	maxNameLen  = 255
	maxPathLen  = 4096 // PATH_MAX, counting the NUL
	dirSize     = 4096
	blockSize   = 4096
	fsBlocks    = 1 << 20 // a 4 GiB file system
	fsFiles     = 1 << 20
)

type node struct {
	ino    uint64
	mode   providers.FileMode // type and permission bits
	data   []byte             // regular file
	target string             // symlink
	kids   map[string]*node   // directory
	parent *node              // directory: the one that holds it (root: itself)
	nlink  uint32
	uid    uint32
	gid    uint32
	atime  time.Time
	mtime  time.Time
	ctime  time.Time
}

func (n *node) isDir() bool     { return n.mode.IsDir() }
func (n *node) isSymlink() bool { return n.mode&fs.ModeSymlink != 0 }

func (n *node) size() int64 {
	switch {
	case n.isDir():
		return dirSize
	case n.isSymlink():
		return int64(len(n.target))
	}
	return int64(len(n.data))
}

type tree struct {
	root  *node
	ino   uint64 // the last inode number given out
	dev   uint64
	umask providers.FileMode
	now   func() time.Time
	nodes int // live inodes, for Statfs
	bytes int64
}

func newTree(dev uint64, umask providers.FileMode, now func() time.Time) *tree {
	t := &tree{dev: dev, umask: umask, now: now}
	t.root = t.newNode(fs.ModeDir|0o755, 0, 0)
	t.root.parent = t.root
	t.root.nlink = 2
	return t
}

func (t *tree) newNode(mode providers.FileMode, uid, gid uint32) *node {
	t.ino++
	t.nodes++
	now := t.now()
	n := &node{ino: t.ino, mode: mode, uid: uid, gid: gid, atime: now, mtime: now, ctime: now, nlink: 1}
	if mode.IsDir() {
		n.kids = map[string]*node{}
		n.nlink = 2
	}
	return n
}

// unlinked drops one name of n; a node with no names left is freed.
func (t *tree) unlinked(n *node) {
	if n.isDir() {
		n.nlink = 0
	} else if n.nlink > 0 {
		n.nlink--
	}
	n.ctime = t.now()
	if n.nlink == 0 {
		t.nodes--
		t.bytes -= int64(len(n.data))
	}
}

func (t *tree) touchDir(d *node) {
	now := t.now()
	d.mtime, d.ctime = now, now
}

// lookup modes: how the last component of a path is treated when it is a
// symlink.
type lookupMode int

const (
	follow   lookupMode = iota // follow it (stat, open, chmod)
	noFollow                   // do not, unless the path ends in a slash (lstat, readlink)
	parent                     // never: the call acts on the name itself (mkdir, unlink, rename, link)
)

// walked is where a path led.
type walked struct {
	dir   *node  // the directory that holds the last component; nil for "/", "." and ".."
	base  string // the last component; "" for "/"
	n     *node  // what the name refers to; nil when it does not exist
	slash bool   // the path ended in a slash
}

// special reports whether the last component is "/", "." or "..": a name no
// call may create, remove or rename.
func (w walked) special() bool { return w.dir == nil }

// walk resolves name, an absolute box path. A missing last component is not
// an error (w.n is nil); a missing or non-directory component before it is
// ENOENT or ENOTDIR; more than maxSymlinks symlinks is ELOOP.
func (t *tree) walk(name string, mode lookupMode) (walked, syscall.Errno) {
	if name == "" {
		return walked{}, syscall.ENOENT
	}
	if !strings.HasPrefix(name, "/") {
		return walked{}, syscall.EINVAL // box paths are absolute
	}
	if len(name) >= maxPathLen {
		return walked{}, syscall.ENAMETOOLONG
	}
	slash := len(name) > 1 && strings.HasSuffix(name, "/")
	comps := splitPath(name)
	cur := t.root
	links := 0
	for i := 0; i < len(comps); i++ {
		c := comps[i]
		if !cur.isDir() {
			return walked{}, syscall.ENOTDIR
		}
		if len(c) > maxNameLen {
			return walked{}, syscall.ENAMETOOLONG
		}
		last := i == len(comps)-1
		switch c {
		case ".":
			if last {
				return walked{base: c, n: cur, slash: slash}, 0
			}
			continue
		case "..":
			if last {
				return walked{base: c, n: cur.parent, slash: slash}, 0
			}
			cur = cur.parent
			continue
		}
		n := cur.kids[c]
		if n == nil {
			if last {
				return walked{dir: cur, base: c, slash: slash}, 0
			}
			return walked{}, syscall.ENOENT
		}
		if n.isSymlink() && (!last || mode == follow || mode == noFollow && slash) {
			links++
			if links > maxSymlinks {
				return walked{}, syscall.ELOOP
			}
			if n.target == "" {
				return walked{}, syscall.ENOENT
			}
			rest := append(splitPath(n.target), comps[i+1:]...)
			if strings.HasPrefix(n.target, "/") {
				cur = t.root
			}
			if len(rest) == 0 { // a link to "/"
				rest = []string{"."}
			}
			comps, i = rest, -1
			continue
		}
		if last {
			return walked{dir: cur, base: c, n: n, slash: slash}, 0
		}
		cur = n
	}
	// name is "/" (or only slashes).
	return walked{n: t.root, slash: slash}, 0
}

func splitPath(p string) []string {
	var out []string
	for c := range strings.SplitSeq(p, "/") {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// existing resolves name to a node that must exist; a trailing slash needs
// a directory.
func (t *tree) existing(name string, mode lookupMode) (walked, syscall.Errno) {
	w, errno := t.walk(name, mode)
	if errno != 0 {
		return w, errno
	}
	if w.n == nil {
		return w, syscall.ENOENT
	}
	if w.slash && !w.n.isDir() {
		return w, syscall.ENOTDIR
	}
	return w, 0
}

func (t *tree) info(name string, n *node) providers.FileInfo {
	fi := providers.FileInfo{
		Name:  name,
		Mode:  n.mode,
		Size:  n.size(),
		Mtime: n.mtime,
		Atime: n.atime,
		Ctime: n.ctime,
		Ino:   n.ino,
		Nlink: n.nlink,
		UID:   n.uid,
		GID:   n.gid,
		Dev:   t.dev,
	}
	if n.isSymlink() {
		fi.Target = n.target
	}
	return fi
}

func baseName(name string) string {
	b := path.Base(name)
	if b == "." && name != "." {
		return "/"
	}
	return b
}

func (t *tree) stat(name string, mode lookupMode) (providers.FileInfo, syscall.Errno) {
	w, errno := t.existing(name, mode)
	if errno != 0 {
		return providers.FileInfo{}, errno
	}
	return t.info(baseName(name), w.n), 0
}

func (t *tree) readDir(name string) ([]providers.FileInfo, syscall.Errno) {
	w, errno := t.existing(name, follow)
	if errno != 0 {
		return nil, errno
	}
	if !w.n.isDir() {
		return nil, syscall.ENOTDIR
	}
	names := make([]string, 0, len(w.n.kids))
	for k := range w.n.kids {
		names = append(names, k)
	}
	slices.Sort(names)
	out := make([]providers.FileInfo, 0, len(names))
	for _, k := range names {
		out = append(out, t.info(k, w.n.kids[k]))
	}
	return out, 0
}

// regular resolves name, following symlinks, to an existing regular file.
func (t *tree) regular(name string) (*node, syscall.Errno) {
	w, errno := t.existing(name, follow)
	if errno != 0 {
		return nil, errno
	}
	if w.n.isDir() {
		return nil, syscall.EISDIR
	}
	return w.n, 0
}

func (t *tree) readFile(name string) ([]byte, syscall.Errno) {
	n, errno := t.regular(name)
	if errno != 0 {
		return nil, errno
	}
	return slices.Clone(n.data), 0
}

// readAt copies what the file holds at off into p.
func (t *tree) readAt(name string, p []byte, off int64) (int, syscall.Errno) {
	n, errno := t.regular(name)
	if errno != 0 {
		return 0, errno
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	if off >= int64(len(n.data)) {
		return 0, 0
	}
	return copy(p, n.data[off:]), 0
}

// writeFile replaces name with a new file holding data, as a write to a
// temporary name and a rename over name would: hard links to the old file
// keep the old bytes, a symlink at name is replaced, not followed.
func (t *tree) writeFile(name string, data []byte, perm providers.FileMode) syscall.Errno {
	w, errno := t.walk(name, parent)
	if errno != 0 {
		return errno
	}
	if w.special() || w.slash {
		return syscall.EISDIR
	}
	mode := perm.Perm()&^t.umask | perm&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)&^t.umask
	var uid, gid uint32
	if old := w.n; old != nil {
		if old.isDir() {
			return syscall.EISDIR
		}
		if old.mode.IsRegular() {
			mode = old.mode
			uid, gid = old.uid, old.gid
		}
		t.unlinked(old)
	}
	n := t.newNode(mode, uid, gid)
	n.data = slices.Clone(data)
	t.bytes += int64(len(data))
	w.dir.kids[w.base] = n
	t.touchDir(w.dir)
	return 0
}

func (t *tree) writeAt(name string, p []byte, off int64) (int, syscall.Errno) {
	n, errno := t.regular(name)
	if errno != 0 {
		return 0, errno
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	if end := off + int64(len(p)); end > int64(len(n.data)) {
		t.bytes += end - int64(len(n.data))
		n.data = append(n.data, make([]byte, end-int64(len(n.data)))...)
	}
	copy(n.data[off:], p)
	now := t.now()
	n.mtime, n.ctime = now, now
	return len(p), 0
}

// create is open(name, O_CREAT|O_TRUNC|O_WRONLY[|O_EXCL], perm).
func (t *tree) create(name string, perm providers.FileMode, exclusive bool) syscall.Errno {
	mode := follow
	if exclusive {
		mode = parent // O_EXCL never follows a symlink at name
	}
	w, errno := t.walk(name, mode)
	if errno != 0 {
		return errno
	}
	if w.slash {
		return syscall.EISDIR // open(2) with O_CREAT and a trailing slash
	}
	if w.n != nil {
		switch {
		case exclusive:
			return syscall.EEXIST
		case w.n.isDir():
			return syscall.EISDIR
		}
		t.bytes -= int64(len(w.n.data))
		w.n.data = nil
		now := t.now()
		w.n.mtime, w.n.ctime = now, now
		return 0
	}
	n := t.newNode(perm.Perm()&^t.umask|perm&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky), 0, 0)
	w.dir.kids[w.base] = n
	t.touchDir(w.dir)
	return 0
}

func (t *tree) mkdir(name string, perm providers.FileMode) syscall.Errno {
	w, errno := t.walk(name, parent)
	if errno != 0 {
		return errno
	}
	if w.n != nil {
		return syscall.EEXIST
	}
	n := t.newNode(fs.ModeDir|perm.Perm()&^t.umask|perm&fs.ModeSticky, 0, 0)
	n.parent = w.dir
	w.dir.kids[w.base] = n
	w.dir.nlink++
	t.touchDir(w.dir)
	return 0
}

// remove is unlink(2).
func (t *tree) remove(name string) syscall.Errno {
	w, errno := t.walk(name, parent)
	if errno != 0 {
		return errno
	}
	switch {
	case w.n == nil:
		return syscall.ENOENT
	case w.n.isDir():
		return syscall.EISDIR
	case w.slash:
		return syscall.ENOTDIR
	}
	delete(w.dir.kids, w.base)
	t.unlinked(w.n)
	t.touchDir(w.dir)
	return 0
}

func (t *tree) rmdir(name string) syscall.Errno {
	w, errno := t.walk(name, parent)
	if errno != 0 {
		return errno
	}
	switch {
	case w.n == nil:
		return syscall.ENOENT
	case !w.n.isDir():
		return syscall.ENOTDIR
	case w.base == "":
		return syscall.EBUSY
	case w.base == ".":
		return syscall.EINVAL
	case w.base == "..":
		return syscall.ENOTEMPTY
	case len(w.n.kids) > 0:
		return syscall.ENOTEMPTY
	}
	delete(w.dir.kids, w.base)
	w.dir.nlink--
	t.unlinked(w.n)
	t.touchDir(w.dir)
	return 0
}

func (t *tree) rename(oldname, newname string) syscall.Errno {
	o, errno := t.walk(oldname, parent)
	if errno != 0 {
		return errno
	}
	nw, errno := t.walk(newname, parent)
	if errno != 0 {
		return errno
	}
	if o.n == nil {
		return syscall.ENOENT
	}
	if o.special() || nw.special() {
		return syscall.EBUSY
	}
	if !o.n.isDir() && (o.slash || nw.slash) {
		return syscall.ENOTDIR
	}
	if nw.n == o.n {
		return 0 // two names of one file: rename does nothing
	}
	if o.n.isDir() {
		for d := nw.dir; ; d = d.parent {
			if d == o.n {
				return syscall.EINVAL // into its own subtree
			}
			if d == t.root {
				break
			}
		}
		if nw.n != nil {
			if !nw.n.isDir() {
				return syscall.ENOTDIR
			}
			if len(nw.n.kids) > 0 {
				return syscall.ENOTEMPTY
			}
		}
	} else if nw.n != nil && nw.n.isDir() {
		return syscall.EISDIR
	}
	if old := nw.n; old != nil {
		if old.isDir() {
			nw.dir.nlink--
		}
		t.unlinked(old)
	}
	delete(o.dir.kids, o.base)
	nw.dir.kids[nw.base] = o.n
	if o.n.isDir() && o.dir != nw.dir {
		o.dir.nlink--
		nw.dir.nlink++
		o.n.parent = nw.dir
	}
	o.n.ctime = t.now()
	t.touchDir(o.dir)
	t.touchDir(nw.dir)
	return 0
}

func (t *tree) chmod(name string, mode providers.FileMode) syscall.Errno {
	w, errno := t.existing(name, follow)
	if errno != 0 {
		return errno
	}
	keep := fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky
	w.n.mode = w.n.mode&^keep | mode&keep
	w.n.ctime = t.now()
	return 0
}

func (t *tree) chown(name string, uid, gid int) syscall.Errno {
	w, errno := t.existing(name, follow)
	if errno != 0 {
		return errno
	}
	if uid < -1 || gid < -1 {
		return syscall.EINVAL
	}
	n := w.n
	if uid >= 0 {
		n.uid = uint32(uid)
	}
	if gid >= 0 {
		n.gid = uint32(gid)
	}
	if (uid >= 0 || gid >= 0) && !n.isDir() {
		// Linux drops setuid, and setgid on a group-executable file, when
		// the owner changes.
		n.mode &^= fs.ModeSetuid
		if n.mode&0o010 != 0 {
			n.mode &^= fs.ModeSetgid
		}
	}
	n.ctime = t.now()
	return 0
}

func (t *tree) utimes(name string, atime, mtime time.Time) syscall.Errno {
	w, errno := t.existing(name, follow)
	if errno != 0 {
		return errno
	}
	if !atime.IsZero() {
		w.n.atime = atime
	}
	if !mtime.IsZero() {
		w.n.mtime = mtime
	}
	w.n.ctime = t.now()
	return 0
}

func (t *tree) truncate(name string, size int64) syscall.Errno {
	n, errno := t.regular(name)
	if errno != 0 {
		return errno
	}
	if size < 0 {
		return syscall.EINVAL
	}
	t.bytes += size - int64(len(n.data))
	if size <= int64(len(n.data)) {
		n.data = n.data[:size:size]
	} else {
		n.data = append(n.data, make([]byte, size-int64(len(n.data)))...)
	}
	now := t.now()
	n.mtime, n.ctime = now, now
	return 0
}

func (t *tree) symlink(target, name string) syscall.Errno {
	w, errno := t.walk(name, parent)
	if errno != 0 {
		return errno
	}
	switch {
	case w.n != nil:
		return syscall.EEXIST
	case target == "" || w.slash:
		return syscall.ENOENT
	case len(target) >= maxPathLen:
		return syscall.ENAMETOOLONG
	}
	n := t.newNode(fs.ModeSymlink|0o777, 0, 0)
	n.target = target
	w.dir.kids[w.base] = n
	t.touchDir(w.dir)
	return 0
}

func (t *tree) readlink(name string) (string, syscall.Errno) {
	w, errno := t.existing(name, noFollow)
	if errno != 0 {
		return "", errno
	}
	if !w.n.isSymlink() {
		return "", syscall.EINVAL
	}
	return w.n.target, 0
}

// link is link(2), which does not follow a symlink at oldname.
func (t *tree) link(oldname, newname string) syscall.Errno {
	o, errno := t.existing(oldname, parent)
	if errno != 0 {
		return errno
	}
	nw, errno := t.walk(newname, parent)
	if errno != 0 {
		return errno
	}
	switch {
	case nw.n != nil:
		return syscall.EEXIST
	case o.n.isDir():
		return syscall.EPERM
	case nw.slash:
		return syscall.ENOENT
	}
	o.n.nlink++
	o.n.ctime = t.now()
	nw.dir.kids[nw.base] = o.n
	t.touchDir(nw.dir)
	return 0
}

func (t *tree) statfs(name string) (providers.StatFS, syscall.Errno) {
	if _, errno := t.existing(name, follow); errno != 0 {
		return providers.StatFS{}, errno
	}
	used := uint64((t.bytes + blockSize - 1) / blockSize)
	free := uint64(fsBlocks) - min(used, fsBlocks)
	return providers.StatFS{
		Bsize:   blockSize,
		Blocks:  fsBlocks,
		Bfree:   free,
		Bavail:  free,
		Files:   fsFiles,
		Ffree:   fsFiles - min(uint64(t.nodes), fsFiles),
		NameLen: maxNameLen,
	}, 0
}

// walkTree lists everything under root, parents first, siblings in byte
// order, names relative to root; symlinks are listed, not followed.
func (t *tree) walkTree(root string) ([]providers.FileInfo, syscall.Errno) {
	w, errno := t.existing(root, follow)
	if errno != 0 {
		return nil, errno
	}
	if !w.n.isDir() {
		return nil, syscall.ENOTDIR
	}
	var out []providers.FileInfo
	var visit func(d *node, prefix string)
	visit = func(d *node, prefix string) {
		names := make([]string, 0, len(d.kids))
		for k := range d.kids {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			n := d.kids[k]
			out = append(out, t.info(prefix+k, n))
			if n.isDir() {
				visit(n, prefix+k+"/")
			}
		}
	}
	visit(w.n, "")
	return out, 0
}
