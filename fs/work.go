package fs

import (
	"context"
	iofs "io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// workNode is a file, directory or link under NAME/work/: the box's
// workspace, served through the box's cache.
type workNode struct {
	gofs.Inode
	v *boxView

	opened atomic.Pointer[openState] // made by the first open
}

// openState is what the opens of one file last knew of it, shared by all
// of them. The kernel names no open in an fstat's getattr, and go-fuse
// then answers through any open of the node, maybe one made before a
// write through another (a create's open whose release has not arrived
// yet): each must give what the newest of them knows.
type openState struct {
	mu   sync.Mutex
	last providers.FileInfo // kept up to date by the opens' writes
	have bool
}

// openState is the state this node's opens share.
func (n *workNode) openState() *openState {
	if st := n.opened.Load(); st != nil {
		return st
	}
	n.opened.CompareAndSwap(nil, &openState{})
	return n.opened.Load()
}

var (
	_ gofs.NodeLookuper    = (*workNode)(nil)
	_ gofs.NodeGetattrer   = (*workNode)(nil)
	_ gofs.NodeSetattrer   = (*workNode)(nil)
	_ gofs.NodeReaddirer   = (*workNode)(nil)
	_ gofs.NodeOpener      = (*workNode)(nil)
	_ gofs.NodeCreater     = (*workNode)(nil)
	_ gofs.NodeMkdirer     = (*workNode)(nil)
	_ gofs.NodeUnlinker    = (*workNode)(nil)
	_ gofs.NodeRmdirer     = (*workNode)(nil)
	_ gofs.NodeRenamer     = (*workNode)(nil)
	_ gofs.NodeSymlinker   = (*workNode)(nil)
	_ gofs.NodeReadlinker  = (*workNode)(nil)
	_ gofs.NodeLinker      = (*workNode)(nil)
	_ gofs.NodeStatfser    = (*workNode)(nil)
	_ gofs.NodeFsyncer     = (*workNode)(nil)
	_ gofs.NodeMknoder     = (*workNode)(nil)
	_ gofs.NodeOnForgetter = (*workNode)(nil)
)

// rel is the node's path under work/, or ENOENT for a node whose name went
// away (an unlinked file still open).
func (n *workNode) rel() (string, syscall.Errno) {
	n.v.mu.Lock()
	root := n.v.workRoot
	n.v.mu.Unlock()
	if root == nil {
		return "", syscall.ENOENT
	}
	rootIno := root.EmbeddedInode()
	var segs []string
	p := n.EmbeddedInode()
	for p != rootIno {
		name, parent := p.Parent()
		if parent == nil {
			return "", syscall.ENOENT
		}
		segs = append(segs, name)
		p = parent
	}
	for i, j := 0, len(segs)-1; i < j; i, j = i+1, j-1 {
		segs[i], segs[j] = segs[j], segs[i]
	}
	return strings.Join(segs, "/"), 0
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// run performs one cache operation within the box's bounds, recording a
// failure in the box's err file. One that changes nothing goes on when
// its caller is interrupted by a signal that does not end it (patient).
// A missing name, or a name taken (EEXIST, ENOTEMPTY), is an answer, not
// a failure: git's lock files and its rmdir of every directory a checkout
// left would otherwise bury the last real error (a push that failed at
// close) under routine ones.
func (n *workNode) run(ctx context.Context, mutation bool, extra time.Duration, fn func(ctx context.Context, c *cache.Cache) error) syscall.Errno {
	if !mutation {
		var done context.CancelFunc
		ctx, done = patient(ctx)
		defer done()
	}
	_, c, err := n.v.b.Parts(ctx)
	if err == nil {
		err = n.v.b.Do(ctx, mutation, extra, func(ctx context.Context) error { return fn(ctx, c) })
	}
	if err != nil {
		if code := providers.CodeOf(err); code != providers.NotFound && code != providers.Exists {
			n.v.b.SetErr(err)
		}
		return toErrno(err)
	}
	return 0
}

// fillAttr renders a box file's attributes for the kernel.
func fillAttr(a *fuse.Attr, fi providers.FileInfo, ino uint64) {
	a.Ino = ino
	a.Size = uint64(fi.Size)
	if fi.IsSymlink() && fi.Target != "" {
		a.Size = uint64(len(fi.Target))
	}
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = 4096
	a.Mode = providers.UnixMode(fi.Mode)
	a.Nlink = fi.Nlink
	if a.Nlink == 0 {
		a.Nlink = 1
	}
	a.Uid, a.Gid = fi.UID, fi.GID
	mtime, atime, ctime := fi.Mtime, fi.Atime, fi.Ctime
	if atime.IsZero() {
		atime = mtime
	}
	if ctime.IsZero() {
		ctime = mtime
	}
	a.SetTimes(&atime, &mtime, &ctime)
}

// child returns the node for rel, of the kind fi says.
func (n *workNode) child(ctx context.Context, rel string, fi providers.FileInfo, out *fuse.EntryOut) *gofs.Inode {
	ino, gen := n.v.inos().node(rel, fi)
	n.v.fillAttr(&out.Attr, fi, ino)
	mode := providers.UnixMode(fi.Mode) & syscall.S_IFMT
	return n.NewInode(ctx, &workNode{v: n.v}, gofs.StableAttr{Mode: mode, Ino: ino, Gen: gen})
}

// OnForget lets the box's inode numbers drop the node's paths and number
// once go-fuse has dropped the node (the kernel forgot it), so that they
// hold no more than the kernel does.
func (n *workNode) OnForget() {
	n.v.forgetIno(n.StableAttr().Ino)
}

func (n *workNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	dir, errno := n.rel()
	if errno != 0 {
		return nil, errno
	}
	rel := joinRel(dir, name)
	var fi providers.FileInfo
	if errno := n.run(ctx, false, 0, func(ctx context.Context, c *cache.Cache) (err error) {
		fi, err = c.Lookup(ctx, rel)
		return err
	}); errno != 0 {
		return nil, missing(name, errno)
	}
	return n.child(ctx, rel, fi, out), 0
}

func (n *workNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	wh, _ := f.(*workHandle)
	if wh != nil {
		if fi, ok := wh.h.Attr(); ok && n.sameKind(fi) {
			wh.remember(fi)
			n.v.fillAttr(&out.Attr, fi, n.StableAttr().Ino)
			if fi.Nlink == 0 {
				out.Attr.Nlink = 0 // an open file's own fstat: unlinked
			}
			return 0
		}
	}
	rel, errno := n.rel()
	if errno != 0 {
		// fstat or read(2) of a file unlinked while open (tmpfile(3),
		// Python's TemporaryFile): what this open last knew, as a local
		// disk answers with st_nlink 0.
		if wh != nil && wh.unlinkedAttr(&out.Attr, n.StableAttr().Ino) {
			return 0
		}
		return errno
	}
	var fi providers.FileInfo
	if errno := n.run(ctx, false, 0, func(ctx context.Context, c *cache.Cache) (err error) {
		fi, err = c.Getattr(ctx, rel)
		return err
	}); errno != 0 {
		return errno
	}
	if !n.sameKind(fi) {
		return n.replacedAttr(wh, &out.Attr)
	}
	if wh != nil {
		wh.remember(fi)
	}
	if rel == "" {
		n.v.learnOwner(fi)
	}
	n.v.fillAttr(&out.Attr, fi, n.StableAttr().Ino)
	return 0
}

// Setattr is truncate, chmod, chown and utimes, each a call to the box in
// that order; on a symbolic link, setattrLink. An open file whose name is
// gone can still be truncated through its handle.
func (n *workNode) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	rel, relErr := n.rel()
	wh, _ := f.(*workHandle)
	if relErr != 0 && wh == nil {
		return relErr
	}
	var fi providers.FileInfo
	have := false
	if size, ok := in.GetSize(); ok {
		if errno := n.run(ctx, true, 0, func(ctx context.Context, c *cache.Cache) (err error) {
			fi, have, err = n.truncate(ctx, c, rel, wh, int64(size))
			if err == nil && relErr == 0 {
				fi, have, err = n.dropSetgid(ctx, c, rel, fi, have)
			}
			return err
		}); errno != 0 {
			return errno
		}
	}
	if relErr != 0 {
		return wh.setattrUnlinked(in, out, n.StableAttr().Ino)
	}
	if n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFLNK {
		return n.setattrLink(ctx, rel, in, out)
	}
	for _, step := range n.v.setattrSteps(rel, in) {
		if errno := n.run(ctx, true, 0, func(ctx context.Context, c *cache.Cache) (err error) {
			fi, err = step(ctx, c)
			have = err == nil
			return err
		}); errno != 0 {
			return errno
		}
	}
	if !have {
		return n.Getattr(ctx, f, out)
	}
	if fi.Nlink > 1 {
		n.v.notifyLinked(ctx, rel, true) // a chmod, chown, utimes or truncate of one name is of them all
	}
	if wh != nil {
		if lfi, ok := wh.h.Attr(); ok {
			fi = lfi
		}
		wh.remember(fi)
	}
	n.v.fillAttr(&out.Attr, fi, n.StableAttr().Ino)
	out.SetTimeout(n.v.fs.m.Options().AttrTimeout) // as long as Getattr's answer is kept
	return 0
}

// truncate sets the file's size: through the open handle when there is
// one (its copy is the file's content), else in the cache and the box.
// have says fi holds the file's attributes after.
func (n *workNode) truncate(ctx context.Context, c *cache.Cache, rel string, wh *workHandle, size int64) (fi providers.FileInfo, have bool, err error) {
	if wh != nil {
		if err := wh.h.Truncate(size); err != nil {
			return fi, false, err
		}
		fi, have = wh.h.Attr()
		return fi, have, nil
	}
	fi, err = c.Truncate(ctx, rel, size)
	return fi, err == nil, err
}

// setattrUnlinked answers a setattr on an open file whose name is gone:
// only its content (its size) is ours to change, and that is done.
func (wh *workHandle) setattrUnlinked(in *fuse.SetAttrIn, out *fuse.AttrOut, ino uint64) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		wh.resized(int64(size))
	}
	if fi, ok := wh.h.Attr(); ok {
		wh.n.v.fillAttr(&out.Attr, fi, ino)
	} else {
		wh.unlinkedAttr(&out.Attr, ino)
	}
	return 0
}

// setattrSteps are the calls a setattr asks of the box besides truncate:
// chmod, chown and utimes, the ones in asks for, in that order.
func (v *boxView) setattrSteps(rel string, in *fuse.SetAttrIn) []func(ctx context.Context, c *cache.Cache) (providers.FileInfo, error) {
	var steps []func(ctx context.Context, c *cache.Cache) (providers.FileInfo, error)
	if mode, ok := in.GetMode(); ok {
		m := providers.FileModeFromUnix(mode) & (iofs.ModePerm | iofs.ModeSetuid | iofs.ModeSetgid | iofs.ModeSticky)
		steps = append(steps, func(ctx context.Context, c *cache.Cache) (providers.FileInfo, error) {
			return c.Chmod(ctx, rel, m)
		})
	}
	if u, g, ok := v.chownIDs(in); ok {
		steps = append(steps, func(ctx context.Context, c *cache.Cache) (providers.FileInfo, error) {
			return c.Chown(ctx, rel, u, g)
		})
	}
	atime, aok := in.GetATime()
	mtime, mok := in.GetMTime()
	if aok || mok {
		var at, mt time.Time // zero: left as it is
		if aok {
			at = atime
		}
		if mok {
			mt = mtime
		}
		steps = append(steps, func(ctx context.Context, c *cache.Cache) (providers.FileInfo, error) {
			return c.Utimes(ctx, rel, at, mt)
		})
	}
	return steps
}

// setattrLink is chown -h, touch -h, cp -a and tar on a symbolic link
// (lchown, utimensat with AT_SYMLINK_NOFOLLOW). The box's Chown and Utimes
// follow links, so passing them on would change the link's target (or
// fail with ENOENT for a dangling link): the cache's Lchown and Lutimes
// change the link itself and record what they set. A change the link
// already has costs nothing.
func (n *workNode) setattrLink(ctx context.Context, rel string, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var fi providers.FileInfo
	if errno := n.run(ctx, false, 0, func(ctx context.Context, c *cache.Cache) (err error) {
		fi, err = c.Getattr(ctx, rel)
		return err
	}); errno != 0 {
		return errno
	}
	if _, ok := in.GetSize(); ok {
		return syscall.EINVAL
	}
	if _, ok := in.GetMode(); ok {
		return syscall.EOPNOTSUPP // what fchmodat(AT_SYMLINK_NOFOLLOW) says on Linux
	}
	u, g, chown := n.v.chownIDs(in)
	if chown && (u < 0 || uint32(u) == fi.UID) && (g < 0 || uint32(g) == fi.GID) {
		chown = false // the link has them already
	}
	var at, mt time.Time // zero: left as it is
	if t, ok := in.GetATime(); ok && !t.Equal(fi.Atime) {
		at = t
	}
	if t, ok := in.GetMTime(); ok && !t.Equal(fi.Mtime) {
		mt = t
	}
	times := !at.IsZero() || !mt.IsZero()
	if chown || times {
		if errno := n.run(ctx, true, 0, func(ctx context.Context, c *cache.Cache) (err error) {
			if chown {
				if fi, err = c.Lchown(ctx, rel, u, g); err != nil {
					return err
				}
			}
			if times {
				fi, err = c.Lutimes(ctx, rel, at, mt)
			}
			return err
		}); errno != 0 {
			return errno
		}
	}
	n.v.fillAttr(&out.Attr, fi, n.StableAttr().Ino)
	return 0
}

func (n *workNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	rel, errno := n.rel()
	if errno != 0 {
		return nil, errno
	}
	var list []providers.FileInfo
	if errno := n.run(ctx, false, 0, func(ctx context.Context, c *cache.Cache) (err error) {
		list, err = c.ReadDir(ctx, rel)
		return err
	}); errno != 0 {
		return nil, errno
	}
	ents := make([]fuse.DirEntry, 0, len(list)+2)
	parentIno := n.StableAttr().Ino
	if _, p := n.Parent(); p != nil {
		parentIno = p.StableAttr().Ino
	}
	ents = append(ents,
		fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: n.StableAttr().Ino},
		fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: parentIno})
	for _, fi := range list {
		ents = append(ents, fuse.DirEntry{
			Name: fi.Name,
			Mode: providers.UnixMode(fi.Mode) & syscall.S_IFMT,
			Ino:  n.v.inos().peekFile(joinRel(rel, fi.Name), fi),
		})
	}
	return gofs.NewListDirStream(ents), 0
}

// transferTime is the extra bound for moving size bytes (at 4 MiB/s, the
// slowest channel we take as alive).
func transferTime(size int64) time.Duration {
	return time.Duration(size/(4<<20)) * time.Second
}

func (n *workNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	rel, errno := n.rel()
	if errno != 0 {
		return nil, 0, errno
	}
	var h *cache.Handle
	var keep bool
	var size int64
	var before providers.FileInfo
	haveBefore := false
	if _, c, err := n.v.b.Parts(ctx); err == nil {
		if fi, err := c.Getattr(ctx, rel); err == nil {
			size, before, haveBefore = c.FetchSize(fi.Size), fi, true
		}
	}
	write := int(flags)&syscall.O_ACCMODE != syscall.O_RDONLY
	if errno := n.run(ctx, write, transferTime(size), func(ctx context.Context, c *cache.Cache) (err error) {
		h, keep, err = c.OpenFile(ctx, rel, int(flags))
		return err
	}); errno != 0 {
		return nil, 0, errno
	}
	var fuseFlags uint32
	if keep {
		fuseFlags |= fuse.FOPEN_KEEP_CACHE
	}
	// What the open reads, not what its name held at the stat above: a
	// rename over the name in between (a symbolic link, then a file
	// again) leaves the stat describing another file. The stat, when it
	// is of the file the open reads, as it was shown (the times the host
	// reported of a file it wrote, not the box's of its push).
	wh := n.newHandle(h)
	if fi, ok := h.Attr(); ok {
		wh.remember(fi)
	} else if fi, ok := h.Opened(); ok && !(haveBefore && sameFile(before, fi)) {
		wh.remember(fi)
	} else if haveBefore {
		if int(flags)&syscall.O_TRUNC != 0 {
			before.Size = 0
		}
		wh.remember(before)
	}
	if write && int(flags)&syscall.O_TRUNC != 0 {
		wh.dropSetgid(ctx)
	}
	return wh, fuseFlags, 0
}

func (n *workNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	dir, errno := n.rel()
	if errno != 0 {
		return nil, nil, 0, errno
	}
	rel := joinRel(dir, name)
	var h *cache.Handle
	var fi providers.FileInfo
	if errno := n.run(ctx, true, 0, func(ctx context.Context, c *cache.Cache) (err error) {
		h, fi, err = c.Create(ctx, rel, int(flags), providers.FileModeFromUnix(mode).Perm())
		if err == nil {
			if fi, err = n.settle(ctx, c, rel, fi, mode&0o7777); err != nil {
				h.Release(ctx)
			} else if uid, gid := n.v.newOwner(ctx); uid >= 0 || gid >= 0 {
				// Another owner than the box's user: made in the box now,
				// so that a box which cannot give it to them refuses the
				// create, as settle does for what the box made at once.
				if err = h.Flush(ctx); err != nil {
					h.Release(ctx)
					c.Remove(ctx, rel)
				}
			}
		}
		return err
	}); errno != 0 {
		return nil, nil, 0, errno
	}
	n.v.inos().remove(rel) // a new file: never the number of one that was here
	ch := n.child(ctx, rel, fi, out)
	wh := ch.Operations().(*workNode).newHandle(h) // the new file's open, not its directory's
	wh.remember(fi)
	return ch, wh, 0, 0
}

func (n *workNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if mode&syscall.S_IFMT != syscall.S_IFREG {
		return n.mknodSpecial(ctx, name, mode, dev, out)
	}
	ch, fh, _, errno := n.Create(ctx, name, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, mode&0o7777, out)
	if errno == 0 {
		fh.(*workHandle).Release(ctx)
	}
	return ch, errno
}

func (n *workNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	dir, errno := n.rel()
	if errno != 0 {
		return nil, errno
	}
	rel := joinRel(dir, name)
	var fi providers.FileInfo
	if errno := n.run(ctx, true, 0, func(ctx context.Context, c *cache.Cache) (err error) {
		if fi, err = c.Mkdir(ctx, rel, providers.FileModeFromUnix(mode).Perm()); err == nil {
			fi, err = n.settle(ctx, c, rel, fi, mode&0o7777)
		}
		return err
	}); errno != 0 {
		return nil, errno
	}
	n.v.inos().remove(rel)
	return n.child(ctx, rel, fi, out), 0
}

func (n *workNode) Unlink(ctx context.Context, name string) syscall.Errno {
	dir, errno := n.rel()
	if errno != 0 {
		return errno
	}
	rel := joinRel(dir, name)
	others := n.v.linked(ctx, rel)
	if errno := n.run(ctx, true, 0, func(ctx context.Context, c *cache.Cache) error { return c.Remove(ctx, rel) }); errno != 0 {
		return errno
	}
	n.v.inos().remove(rel)
	n.v.notifyNames(others, false) // one link fewer
	return 0
}

func (n *workNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	dir, errno := n.rel()
	if errno != 0 {
		return errno
	}
	rel := joinRel(dir, name)
	if errno := n.run(ctx, true, 0, func(ctx context.Context, c *cache.Cache) error { return c.Rmdir(ctx, rel) }); errno != 0 {
		return errno
	}
	n.v.inos().remove(rel)
	return 0
}

func (n *workNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*workNode)
	if !ok || np.v != n.v {
		return syscall.EXDEV
	}
	if flags&unix.RENAME_EXCHANGE != 0 || flags&unix.RENAME_WHITEOUT != 0 {
		return syscall.EINVAL
	}
	dir, errno := n.rel()
	if errno != 0 {
		return errno
	}
	ndir, errno := np.rel()
	if errno != 0 {
		return errno
	}
	oldrel, newrel := joinRel(dir, name), joinRel(ndir, newName)
	others := n.v.linked(ctx, newrel) // a replaced file's other names
	if errno := n.run(ctx, true, 0, func(ctx context.Context, c *cache.Cache) error {
		if flags&unix.RENAME_NOREPLACE != 0 {
			// Not atomic in the box: checked, then renamed.
			if _, err := c.Lookup(ctx, newrel); err == nil {
				return providers.PathError("fs.Rename", n.v.b.Name(), newrel, syscall.EEXIST)
			} else if providers.CodeOf(err) != providers.NotFound {
				return err
			}
		}
		return c.Rename(ctx, oldrel, newrel)
	}); errno != 0 {
		return errno
	}
	n.v.inos().rename(oldrel, newrel)
	n.v.notifyNames(others, false) // one link fewer
	return 0
}

func (n *workNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	dir, errno := n.rel()
	if errno != 0 {
		return nil, errno
	}
	rel := joinRel(dir, name)
	var fi providers.FileInfo
	if errno := n.run(ctx, true, 0, func(ctx context.Context, c *cache.Cache) (err error) {
		if fi, err = c.Symlink(ctx, target, rel); err == nil {
			fi, err = n.settle(ctx, c, rel, fi, ^uint32(0))
		}
		return err
	}); errno != 0 {
		return nil, errno
	}
	n.v.inos().remove(rel)
	return n.child(ctx, rel, fi, out), 0
}

func (n *workNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	rel, errno := n.rel()
	if errno != 0 {
		return nil, errno
	}
	var target string
	if errno := n.run(ctx, false, 0, func(ctx context.Context, c *cache.Cache) (err error) {
		target, err = c.Readlink(ctx, rel)
		if err == nil {
			target = presentTarget(rel, target, c.Root(), n.linkView())
		}
		return err
	}); errno != 0 {
		return nil, errno
	}
	return []byte(target), 0
}

func (n *workNode) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	t, ok := target.(*workNode)
	if !ok || t.v != n.v {
		return nil, syscall.EXDEV
	}
	oldrel, errno := t.rel()
	if errno != 0 {
		return nil, errno
	}
	dir, errno := n.rel()
	if errno != 0 {
		return nil, errno
	}
	rel := joinRel(dir, name)
	var fi providers.FileInfo
	if errno := n.run(ctx, true, 0, func(ctx context.Context, c *cache.Cache) (err error) {
		fi, err = c.Link(ctx, oldrel, rel)
		return err
	}); errno != 0 {
		return nil, errno
	}
	// The new name is the old one's inode (link(2): git clone of a local
	// repository checks the numbers), so the kernel holds one file under
	// both names; names the box links by itself share one number too.
	n.v.inos().share(oldrel, rel, fi)
	n.v.notifyLinked(ctx, rel, false)
	return n.child(ctx, rel, fi, out), 0
}

func (n *workNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var st providers.StatFS
	if errno := n.run(ctx, false, 0, func(ctx context.Context, c *cache.Cache) (err error) {
		st, err = c.Statfs(ctx)
		return err
	}); errno != 0 {
		return errno
	}
	out.Bsize = st.Bsize
	out.Frsize = st.Bsize
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bavail
	out.Files, out.Ffree = st.Files, st.Ffree
	out.NameLen = st.NameLen
	if out.NameLen == 0 {
		out.NameLen = 255
	}
	return 0
}

// Fsync of a file is its handle's; of a directory, in write-behind, a
// barrier: everything closed is pushed first.
func (n *workNode) Fsync(ctx context.Context, f gofs.FileHandle, flags uint32) syscall.Errno {
	if wh, ok := f.(*workHandle); ok {
		return wh.Fsync(ctx, flags)
	}
	return n.run(ctx, true, time.Minute, func(ctx context.Context, c *cache.Cache) error {
		if !c.WriteBehind() {
			return nil
		}
		return c.FlushAll(ctx)
	})
}

// workHandle is one open of a work/ file.
type workHandle struct {
	n  *workNode
	h  *cache.Handle
	st *openState // the file as its opens last saw it
}

// newHandle is an open of n through h.
func (n *workNode) newHandle(h *cache.Handle) *workHandle {
	return &workHandle{n: n, h: h, st: n.openState()}
}

// lastSeen is the file as its opens last saw it, if any saw it.
func (wh *workHandle) lastSeen() (providers.FileInfo, bool) {
	wh.st.mu.Lock()
	defer wh.st.mu.Unlock()
	return wh.st.last, wh.st.have
}

// sameFile reports whether two stats of a name found one file: its kind,
// inode and size (the times shown of it may be the host's).
func sameFile(a, b providers.FileInfo) bool {
	return a.Mode.Type() == b.Mode.Type() && a.Ino == b.Ino && a.Dev == b.Dev && a.Size == b.Size
}

// remember keeps fi as what this open knows of its file. Attributes of
// another kind of file are of another file that took its name, never its
// own: go-fuse answers a getattr with the node's type over whatever mode
// we give, so a symbolic link's would show as a regular file of the link's
// size, and they are not kept.
func (wh *workHandle) remember(fi providers.FileInfo) {
	if !wh.n.sameKind(fi) {
		return
	}
	wh.st.mu.Lock()
	wh.st.last, wh.st.have = fi, true
	wh.st.mu.Unlock()
}

// wrote records a write through this open that ended at end.
func (wh *workHandle) wrote(end int64) {
	st := wh.st
	st.mu.Lock()
	if end > st.last.Size {
		st.last.Size = end
	}
	st.last.Mtime = time.Now()
	st.last.Ctime = st.last.Mtime
	st.mu.Unlock()
}

// resized records a truncate through this open.
func (wh *workHandle) resized(size int64) {
	st := wh.st
	st.mu.Lock()
	st.last.Size = size
	st.last.Mtime = time.Now()
	st.last.Ctime = st.last.Mtime
	st.mu.Unlock()
}

// unlinkedAttr fills a for a file whose name is gone while this open
// holds it: its last known attributes, with no links.
func (wh *workHandle) unlinkedAttr(a *fuse.Attr, ino uint64) bool {
	fi, ok := wh.lastSeen()
	if !ok {
		return false
	}
	wh.n.v.fillAttr(a, fi, ino)
	a.Nlink = 0
	return true
}

var (
	_ gofs.FileReader   = (*workHandle)(nil)
	_ gofs.FileWriter   = (*workHandle)(nil)
	_ gofs.FileFlusher  = (*workHandle)(nil)
	_ gofs.FileFsyncer  = (*workHandle)(nil)
	_ gofs.FileReleaser = (*workHandle)(nil)

	_ gofs.FilePassthroughFder = (*workHandle)(nil)
)

// PassthroughFd hands the kernel the box's own file this open uses (a
// local box's, in write-through), so its reads and writes go there with
// no trip through the daemon, as go-fuse's loopback serves them (FUSE
// passthrough; where the kernel refuses it, opens are served as before).
// A file with a set-user-ID or set-group-ID bit is not handed over: the
// kernel would write it with the daemon's rights, which keep the bits a
// write by its caller drops.
func (wh *workHandle) PassthroughFd() (int, bool) {
	fd, fi, ok := wh.h.HostFile()
	if !ok || fi.Mode&(iofs.ModeSetuid|iofs.ModeSetgid) != 0 {
		return 0, false
	}
	return fd, true
}

func (wh *workHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if wh.h.Streamed() {
		return wh.readStream(ctx, dest, off)
	}
	n, err := wh.h.ReadAt(dest, off)
	if err != nil {
		return nil, toErrno(err)
	}
	if n < len(dest) {
		// The end of the copy this open holds: the box's file may have grown
		// or changed since (tail -f of a file a command in the box writes).
		var renewed bool
		b := wh.n.v.b
		last, _ := wh.lastSeen()
		known := last.Size // the size the last fstat saw
		pctx, done := patient(ctx)
		defer done()
		rerr := b.Do(pctx, false, transferTime(max(known, off+int64(len(dest)))), func(ctx context.Context) (err error) {
			renewed, err = wh.h.Renew(ctx)
			return err
		})
		if rerr == nil && renewed {
			if n, err = wh.h.ReadAt(dest, off); err != nil {
				return nil, toErrno(err)
			}
		}
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// readStream reads a file the cache budget cannot hold from the box, one
// window at a time, within the box's operation bound.
func (wh *workHandle) readStream(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	var n int
	pctx, done := patient(ctx)
	defer done()
	err := wh.n.v.b.Do(pctx, false, 0, func(ctx context.Context) (err error) {
		n, err = wh.h.Read(ctx, dest, off)
		if n == 0 && err == nil {
			// At the end of the window: the box's file may have grown.
			if renewed, rerr := wh.h.Renew(ctx); rerr == nil && renewed {
				n, err = wh.h.Read(ctx, dest, off)
			}
		}
		return err
	})
	if err != nil {
		return nil, toErrno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (wh *workHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	wh.dropSetgid(ctx)
	n, err := wh.h.WriteAt(data, off)
	if n > 0 {
		wh.wrote(off + int64(n))
	}
	if err != nil {
		wh.n.v.b.SetErr(err)
		return uint32(n), toErrno(err)
	}
	return uint32(n), 0
}

// size is what the push of this file has to move.
func (wh *workHandle) size() int64 {
	if fi, ok := wh.h.Attr(); ok {
		return fi.Size
	}
	return 0
}

// pushSize is how many bytes a flush, fsync or release of this open may
// push: none for an open writing the box's own file in place (its writes
// are there already), so that one asks no fstat for it.
func (wh *workHandle) pushSize() int64 {
	if wh.h.InPlace() {
		return 0
	}
	return wh.size()
}

// Flush is close(2): the box has the file's bytes when it returns, or the
// error says why not (the data stays dirty and journaled).
func (wh *workHandle) Flush(ctx context.Context) syscall.Errno {
	b := wh.n.v.b
	dirty := wh.h.Holds()
	err := b.Do(ctx, true, transferTime(wh.pushSize()), wh.h.Flush)
	if err != nil {
		b.SetErr(providers.E(0, "close", err))
		return toErrno(err)
	}
	if dirty {
		wh.pushed(ctx, wh.h.InPlace())
	}
	return 0
}

func (wh *workHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	b := wh.n.v.b
	dirty := wh.h.Holds()
	if err := b.Do(ctx, true, transferTime(wh.pushSize()), wh.h.Fsync); err != nil {
		b.SetErr(providers.E(0, "fsync", err))
		return toErrno(err)
	}
	if dirty {
		wh.pushed(ctx, wh.h.InPlace())
	}
	return 0
}

// pushed tells the kernel what a push changed besides the file: its
// directory's times (the box got the file under a temporary name and a
// rename, so the directory's mtime moved there; rsync --inplace re-stats
// each directory it wrote in and resets its times only when they moved),
// and, for a hard link, its other names (their own inodes here: the kernel
// would keep their old size, and an O_APPEND write through one would land
// at the old end). Only attributes are dropped (offset -1): no page lock
// is taken inside the FLUSH, and an open without FOPEN_KEEP_CACHE drops
// the pages. A file written in place (inPlace) was never renamed: its
// directory is as the kernel knows it.
func (wh *workHandle) pushed(ctx context.Context, inPlace bool) {
	v := wh.n.v
	if !v.fs.mounted() {
		return
	}
	if _, parent := wh.n.Parent(); parent != nil && !inPlace {
		parent.NotifyContent(-1, 0)
	}
	if rel, errno := wh.n.rel(); errno == 0 {
		v.notifyLinked(ctx, rel, true)
	}
}

func (wh *workHandle) Release(ctx context.Context) syscall.Errno {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wh.n.v.fs.m.Options().OpTimeout+transferTime(wh.pushSize()))
	defer cancel()
	wh.h.Release(rctx)
	return 0
}
