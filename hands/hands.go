package hands

import (
	"context"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/boxfs/boxfs/hands/agent"
	"github.com/boxfs/boxfs/internal/guard"
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
	// AgentBinary is the host path of a Linux boxfs binary to run as the
	// agent in the box: a static one runs in any box, a dynamic one where
	// agent.CheckLoader finds the C library it needs; "" means no agent
	// channel.
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
	// WatchLimit bounds the directories the agent's watch covers (0: the
	// agent's default); a larger tree is reported as an overflow.
	WatchLimit int
	// KnownFacts, when set, are the box's facts from an earlier open.
	// New then chooses the path (and starts the agent) on them, and reads
	// the facts again in the background: a box's first listing waits for
	// neither the facts nor the two execs competing in the box's engine.
	// Facts returns the known facts until the box's own arrive.
	KnownFacts *providers.Facts
	// AgentAt is where an earlier open's agent binary was in the box
	// (AgentPath then): the agent is started there without looking for it
	// first, when its path is still that.
	AgentAt string
	// OnFacts, with KnownFacts, is told the box's own facts once they are
	// read, after New returned. It must not block for long.
	OnFacts func(providers.Facts)
}

// The interfaces Hands embeds, under names of its own: their methods are
// Hands's, served by the path New chose.
type (
	files    = providers.Files
	walker   = providers.Walker
	archiver = providers.Archiver
)

// Hands performs file operations and runs commands in one box. It
// implements providers.Files, providers.Walker and providers.Archiver (the
// chosen path's, embedded), so the layers above talk to hands only. It is
// safe for concurrent use.
type Hands struct {
	files
	walker
	archiver

	box      providers.Box
	exec     execFunc // box.Exec, telling Options.OnExec
	factsMu  sync.Mutex
	facts    providers.Facts
	via      string
	closer   io.Closer      // the agent channel, when there is one
	channel  *agent.Channel // the same
	agentOff string         // why the agent channel did not start (AgentOff)
	sh       *scripts
	liveness time.Duration
	log      *slog.Logger
	owner    string // who this host process is, as written in command records
	watchMax int    // Options.WatchLimit
	// noRemoves is set once the path's BatchRemover answered Unsupported
	// (an agent without the operation): RemoveFiles then goes one call each.
	noRemoves atomic.Bool
}

var (
	_ providers.Files         = (*Hands)(nil)
	_ providers.Walker        = (*Hands)(nil)
	_ providers.Archiver      = (*Hands)(nil)
	_ providers.StatWriter    = (*Hands)(nil)
	_ providers.SmallReader   = (*Hands)(nil)
	_ providers.CappedWalker  = (*Hands)(nil)
	_ providers.BatchWriter   = (*Hands)(nil)
	_ providers.RenameStater  = (*Hands)(nil)
	_ providers.RemoveStater  = (*Hands)(nil)
	_ providers.SetattrStater = (*Hands)(nil)
	_ providers.BatchRemover  = (*Hands)(nil)
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
	if known := opts.KnownFacts; known != nil {
		if h, err := newWith(ctx, box, opts, *known); err == nil {
			guard.Go(func() { h.refreshFacts(context.WithoutCancel(ctx), *known, opts.OnFacts) },
				func(err error) { h.log.Error("hands: reading the box's facts", "err", err) })
			return h, nil
		}
	}
	facts, err := box.Facts(ctx)
	if err != nil {
		return nil, providers.E(0, op, err).WithBox(box.ID())
	}
	return newWith(ctx, box, opts, facts)
}

// refreshFacts reads the box's facts again (New chose the path on facts an
// earlier open read) and keeps them, telling onFacts. A box whose facts no
// longer allow the path keeps it until it is opened again; the path's own
// failures say so first.
func (h *Hands) refreshFacts(ctx context.Context, known providers.Facts, onFacts func(providers.Facts)) {
	ctx, cancel := context.WithTimeout(ctx, h.liveness)
	defer cancel()
	f, err := h.box.Facts(ctx)
	if err != nil {
		h.log.Warn("hands: reading the box's facts again", "err", err)
		return
	}
	if !samePath(known, f) {
		h.log.Warn("hands: the box's facts changed since its last open; its path is chosen again at the next open", "via", h.via)
	}
	h.factsMu.Lock()
	h.facts = f
	h.factsMu.Unlock()
	if onFacts != nil {
		onFacts(f)
	}
}

// samePath reports whether facts a and b choose the same path and run it
// the same way.
func samePath(a, b providers.Facts) bool {
	return a.OS == b.OS && a.Arch == b.Arch && a.TmpDir == b.TmpDir && a.Shell == b.Shell &&
		a.HasLiveProcesses() == b.HasLiveProcesses() && a.HasStdin() == b.HasStdin()
}

// newWith is New once the facts are known.
func newWith(ctx context.Context, box providers.Box, opts Options, facts providers.Facts) (*Hands, error) {
	const op = "hands.New"
	h := &Hands{
		box:      box,
		facts:    facts,
		liveness: opts.Liveness,
		log:      opts.Logger,
		owner:    hostOwner(),
		watchMax: opts.WatchLimit,
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
	h.sh = &scripts{box: box, exec: h.exec, liveness: h.liveness, noStdin: !facts.HasStdin()}

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
				if h.agentOff == "" {
					h.agentOff = "the agent channel did not start: " + err.Error()
				}
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
func (h *Hands) Facts() providers.Facts {
	h.factsMu.Lock()
	defer h.factsMu.Unlock()
	return h.facts
}

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

// ExactListings reports whether a listing says of each entry exactly what
// Lstat says of it, to the nanosecond and the inode: over the agent
// channel, where both are the box's lstat(2).
func (h *Hands) ExactListings() bool { return h.via == ViaAgent }

// WalkMax lists the tree under root in one round trip when it has at most
// max entries, where the path can (the agent channel); elsewhere it is
// Unsupported.
func (h *Hands) WalkMax(ctx context.Context, root string, max int) ([]providers.FileInfo, error) {
	if cw, ok := h.walker.(providers.CappedWalker); ok {
		return cw.WalkMax(ctx, root, max)
	}
	return nil, providers.Errorf(providers.Unsupported, "hands.WalkMax", "the %s path has no capped walk", h.via)
}

// ReadDirMax lists a directory of at most max entries where the path can
// refuse a larger one before sending it (the agent channel, a local box);
// elsewhere it is Unsupported and the caller lists it whole.
func (h *Hands) ReadDirMax(ctx context.Context, name string, max int) ([]providers.FileInfo, error) {
	if cl, ok := h.files.(providers.CappedLister); ok {
		return cl.ReadDirMax(ctx, name, max)
	}
	return nil, providers.Errorf(providers.Unsupported, "hands.ReadDirMax", "the %s path has no capped listing", h.via)
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

// RenameStat renames and returns the attributes the rename left, in one
// round trip over the agent channel, and through the box's own files
// where they answer so (a local box); on other paths it is Unsupported
// and renames nothing.
func (h *Hands) RenameStat(ctx context.Context, oldname, newname string) (providers.FileInfo, []providers.FileInfo, error) {
	if h.channel == nil {
		if rs, ok := h.files.(providers.RenameStater); ok {
			return rs.RenameStat(ctx, oldname, newname)
		}
		return providers.FileInfo{}, nil, providers.Errorf(providers.Unsupported, "hands.RenameStat", "the %s path renames without attributes", h.via)
	}
	fi, dirs, err := h.channel.RenameStat(ctx, oldname, newname)
	if err == nil && fi.IsSymlink() && fi.Target == "" {
		fi.Target, err = h.channel.Readlink(ctx, newname)
	}
	return fi, dirs, err
}

// RemoveStat unlinks name and returns the attributes the file keeps
// under its other names: in one round trip over the agent channel, and
// through the box's own files where they answer so (a local box); on
// other paths it is Unsupported and removes nothing.
func (h *Hands) RemoveStat(ctx context.Context, name string) (providers.FileInfo, error) {
	if h.channel != nil {
		return h.channel.RemoveStat(ctx, name)
	}
	if rs, ok := h.files.(providers.RemoveStater); ok {
		return rs.RemoveStat(ctx, name)
	}
	return providers.FileInfo{}, providers.Errorf(providers.Unsupported, "hands.RemoveStat", "the %s path removes without attributes", h.via)
}

// setattrStater is the path's own SetattrStater: the agent channel, or
// the box's own files where they have one.
func (h *Hands) setattrStater(op string) (providers.SetattrStater, error) {
	if h.channel != nil {
		return h.channel, nil
	}
	if ss, ok := h.files.(providers.SetattrStater); ok {
		return ss, nil
	}
	return nil, providers.Errorf(providers.Unsupported, op, "the %s path sets attributes without answering them", h.via)
}

// ChmodStat sets name's mode and returns the attributes it left: in one
// round trip over the agent channel; on paths that cannot answer so it is
// Unsupported and changes nothing. So are ChownStat and UtimesStat.
func (h *Hands) ChmodStat(ctx context.Context, name string, mode providers.FileMode) (providers.FileInfo, error) {
	ss, err := h.setattrStater("hands.ChmodStat")
	if err != nil {
		return providers.FileInfo{}, err
	}
	return ss.ChmodStat(ctx, name, mode)
}

// ChownStat sets name's owner and returns the attributes it left.
func (h *Hands) ChownStat(ctx context.Context, name string, uid, gid int) (providers.FileInfo, error) {
	ss, err := h.setattrStater("hands.ChownStat")
	if err != nil {
		return providers.FileInfo{}, err
	}
	return ss.ChownStat(ctx, name, uid, gid)
}

// UtimesStat sets name's times and returns the attributes they left.
func (h *Hands) UtimesStat(ctx context.Context, name string, atime, mtime time.Time) (providers.FileInfo, error) {
	ss, err := h.setattrStater("hands.UtimesStat")
	if err != nil {
		return providers.FileInfo{}, err
	}
	return ss.UtimesStat(ctx, name, atime, mtime)
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
// agent channel for a file up to 192 KiB, the box's archive API and one
// round trip for a large one where the box has that API; a call per step
// elsewhere.
func (h *Hands) WriteFileStat(ctx context.Context, name string, r io.Reader, o providers.WriteOptions) (providers.FileInfo, error) {
	if ar, ok := h.bulk(); ok {
		if size, ok := sizeOf(r); ok && size >= bulkMin {
			fi, retry, err := h.writeBulk(ctx, ar, name, r.(*os.File), size, o)
			if err == nil || !retry {
				return fi, err
			}
			h.log.Debug("hands: bulk write failed; writing through the file channel", "path", name, "err", err)
		}
	}
	return providers.AsStatWriter(h.files).WriteFileStat(ctx, name, r, o)
}

// WriteFiles writes many whole files, each as WriteFileStat does: in one
// round trip over the agent channel, one call each elsewhere.
func (h *Hands) WriteFiles(ctx context.Context, files []providers.FileWrite) ([]providers.FileWritten, error) {
	if bw, ok := h.files.(providers.BatchWriter); ok {
		return h.writeBatch(ctx, bw, files)
	}
	out := make([]providers.FileWritten, len(files))
	for i, f := range files {
		if f.Dir {
			out[i].Info, out[i].Err = providers.WriteDir(ctx, h, f)
			continue
		}
		out[i].Info, out[i].Err = h.WriteFileStat(ctx, f.Name, f.Data, f.Options)
	}
	return out, nil
}

// writeBatch writes files through bw, but for large files that take the
// bulk path: those go one by one, after the files before the last of them
// and before those after it (a batch's directory attributes come last).
func (h *Hands) writeBatch(ctx context.Context, bw providers.BatchWriter, files []providers.FileWrite) ([]providers.FileWritten, error) {
	var big []int
	for i, f := range files {
		if _, ok := h.bulk(); ok && !f.Dir && f.Size >= bulkMin {
			if _, ok := sizeOf(f.Data); ok {
				big = append(big, i)
			}
		}
	}
	if len(big) == 0 {
		return bw.WriteFiles(ctx, files)
	}
	out := make([]providers.FileWritten, len(files))
	batch := func(lo, hi int) error {
		var part []providers.FileWrite
		var at []int
		for i := lo; i < hi; i++ {
			if !slices.Contains(big, i) {
				part = append(part, files[i])
				at = append(at, i)
			}
		}
		if len(part) == 0 {
			return nil
		}
		res, err := bw.WriteFiles(ctx, part)
		for k, i := range at {
			if err == nil {
				out[i] = res[k]
			}
		}
		return err
	}
	last := big[len(big)-1]
	if err := batch(0, last); err != nil {
		return nil, err
	}
	for _, i := range big {
		f := files[i]
		out[i].Info, out[i].Err = h.WriteFileStat(ctx, f.Name, f.Data, f.Options)
	}
	if err := batch(last+1, len(files)); err != nil {
		return nil, err
	}
	return out, nil
}

// Watch reports the changes made under root in the box as they happen:
// changed gets each batch of paths relative to root, or all when changes
// were lost. It takes the agent's watch (see agent.Channel.Watch) where
// the agent runs, else the box's own (providers.Watcher: a local box's
// in-process inotify, E2B's WatchDir); Unsupported when the box has
// neither, Unavailable while the agent's command stream is not up. It
// returns nil when ctx ends.
func (h *Hands) Watch(ctx context.Context, root string, ready func(), changed func(changes []providers.Change, all bool)) error {
	if _, err := checkPath("hands.Watch", h.box.ID(), root); err != nil {
		return err
	}
	if h.channel != nil {
		return h.channel.Watch(ctx, root, h.watchMax, ready, changed)
	}
	if w, ok := h.box.(providers.Watcher); ok {
		return w.Watch(ctx, root, ready, changed)
	}
	return providers.Errorf(providers.Unsupported, "hands.Watch", "the box has no watch: it is reached %s, without the agent, and its provider watches nothing", h.via).WithBox(h.box.ID())
}

// CanWatch reports whether Watch may run on the box: the agent runs, or
// the box has a watch of its own.
func (h *Hands) CanWatch() bool {
	if h.channel != nil {
		return true
	}
	_, ok := h.box.(providers.Watcher)
	return ok
}

// GetFiles returns one tar of paths under root (each relative to root,
// slash-separated; a directory comes as itself, without its contents), the
// member names being those paths. It is syncengine's MultiArchiver. GNU tar
// in the box makes it in one exec, the fastest way for bulk data; a box
// without GNU tar (busybox, distroless) has the agent make it, on the
// agent's command stream, when the box has the agent.
func (h *Hands) GetFiles(ctx context.Context, root string, paths []string) (io.ReadCloser, error) {
	rc, err := h.sh.GetFiles(ctx, root, paths)
	if err == nil || h.channel == nil || !(providers.IsCode(err, providers.Unsupported) || !h.Facts().HasShell()) {
		return rc, err
	}
	h.log.Debug("hands: no GNU tar in the box; the agent makes the archive", "err", err)
	arc, aerr := h.channel.GetFiles(ctx, root, paths)
	if providers.IsCode(aerr, providers.Unavailable) {
		return nil, err
	}
	return arc, aerr
}
