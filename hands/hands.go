package hands

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"time"

	"github.com/boxfs/boxfs/hands/agent"
	"github.com/boxfs/boxfs/providers"
)

// The paths Via reports.
const (
	ViaNativeFiles = "native-files" // the box's own providers.Files
	ViaAgent       = "agent"        // the boxfs agent over one long-lived exec
	ViaNative      = "native"       // the provider's stat and archive APIs, scripts for the rest
	ViaScript      = "script"       // one exec of a fixed script per operation
)

// DefaultLiveness is the liveness bound when Options leaves it zero.
const DefaultLiveness = 30 * time.Second

// Options configure New.
type Options struct {
	// AgentBinary is the host path of a static Linux boxfs binary to run as
	// the agent in the box; "" means no agent channel.
	AgentBinary string
	// Liveness bounds how long an operation may show no sign of life (no
	// output, no input taken, no answer from the provider) before it ends
	// with Liveness. Zero is DefaultLiveness.
	Liveness time.Duration
	// Logger receives hands's log lines; nil is slog.Default().
	Logger *slog.Logger
	// Force pins the path: "agent", "native", "script", or "" to choose.
	// A forced path the box cannot take is Unsupported.
	Force string
	// OnExec, when set, is told of every Exec hands makes on the box (its
	// scripts, commands and agent), with the error it returned: the
	// metering hook of a box billed per call. It must not block.
	OnExec func(err error)
}

// Hands performs file operations and runs commands in one box. It
// implements providers.Files, providers.Walker and providers.Archiver, so the
// layers above talk to hands only. It is safe for concurrent use.
type Hands struct {
	box      providers.Box
	exec     execFunc // box.Exec, telling Options.OnExec
	facts    providers.Facts
	via      string
	files    providers.Files
	walker   providers.Walker
	archiver providers.Archiver
	closer   io.Closer      // the agent channel, when there is one
	channel  *agent.Channel // the same
	sh       *scripts
	liveness time.Duration
	log      *slog.Logger
	owner    string // who this host process is, as written in command records
}

var (
	_ providers.Files        = (*Hands)(nil)
	_ providers.Walker       = (*Hands)(nil)
	_ providers.Archiver     = (*Hands)(nil)
	_ providers.StatWriter   = (*Hands)(nil)
	_ providers.SmallReader  = (*Hands)(nil)
	_ providers.CappedWalker = (*Hands)(nil)
)

// New reads box's facts once and picks the fastest path they allow (see the
// package doc). With the agent path, New opens the channel and checks it
// answers; when it does not, New logs why and falls back, unless
// opts.Force is "agent".
func New(ctx context.Context, box providers.Box, opts Options) (*Hands, error) {
	const op = "hands.New"
	if box == nil {
		return nil, providers.Errorf(providers.Invalid, op, "nil box")
	}
	facts, err := box.Facts(ctx)
	if err != nil {
		return nil, providers.E(0, op, err).WithBox(box.ID())
	}
	h := &Hands{
		box:      box,
		facts:    facts,
		liveness: opts.Liveness,
		log:      opts.Logger,
		owner:    hostOwner(),
	}
	if h.liveness <= 0 {
		h.liveness = DefaultLiveness
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	h.log = h.log.With("box", box.ID())
	h.exec = box.Exec
	if on := opts.OnExec; on != nil {
		h.exec = func(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
			p, err := box.Exec(ctx, req)
			on(err)
			return p, err
		}
	}
	h.sh = &scripts{box: box, exec: h.exec, liveness: h.liveness}

	bf, boxHasFiles := box.(providers.Files)
	agentOK := facts.Runs(runtime.GOOS, runtime.GOARCH) && facts.HasLiveProcesses() && facts.HasStdin() && opts.AgentBinary != ""

	switch opts.Force {
	case "":
		switch {
		case boxHasFiles:
			h.useNativeFiles(bf)
		case agentOK:
			if err := h.useAgent(ctx, opts); err != nil {
				h.log.Warn("hands: agent channel did not start; falling back", "err", err)
				h.useNativeOrScript()
			}
		default:
			h.useNativeOrScript()
		}
	case ViaAgent:
		if !agentOK {
			return nil, providers.Errorf(providers.Unsupported, op,
				"the agent channel needs a linux/%s box with live processes and stdin, and an agent binary (facts: os=%q arch=%q)",
				runtime.GOARCH, facts.OS, facts.Arch).WithBox(box.ID())
		}
		if err := h.useAgent(ctx, opts); err != nil {
			return nil, providers.E(0, op, err).WithBox(box.ID())
		}
	case ViaNative:
		st, ok1 := box.(providers.PathStater)
		ar, ok2 := box.(providers.Archiver)
		if !ok1 || !ok2 {
			return nil, providers.Errorf(providers.Unsupported, op, "the box has no native stat and archive API").WithBox(box.ID())
		}
		h.useNative(st, ar)
	case ViaScript:
		h.useScript()
	default:
		return nil, providers.Errorf(providers.Invalid, op, "unknown Force %q (want agent, native or script)", opts.Force)
	}
	h.log.Debug("hands: ready", "via", h.via)
	return h, nil
}

func (h *Hands) useNativeFiles(bf providers.Files) {
	h.via = ViaNativeFiles
	h.files = bf
	if w, ok := h.box.(providers.Walker); ok {
		h.walker = w
	} else {
		h.walker = filesWalker{bf}
	}
	h.archiver = h.boxArchiver()
}

func (h *Hands) useNativeOrScript() {
	if h.useNativeOps() {
		return
	}
	st, ok1 := h.box.(providers.PathStater)
	ar, ok2 := h.box.(providers.Archiver)
	if ok1 && ok2 {
		h.useNative(st, ar)
		return
	}
	h.useScript()
}

func (h *Hands) useNative(st providers.PathStater, ar providers.Archiver) {
	n := &native{scripts: h.sh, stater: st, archiver: ar}
	h.via = ViaNative
	h.files = n
	h.walker = h.sh
	h.archiver = ar
}

func (h *Hands) useScript() {
	h.via = ViaScript
	h.files = h.sh
	h.walker = h.sh
	h.archiver = h.boxArchiver()
}

// boxArchiver is the box's own Archiver, else tar over Exec.
func (h *Hands) boxArchiver() providers.Archiver {
	if a, ok := h.box.(providers.Archiver); ok {
		return a
	}
	return h.sh
}

// Facts returns the box's facts as New read them.
func (h *Hands) Facts() providers.Facts { return h.facts }

// Via names the path file operations take: ViaNativeFiles, ViaAgent,
// ViaNative or ViaScript.
func (h *Hands) Via() string { return h.via }

// Box returns the box hands works on.
func (h *Hands) Box() providers.Box { return h.box }

// Close ends the agent channel, if there is one. It does not end the box or
// the commands started with Run.
func (h *Hands) Close() error {
	if h.closer != nil {
		return h.closer.Close()
	}
	return nil
}

// Stat returns name's attributes, following symlinks.
func (h *Hands) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	return h.files.Stat(ctx, name)
}

// Lstat returns name's attributes, not following a final symlink.
func (h *Hands) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	return h.files.Lstat(ctx, name)
}

// ReadDir lists a directory with each entry's attributes.
func (h *Hands) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	return h.files.ReadDir(ctx, name)
}

// ReadFile streams a whole file.
func (h *Hands) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	return h.files.ReadFile(ctx, name)
}

// ReadAt reads up to len(p) bytes of name at off.
func (h *Hands) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	return h.files.ReadAt(ctx, name, p, off)
}

// WriteFile replaces name atomically with r's bytes.
func (h *Hands) WriteFile(ctx context.Context, name string, r io.Reader, perm providers.FileMode) error {
	return h.files.WriteFile(ctx, name, r, perm)
}

// WalkMax lists the tree under root in one round trip when it has at most
// max entries, where the path can (the agent channel); elsewhere it is
// Unsupported.
func (h *Hands) WalkMax(ctx context.Context, root string, max int) ([]providers.FileInfo, error) {
	if cw, ok := h.walker.(providers.CappedWalker); ok {
		return cw.WalkMax(ctx, root, max)
	}
	return nil, providers.Errorf(providers.Unsupported, "hands.WalkMax", "the %s path has no capped walk", h.via)
}

// ReadSmall reads many small files of dir in one round trip where the
// path can (the agent channel); elsewhere it is Unsupported and the caller
// reads them one by one.
func (h *Hands) ReadSmall(ctx context.Context, dir string, names []string, max int) ([]providers.SmallFile, error) {
	if sr, ok := h.files.(providers.SmallReader); ok {
		return sr.ReadSmall(ctx, dir, names, max)
	}
	return nil, providers.Errorf(providers.Unsupported, "hands.ReadSmall", "the %s path reads files one by one", h.via)
}

// WriteAt writes p at off into the existing file name.
func (h *Hands) WriteAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	return h.files.WriteAt(ctx, name, p, off)
}

// Create makes an empty regular file.
func (h *Hands) Create(ctx context.Context, name string, perm providers.FileMode, exclusive bool) error {
	return h.files.Create(ctx, name, perm, exclusive)
}

// CreateStat makes an empty regular file and returns its attributes: one
// round trip over the agent channel, Create then Lstat elsewhere.
func (h *Hands) CreateStat(ctx context.Context, name string, perm providers.FileMode, exclusive bool) (providers.FileInfo, error) {
	return providers.AsStatWriter(h.files).CreateStat(ctx, name, perm, exclusive)
}

// MkdirStat makes a directory and returns its attributes.
func (h *Hands) MkdirStat(ctx context.Context, name string, perm providers.FileMode) (providers.FileInfo, error) {
	return providers.AsStatWriter(h.files).MkdirStat(ctx, name, perm)
}

// WriteFileStat replaces name atomically with r's bytes, gives it o's
// attributes and returns them as the box has them: one round trip over the
// agent channel for a file up to 192 KiB; a call per step elsewhere.
func (h *Hands) WriteFileStat(ctx context.Context, name string, r io.Reader, o providers.WriteOptions) (providers.FileInfo, error) {
	return providers.AsStatWriter(h.files).WriteFileStat(ctx, name, r, o)
}

// Mkdir makes a directory.
func (h *Hands) Mkdir(ctx context.Context, name string, perm providers.FileMode) error {
	return h.files.Mkdir(ctx, name, perm)
}

// Remove unlinks a non-directory.
func (h *Hands) Remove(ctx context.Context, name string) error { return h.files.Remove(ctx, name) }

// Rmdir removes an empty directory.
func (h *Hands) Rmdir(ctx context.Context, name string) error { return h.files.Rmdir(ctx, name) }

// Rename moves oldname to newname, replacing newname.
func (h *Hands) Rename(ctx context.Context, oldname, newname string) error {
	return h.files.Rename(ctx, oldname, newname)
}

// Chmod sets name's mode.
func (h *Hands) Chmod(ctx context.Context, name string, mode providers.FileMode) error {
	return h.files.Chmod(ctx, name, mode)
}

// Chown sets name's owner; -1 leaves one unchanged.
func (h *Hands) Chown(ctx context.Context, name string, uid, gid int) error {
	return h.files.Chown(ctx, name, uid, gid)
}

// Utimes sets name's times to the nanosecond; a zero time is left unchanged.
func (h *Hands) Utimes(ctx context.Context, name string, atime, mtime time.Time) error {
	return h.files.Utimes(ctx, name, atime, mtime)
}

// Truncate sets name's size.
func (h *Hands) Truncate(ctx context.Context, name string, size int64) error {
	return h.files.Truncate(ctx, name, size)
}

// Symlink makes name a symbolic link to target.
func (h *Hands) Symlink(ctx context.Context, target, name string) error {
	return h.files.Symlink(ctx, target, name)
}

// Readlink returns a symlink's target.
func (h *Hands) Readlink(ctx context.Context, name string) (string, error) {
	return h.files.Readlink(ctx, name)
}

// Link makes newname a hard link to oldname.
func (h *Hands) Link(ctx context.Context, oldname, newname string) error {
	return h.files.Link(ctx, oldname, newname)
}

// Statfs reports the capacity of the file system holding name.
func (h *Hands) Statfs(ctx context.Context, name string) (providers.StatFS, error) {
	return h.files.Statfs(ctx, name)
}

// Fsync flushes name to the box's disk.
func (h *Hands) Fsync(ctx context.Context, name string) error { return h.files.Fsync(ctx, name) }

// Walk lists the whole tree under root in one go where the path allows.
func (h *Hands) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	return h.walker.Walk(ctx, root)
}

// PutArchive extracts a tar stream into the box directory dir.
func (h *Hands) PutArchive(ctx context.Context, dir string, tar io.Reader) error {
	return h.archiver.PutArchive(ctx, dir, tar)
}

// GetArchive returns a tar of path whose member names start with path's
// base name.
func (h *Hands) GetArchive(ctx context.Context, path string) (io.ReadCloser, error) {
	return h.archiver.GetArchive(ctx, path)
}

// Watch reports the changes made under root in the box as they happen
// (see agent.Channel.Watch): changed gets each batch of paths relative to
// root, or all when changes were lost. It needs the agent: Unsupported
// without it, Unavailable while its command stream is not up. It returns
// nil when ctx ends.
func (h *Hands) Watch(ctx context.Context, root string, ready func(), changed func(paths []string, all bool)) error {
	if h.channel == nil {
		return providers.Errorf(providers.Unsupported, "hands.Watch", "watching needs the agent; this box is reached %s", h.via).WithBox(h.box.ID())
	}
	if _, err := checkPath("hands.Watch", h.box.ID(), root); err != nil {
		return err
	}
	return h.channel.Watch(ctx, root, ready, changed)
}

// GetFiles returns one tar of paths under root (each relative to root,
// slash-separated; a directory comes as itself, without its contents), the
// member names being those paths. It is syncengine's MultiArchiver. GNU tar
// in the box makes it in one exec, the fastest way for bulk data; a box
// without GNU tar (busybox, distroless) has the agent make it, on the
// agent's command stream, when the box has the agent.
func (h *Hands) GetFiles(ctx context.Context, root string, paths []string) (io.ReadCloser, error) {
	rc, err := h.sh.GetFiles(ctx, root, paths)
	if err == nil || h.channel == nil || !(providers.IsCode(err, providers.Unsupported) || !h.facts.HasShell()) {
		return rc, err
	}
	h.log.Debug("hands: no GNU tar in the box; the agent makes the archive", "err", err)
	arc, aerr := h.channel.GetFiles(ctx, root, paths)
	if providers.IsCode(aerr, providers.Unavailable) {
		return nil, err
	}
	return arc, aerr
}
