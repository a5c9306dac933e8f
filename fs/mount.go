package fs

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// FS is the boxfs namespace over the boxes a Manager keeps: the root's
// ctl and err, and per box its control files, commands and work tree.
type FS struct {
	m        *boxes.Manager
	log      *slog.Logger
	own      ownership // set before the mount serves, read-only after
	symlinks Symlinks  // likewise

	bounds *bounded // the requests' deadlines; set before the mount serves

	mu      sync.Mutex
	errText string // the root's last error
	views   map[*boxes.Box]*boxView
	server  *fuse.Server

	root *rootNode
}

// New makes the namespace over m's boxes and has m tell it of changes in
// their workspaces. One namespace per Manager.
func New(m *boxes.Manager) *FS {
	f := &FS{m: m, log: m.Options().Logger, own: processOwnership(), views: map[*boxes.Box]*boxView{}}
	f.root = &rootNode{fs: f}
	m.SetView(viewer{f})
	return f
}

// Root returns the root node to mount.
func (f *FS) Root() gofs.InodeEmbedder { return f.root }

// MountOptions are the kernel-facing settings of Mount.
type MountOptions struct {
	// AllowOther lets users other than the one who mounted into the mount;
	// what each may do is what the reported modes and owners allow.
	AllowOther bool
	// Group, when not 0, is the group of the control files, given the
	// owner's access: its members can read and write ctl and exec (run
	// commands as the box's user) and read the status files.
	Group uint32
	// Symlinks says how absolute symlink targets in work/ read (default:
	// transformed on boxes whose provider isolates them).
	Symlinks Symlinks
	// Debug logs every FUSE request and answer, with sizes but no data
	// bytes, to DebugLog (nil: standard error).
	Debug    bool
	DebugLog io.Writer
	FsName   string
	// RequestBound bounds how long the kernel waits for the answer to one
	// request (default DefaultRequestBound): past it the request is
	// answered ETIMEDOUT, its work goes on, and the daemon's goroutines
	// are logged. Reads that follow output (exec, cmds/N/out,
	// launch/PROG/out.log) wait for it as long as it takes, like a pipe.
	RequestBound time.Duration
	// DumpEvery is the shortest time between two goroutine dumps of
	// requests past their bound (default DefaultDumpEvery).
	DumpEvery time.Duration
}

// Mount serves the namespace at mountpoint through the kernel. The kernel
// checks every request against the attributes the namespace reports
// (default_permissions): see the permission model in owner.go.
func (f *FS) Mount(mountpoint string, mo MountOptions) (*fuse.Server, error) {
	if mo.Group != 0 {
		f.own.gid, f.own.group = mo.Group, true
	}
	switch mo.Symlinks {
	case SymlinksAuto, SymlinksTransform, SymlinksKeep:
		f.symlinks = mo.Symlinks
	default:
		return nil, providers.Errorf(providers.Invalid, "fs.Mount", "symlinks %q: want transform or keep", mo.Symlinks)
	}
	if abs, err := filepath.Abs(mountpoint); err == nil {
		f.m.SetMountpoint(abs)
	}
	timeout := f.m.Options().AttrTimeout
	name := mo.FsName
	if name == "" {
		name = "boxfs"
	}
	opts := &gofs.Options{
		EntryTimeout:    &timeout,
		AttrTimeout:     &timeout,
		NegativeTimeout: &timeout,
		MountOptions: fuse.MountOptions{
			AllowOther:    mo.AllowOther,
			Debug:         mo.Debug,
			FsName:        name,
			Name:          "boxfs",
			DirectMount:   true,
			DisableXAttrs: true, // the kernel stops asking (ls -l asks twice per file)
			MaxWrite:      1 << 20,
			MaxBackground: 32,
			Options:       []string{"default_permissions"},
		},
		NullPermissions: true,
	}
	if mo.Debug {
		w := mo.DebugLog
		if w == nil {
			w = os.Stderr
		}
		opts.MountOptions.Logger = debugLogger(w)
	}
	// gofs.Mount, with every request under its bound.
	f.bounds = newBounded(gofs.NewNodeFS(f.root, opts), mo.RequestBound, mo.DumpEvery, f.log)
	server, err := fuse.NewServer(f.bounds, mountpoint, &opts.MountOptions)
	if err != nil {
		return nil, providers.E(providers.Unknown, "fs.Mount", err)
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		return nil, providers.E(providers.Unknown, "fs.Mount", err)
	}
	f.mu.Lock()
	f.server = server
	f.mu.Unlock()
	return server, nil
}

// unbounded lets the request ctx stands for (the ctx a node's method was
// given) wait as long as it takes: a read that follows output waits for
// the output, as a read of a pipe does, and its caller can interrupt it.
func (f *FS) unbounded(ctx context.Context) {
	f.bounds.setBound(ctx, 0)
}

func (f *FS) mounted() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.server != nil
}

func (f *FS) setErr(err error) {
	f.mu.Lock()
	f.errText = err.Error()
	f.mu.Unlock()
	f.log.Warn("ctl", "err", err)
}

// view returns what the namespace keeps of b, made at first use.
func (f *FS) view(b *boxes.Box) *boxView {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.views[b]
	if v == nil {
		v = &boxView{fs: f, b: b}
		f.views[b] = v
	}
	return v
}

// viewOf returns what the namespace keeps of b, or nil when it shows
// nothing of it.
func (f *FS) viewOf(b *boxes.Box) *boxView {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.views[b]
}

// dropView forgets what the namespace keeps of a box it no longer shows.
func (f *FS) dropView(b *boxes.Box) {
	f.mu.Lock()
	delete(f.views, b)
	f.mu.Unlock()
}

// viewer tells the namespace what the manager saw change in a box's
// workspace; it is the Manager's View.
type viewer struct{ f *FS }

var _ boxes.View = viewer{}

func (w viewer) Changed(b *boxes.Box, ch cache.Changes) {
	if v := w.f.viewOf(b); v != nil {
		v.notifyChanges(ch)
	}
}

func (w viewer) PathsChanged(b *boxes.Box, rels []string) {
	if v := w.f.viewOf(b); v != nil {
		v.notifyBoxChanges(rels)
	}
}

func (w viewer) AllChanged(b *boxes.Box) {
	if v := w.f.viewOf(b); v != nil {
		v.notifyAll()
	}
}
