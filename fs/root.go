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

	"github.com/boxfs/boxfs/boxes"
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
	fixedDir
	fs       *FS
	ctl, err *gofs.Inode // its own files, made in OnAdd
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
		own:  &f.own,
		mode: 0o600,
		read: func(ctx context.Context) ([]byte, error) { return []byte(f.rootListing()), nil },
		write: func(ctx context.Context, data []byte) error {
			return f.rootCtl(ctx, string(data))
		},
		onErr: f.setErr,
	}
	r.ctl = r.NewPersistentInode(ctx, ctl, gofs.StableAttr{Mode: syscall.S_IFREG})
	r.AddChild("ctl", r.ctl, false)
	errf := textFile(&f.own, func(ctx context.Context) ([]byte, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.errText == "" {
			return nil, nil
		}
		return []byte(f.errText + "\n"), nil
	})
	r.err = r.NewPersistentInode(ctx, errf, gofs.StableAttr{Mode: syscall.S_IFREG})
	r.AddChild("err", r.err, false)
}

func (r *rootNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	r.fs.dirAttr(&out.Attr)
	return 0
}

// dirAttr fills a with the attributes of the namespace's own directories:
// the root, box directories, cmds/ and cmds/N/.
func (f *FS) dirAttr(a *fuse.Attr) {
	f.own.fill(a, syscall.S_IFDIR, 0o755)
	a.Nlink = 2
	a.SetTimes(nil, &started, &started)
}

// rootListing renders the root ctl: one line per box.
func (f *FS) rootListing() string {
	var b strings.Builder
	for _, bi := range f.m.List() {
		id := bi.ID
		if id == "" {
			id = "-"
		}
		fmt.Fprintf(&b, "%s %s %s %s\n", bi.Name, bi.Provider, id, bi.State)
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
			if err = f.m.CreateWith(ctx, c.name, c.provider, c.spec, c.set); err == nil {
				err = f.resumeAuto(c)
				f.notifyRoot(c.name)
			}
		case "attach":
			if err = f.m.Attach(ctx, c.name, c.provider, c.id); err == nil {
				err = f.resumeAuto(c)
				f.notifyRoot(c.name)
			}
		case "forget":
			b := f.m.Lookup(c.name)
			if err = f.m.Forget(ctx, c.name); err == nil {
				f.notifyRootGone(c.name, b)
			}
		}
		if err != nil {
			return providers.E(0, "ctl "+c.verb+" "+c.name, err)
		}
	}
	return nil
}

// resumeAuto records resume=auto for the box c made or attached.
func (f *FS) resumeAuto(c rootCmd) error {
	if !c.resumeAuto {
		return nil
	}
	b, err := f.m.Box(c.name)
	if err != nil {
		return err
	}
	return b.SetResumeAuto(true)
}

func boxDirIno(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("box\x00" + name))
	return h.Sum64() &^ (1 << 63)
}

// boxNode returns the box's directory node, making it once: go-fuse runs
// OnAdd (which makes the control files) every time a node is passed to
// NewPersistentInode, so an existing node is never passed again.
func (r *rootNode) boxNode(ctx context.Context, b *boxes.Box) *gofs.Inode {
	v := r.fs.view(b)
	v.dirMu.Lock()
	defer v.dirMu.Unlock()
	if v.dir == nil {
		d := &boxDir{v: v}
		r.NewPersistentInode(ctx, d, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: boxDirIno(b.Name())})
		v.dir = d
	}
	return v.dir.EmbeddedInode()
}

func (r *rootNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if name == "ctl" || name == "err" {
		ch := r.ctl
		if name == "err" {
			ch = r.err
		}
		if ch == nil {
			return nil, syscall.ENOENT
		}
		var a fuse.AttrOut
		ch.Operations().(gofs.NodeGetattrer).Getattr(ctx, nil, &a)
		out.Attr = a.Attr
		return ch, 0
	}
	b := r.fs.m.Lookup(name)
	if b == nil {
		return nil, syscall.ENOENT
	}
	ch := r.boxNode(ctx, b)
	r.fs.dirAttr(&out.Attr)
	out.SetEntryTimeout(boxEntryTimeout)
	return ch, 0
}

func (r *rootNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	ents := []fuse.DirEntry{{Name: "ctl", Mode: syscall.S_IFREG}, {Name: "err", Mode: syscall.S_IFREG}}
	for _, n := range r.fs.m.Names() {
		ents = append(ents, fuse.DirEntry{Name: n, Mode: syscall.S_IFDIR, Ino: boxDirIno(n)})
	}
	return gofs.NewListDirStream(ents), 0
}

// Mkdir NAME is `new NAME` with the default provider and spec.
func (r *rootNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if err := boxes.CheckName(name); err != nil {
		err := providers.E(providers.Invalid, "mkdir", cause(err))
		r.fs.setErr(err)
		return nil, toErrno(err)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	if err := r.fs.m.Create(cctx, name, "", providers.Spec{}); err != nil {
		r.fs.setErr(providers.E(0, "mkdir "+name, err))
		return nil, toErrno(err)
	}
	b := r.fs.m.Lookup(name)
	r.fs.dirAttr(&out.Attr)
	out.SetEntryTimeout(boxEntryTimeout)
	return r.boxNode(ctx, b), 0
}

// Rmdir of a box is refused: destroying takes `echo destroy > NAME/ctl`, so
// that `rm -rf MOUNT/*` cannot end every box.
func (r *rootNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if r.fs.m.Lookup(name) == nil {
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

// notifyRootGone drops a box's name from the kernel and the tree, and
// what the namespace kept of b, the box it named.
func (f *FS) notifyRootGone(name string, b *boxes.Box) {
	if b != nil {
		f.dropView(b)
	}
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

// boxDir is MOUNT/NAME/: the box's control files, cmds/ and work/.
type boxDir struct {
	fixedDir
	v *boxView
}

var (
	_ gofs.NodeOnAdder   = (*boxDir)(nil)
	_ gofs.NodeGetattrer = (*boxDir)(nil)
)

func (d *boxDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.v.fs.dirAttr(&out.Attr)
	return 0
}

func (d *boxDir) OnAdd(ctx context.Context) {
	v := d.v
	b := v.b
	add := func(name string, node gofs.InodeEmbedder, mode uint32) {
		d.AddChild(name, d.NewPersistentInode(ctx, node, gofs.StableAttr{Mode: mode}), false)
	}
	own := &v.fs.own
	add("ctl", &ctlFile{
		own:   own,
		mode:  0o600,
		read:  func(ctx context.Context) ([]byte, error) { return []byte(statusLine(b.Status())), nil },
		write: v.ctl,
		onErr: b.SetErr,
	}, syscall.S_IFREG)
	add("exec", &execFile{v: v}, syscall.S_IFREG)
	add("cmds", &cmdsDir{v: v}, syscall.S_IFDIR)
	add("launch", &launchDir{v: v}, syscall.S_IFDIR)
	add("facts.json", textFile(own, b.FactsJSON), syscall.S_IFREG)
	add("receipt.json", textFile(own, b.ReceiptJSON), syscall.S_IFREG)
	add("snapshots", textFile(own, func(ctx context.Context) ([]byte, error) { return b.SnapshotsText(), nil }), syscall.S_IFREG)
	add("err", textFile(own, func(ctx context.Context) ([]byte, error) {
		if text := b.Err(); text != "" {
			return []byte(text + "\n"), nil
		}
		return nil, nil
	}), syscall.S_IFREG)
	w := &workNode{v: v}
	d.AddChild("work", d.NewPersistentInode(ctx, w, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: boxDirIno(b.Name() + "\x00work")}), false)
	v.mu.Lock()
	v.workRoot = w
	v.mu.Unlock()
}

// statusLine renders a box's ctl: one key=value line.
func statusLine(st boxes.Status) string {
	id := st.ID
	fields := []string{
		"state=" + st.State,
		"provider=" + st.Provider,
		"id=" + id,
		fmt.Sprintf("dirty=%d", st.Dirty),
	}
	if st.Via != "" {
		fields = append(fields, "via="+st.Via)
	}
	if st.LastCmd > 0 {
		fields = append(fields, fmt.Sprintf("last_cmd=%d", st.LastCmd), "last_status="+strings.ReplaceAll(st.LastStatus, " ", "_"))
	}
	return strings.Join(fields, " ") + "\n"
}

// ctl runs a write to the box's ctl: every message is parsed first, then
// they run in order; the first failure stops the rest.
func (v *boxView) ctl(ctx context.Context, data []byte) error {
	msgs, err := parseBoxMsgs(string(data))
	if err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	for _, m := range msgs {
		if m.launch != "" {
			if _, err := v.b.StartLaunch(ctx, m.launch, m.spec); err != nil {
				return providers.E(0, "ctl launch "+m.launch, err)
			}
			continue
		}
		c := m.cmd
		if err := v.runVerb(ctx, c); err != nil {
			return providers.E(0, strings.TrimSpace("ctl "+c.verb+" "+c.arg), err)
		}
	}
	return nil
}

// runVerb runs one message of a box's ctl, within its bound.
func (v *boxView) runVerb(ctx context.Context, c boxCmd) error {
	b := v.b
	ctx, cancel := context.WithTimeout(ctx, createTimeout) // kill bounds each command's kill itself
	defer cancel()
	switch c.verb {
	case "suspend":
		return b.Suspend(ctx, c.arg == "force")
	case "resume":
		return b.Resume(ctx)
	case "snapshot":
		_, err := b.Snapshot(ctx, c.arg)
		return err
	case "destroy":
		return b.Destroy(ctx)
	case "release":
		if err := v.fs.m.Release(ctx, b.Name()); err != nil {
			return err
		}
		v.fs.notifyRootGone(b.Name(), b)
		return nil
	case "flush":
		return b.Flush(ctx)
	case "sync":
		return b.Sync(ctx)
	case "kill":
		return b.Commands().KillAll(ctx)
	case "setaside":
		dst, err := b.SetAside(ctx, c.arg)
		if err != nil {
			return err
		}
		// Said where the user looks after a failed flush.
		b.SetErr(providers.Errorf(providers.Refused, "ctl setaside", "the host's writes to work/%s that the box had not taken are in %s; work/%s is the box's again", c.arg, dst, c.arg))
		return nil
	}
	return providers.Errorf(providers.Invalid, "ctl", "unknown verb %q", c.verb)
}
