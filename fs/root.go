package fs

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/boxfs/boxfs/providers"
)

// createTimeout bounds a ctl new/attach: a cloud sandbox can take a while.
const createTimeout = 5 * time.Minute

// boxEntryTimeout is how long the kernel keeps a box name without asking:
// as good as never (0 would be replaced by the mount's default), since boxes
// come and go through ctl.
const boxEntryTimeout = uncached

// rootNode is MOUNT/: ctl, err, and one directory per box.
type rootNode struct {
	gofs.Inode
	fs *FS
}

var (
	_ gofs.NodeOnAdder   = (*rootNode)(nil)
	_ gofs.NodeLookuper  = (*rootNode)(nil)
	_ gofs.NodeReaddirer = (*rootNode)(nil)
	_ gofs.NodeMkdirer   = (*rootNode)(nil)
	_ gofs.NodeRmdirer   = (*rootNode)(nil)
	_ gofs.NodeGetattrer = (*rootNode)(nil)
)

func (r *rootNode) OnAdd(ctx context.Context) {
	f := r.fs
	ctl := &ctlFile{
		mode: 0o644,
		read: func(ctx context.Context) ([]byte, error) { return []byte(f.rootListing()), nil },
		write: func(ctx context.Context, data []byte) error {
			return f.rootCtl(ctx, string(data))
		},
		onErr: f.setErr,
	}
	r.AddChild("ctl", r.NewPersistentInode(ctx, ctl, gofs.StableAttr{Mode: syscall.S_IFREG}), false)
	errf := textFile(0o444, func(ctx context.Context) ([]byte, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.errText == "" {
			return nil, nil
		}
		return []byte(f.errText + "\n"), nil
	})
	r.AddChild("err", r.NewPersistentInode(ctx, errf, gofs.StableAttr{Mode: syscall.S_IFREG}), false)
}

func (r *rootNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o755
	out.SetTimes(nil, &started, &started)
	return 0
}

// rootListing renders the root ctl: one line per box.
func (f *FS) rootListing() string {
	var b strings.Builder
	for _, name := range f.Names() {
		bs := f.lookupBox(name)
		if bs == nil {
			continue
		}
		bs.mu.Lock()
		state := bs.state
		if bs.health.bad && state == stateReady {
			state = "unhealthy"
		}
		id := bs.rec.ID
		if id == "" {
			id = "-"
		}
		fmt.Fprintf(&b, "%s %s %s %s\n", name, bs.rec.Provider, id, state)
		bs.mu.Unlock()
	}
	return b.String()
}

// rootCtl runs a write to the root ctl: every message is parsed first, then
// they run in order; the first failure stops the rest.
func (f *FS) rootCtl(ctx context.Context, text string) error {
	cmds, err := parseRootCtl(text)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	for _, c := range cmds {
		var err error
		switch c.verb {
		case "new":
			if err = f.NewBox(ctx, c.name, c.provider, c.spec); err == nil {
				f.notifyRoot(c.name)
			}
		case "attach":
			if err = f.AttachBox(ctx, c.name, c.provider, c.id); err == nil {
				f.notifyRoot(c.name)
			}
		case "forget":
			if err = f.Forget(ctx, c.name); err == nil {
				f.notifyRootGone(c.name)
			}
		}
		if err != nil {
			return providers.E(0, "ctl "+c.verb+" "+c.name, err)
		}
	}
	return nil
}

func boxDirIno(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("box\x00" + name))
	return h.Sum64() &^ (1 << 63)
}

// boxNode returns the box's directory node, making it once: go-fuse runs
// OnAdd (which makes the control files) every time a node is passed to
// NewPersistentInode, so an existing node is never passed again.
func (r *rootNode) boxNode(ctx context.Context, b *boxState) *gofs.Inode {
	b.dirMu.Lock()
	defer b.dirMu.Unlock()
	if b.dir == nil {
		d := &boxDir{b: b}
		r.NewPersistentInode(ctx, d, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: boxDirIno(b.name)})
		b.dir = d
	}
	return b.dir.EmbeddedInode()
}

func (r *rootNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if name == "ctl" || name == "err" {
		ch := r.GetChild(name)
		var a fuse.AttrOut
		ch.Operations().(gofs.NodeGetattrer).Getattr(ctx, nil, &a)
		out.Attr = a.Attr
		return ch, 0
	}
	b := r.fs.lookupBox(name)
	if b == nil {
		return nil, syscall.ENOENT
	}
	ch := r.boxNode(ctx, b)
	out.Mode = syscall.S_IFDIR | 0o755
	out.SetEntryTimeout(boxEntryTimeout)
	return ch, 0
}

func (r *rootNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	ents := []fuse.DirEntry{{Name: "ctl", Mode: syscall.S_IFREG}, {Name: "err", Mode: syscall.S_IFREG}}
	for _, n := range r.fs.Names() {
		ents = append(ents, fuse.DirEntry{Name: n, Mode: syscall.S_IFDIR, Ino: boxDirIno(n)})
	}
	return gofs.NewListDirStream(ents), 0
}

// Mkdir NAME is `new NAME` with the default provider and spec.
func (r *rootNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if err := checkName(name); err != nil {
		err := providers.E(providers.Invalid, "mkdir", err)
		r.fs.setErr(err)
		return nil, toErrno(err)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	if err := r.fs.NewBox(cctx, name, "", providers.Spec{}); err != nil {
		r.fs.setErr(providers.E(0, "mkdir "+name, err))
		return nil, toErrno(err)
	}
	b := r.fs.lookupBox(name)
	out.Mode = syscall.S_IFDIR | 0o755
	out.SetEntryTimeout(boxEntryTimeout)
	return r.boxNode(ctx, b), 0
}

// Rmdir of a box is refused: destroying takes `echo destroy > NAME/ctl`, so
// that `rm -rf MOUNT/*` cannot end every box.
func (r *rootNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if r.fs.lookupBox(name) == nil {
		return syscall.ENOENT
	}
	r.fs.setErr(providers.Errorf(providers.Refused, "rmdir "+name, "boxes are ended with `echo destroy > %s/ctl` or forgotten with `echo forget %s > ctl`", name, name))
	return syscall.EPERM
}

// notifyRoot tells the kernel a box name appeared (drops a cached negative
// lookup) before the ctl write that made it returns. It is called from
// writes to ctl files only, never from a request on the root directory
// itself (the kernel holds that directory's lock: it would deadlock), and
// with no boxfs lock held.
func (f *FS) notifyRoot(name string) {
	if !f.mounted() {
		return
	}
	f.root.NotifyEntry(name)
}

// notifyRootGone drops a box's name from the kernel and the tree.
func (f *FS) notifyRootGone(name string) {
	if !f.mounted() {
		return
	}
	if ch := f.root.GetChild(name); ch != nil {
		f.root.RmChild(name)
		f.root.NotifyDelete(name, ch)
		ch.ForgetPersistent()
	} else {
		f.root.NotifyEntry(name)
	}
}

func (f *FS) mounted() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.server != nil
}

// boxDir is MOUNT/NAME/: the box's control files, cmds/ and work/.
type boxDir struct {
	gofs.Inode
	b *boxState
}

var (
	_ gofs.NodeOnAdder   = (*boxDir)(nil)
	_ gofs.NodeGetattrer = (*boxDir)(nil)
)

func (d *boxDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o755
	out.SetTimes(nil, &started, &started)
	return 0
}

func (d *boxDir) OnAdd(ctx context.Context) {
	b := d.b
	add := func(name string, node gofs.InodeEmbedder, mode uint32) {
		d.AddChild(name, d.NewPersistentInode(ctx, node, gofs.StableAttr{Mode: mode}), false)
	}
	add("ctl", &ctlFile{
		mode:  0o644,
		read:  func(ctx context.Context) ([]byte, error) { return []byte(b.statusLine()), nil },
		write: b.ctl,
		onErr: b.setErr,
	}, syscall.S_IFREG)
	add("exec", &execFile{b: b}, syscall.S_IFREG)
	add("cmds", &cmdsDir{b: b}, syscall.S_IFDIR)
	add("facts.json", textFile(0o444, b.factsJSON), syscall.S_IFREG)
	add("receipt.json", textFile(0o444, b.receiptJSON), syscall.S_IFREG)
	add("err", textFile(0o444, func(ctx context.Context) ([]byte, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.errText == "" {
			return nil, nil
		}
		return []byte(b.errText + "\n"), nil
	}), syscall.S_IFREG)
	w := &workNode{b: b}
	d.AddChild("work", d.NewPersistentInode(ctx, w, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: boxDirIno(b.name + "\x00work")}), false)
	b.mu.Lock()
	b.workRoot = w
	b.mu.Unlock()
}

// ctl runs a write to the box's ctl.
func (b *boxState) ctl(ctx context.Context, data []byte) error {
	verbs, err := parseBoxCtl(string(data))
	if err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	for _, v := range verbs {
		var err error
		switch v {
		case "destroy":
			cctx, cancel := context.WithTimeout(ctx, createTimeout)
			err = b.destroy(cctx)
			cancel()
		case "release":
			cctx, cancel := context.WithTimeout(ctx, createTimeout)
			err = b.flush(cctx)
			cancel()
			if err == nil {
				if err = b.fs.Forget(ctx, b.name); err == nil {
					b.fs.notifyRootGone(b.name)
				}
			}
		case "flush":
			cctx, cancel := context.WithTimeout(ctx, createTimeout)
			err = b.flush(cctx)
			cancel()
		case "sync":
			cctx, cancel := context.WithTimeout(ctx, createTimeout)
			err = b.sync(cctx)
			cancel()
		case "kill":
			cctx, cancel := context.WithTimeout(ctx, b.fs.opts.OpTimeout)
			err = b.cmds.killAll(cctx)
			cancel()
		}
		if err != nil {
			return providers.E(0, "ctl "+v, err)
		}
	}
	return nil
}

// sync pushes dirty files, then reads the box's whole listing again and
// tells the kernel what changed.
func (b *boxState) sync(ctx context.Context) error {
	if err := b.flush(ctx); err != nil {
		return err
	}
	return b.refresh(ctx)
}

// receiptJSON renders receipt.json through the configured ledger.
func (b *boxState) receiptJSON(ctx context.Context) ([]byte, error) {
	b.mu.Lock()
	prov, id := b.rec.Provider, b.rec.ID
	b.mu.Unlock()
	if b.fs.opts.Receipt == nil {
		return []byte(fmt.Sprintf("{\"box\": %q, \"cost_usd\": null, \"note\": \"no prices configured\"}\n", b.name)), nil
	}
	return b.fs.opts.Receipt(ctx, prov, id)
}
