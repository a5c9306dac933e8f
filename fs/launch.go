package fs

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/boxfs/boxfs/launch"
	"github.com/boxfs/boxfs/providers"
)

// launchEntryTimeout is how long the kernel may trust a launch's name: a
// lookup costs a command in the box.
const launchEntryTimeout = time.Second

// launchFollowPoll is how often a reader of out.log at its end asks the
// box for more while the launch runs.
const launchFollowPoll = 500 * time.Millisecond

// launchDir is NAME/launch/: one directory per launch of the box. Its
// launches cannot be removed or renamed (`rm -rf MOUNT/*` leaves them), but
// for a name made and never started: remove in a launch's ctl forgets it.
type launchDir struct {
	fixedDir
	v *boxView
}

var (
	_ gofs.NodeLookuper  = (*launchDir)(nil)
	_ gofs.NodeReaddirer = (*launchDir)(nil)
	_ gofs.NodeMkdirer   = (*launchDir)(nil)
	_ gofs.NodeRmdirer   = (*launchDir)(nil)
	_ gofs.NodeGetattrer = (*launchDir)(nil)
	_ gofs.NodeOnAdder   = (*launchNode)(nil)
	_ gofs.NodeGetattrer = (*launchNode)(nil)
)

func (d *launchDir) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.v.fs.dirAttr(&out.Attr)
	out.SetTimeout(uncached)
	return 0
}

func launchIno(v *boxView, name string) uint64 {
	return boxDirIno(v.b.Name() + "\x00launch\x00" + name)
}

func (d *launchDir) node(ctx context.Context, name string, out *fuse.EntryOut) *gofs.Inode {
	d.v.fs.dirAttr(&out.Attr)
	out.SetEntryTimeout(launchEntryTimeout)
	out.SetAttrTimeout(launchEntryTimeout)
	return d.NewInode(ctx, &launchNode{v: d.v, name: name}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: launchIno(d.v, name)})
}

func (d *launchDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if launch.CheckName(name) != nil {
		return nil, syscall.ENOENT
	}
	if !d.v.b.Made(name) {
		if _, err := d.v.b.LaunchState(ctx, name); err != nil {
			if !providers.IsCode(err, providers.NotFound) {
				d.v.b.SetErr(providers.E(0, "launch/"+name, err))
			}
			return nil, toErrno(err)
		}
	}
	return d.node(ctx, name, out), 0
}

func (d *launchDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	names, err := d.v.b.Launches(ctx)
	if err != nil {
		d.v.b.SetErr(providers.E(0, "launch", err))
		return nil, toErrno(err)
	}
	ents := make([]fuse.DirEntry, len(names))
	for i, n := range names {
		ents[i] = fuse.DirEntry{Name: n, Mode: syscall.S_IFDIR, Ino: launchIno(d.v, n)}
	}
	return gofs.NewListDirStream(ents), 0
}

// Mkdir names a launch not started yet: its ctl's start starts it.
func (d *launchDir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if err := d.v.b.MakeLaunch(name); err != nil {
		d.v.b.SetErr(providers.E(0, "mkdir launch/"+name, err))
		return nil, toErrno(err)
	}
	return d.node(ctx, name, out), 0
}

// Rmdir forgets a name made with mkdir and never started; a launch the box
// has is removed by remove in its ctl, never by rmdir (EPERM).
func (d *launchDir) Rmdir(ctx context.Context, name string) syscall.Errno {
	if !d.v.b.Made(name) {
		d.v.b.SetErr(providers.Errorf(providers.Refused, "rmdir launch/"+name, "a launch is removed by writing remove to its ctl"))
		return syscall.EPERM
	}
	if err := d.v.b.RemoveLaunch(ctx, name); err != nil {
		return toErrno(err)
	}
	return 0
}

// launchNode is NAME/launch/PROG/: ctl, state, out.log, secrets, stdin,
// none of which can be removed or renamed.
type launchNode struct {
	fixedDir
	v    *boxView
	name string
}

func (n *launchNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.v.fs.dirAttr(&out.Attr)
	return 0
}

func (n *launchNode) OnAdd(ctx context.Context) {
	b, name := n.v.b, n.name
	add := func(file string, node gofs.InodeEmbedder) {
		n.AddChild(file, n.NewPersistentInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
	state := func(ctx context.Context) (launch.State, error) {
		st, err := b.LaunchState(ctx, name)
		if providers.IsCode(err, providers.NotFound) && b.Made(name) {
			return launch.State{Name: name, Phase: "new"}, nil
		}
		return st, err
	}
	own := &n.v.fs.own
	add("ctl", &ctlFile{
		own:  own,
		mode: 0o600,
		read: func(ctx context.Context) ([]byte, error) {
			st, err := state(ctx)
			if err != nil {
				return nil, err
			}
			return []byte(launch.StatusLine(st)), nil
		},
		write: func(ctx context.Context, data []byte) error { return n.ctl(ctx, data) },
		onErr: b.SetErr,
	})
	add("state", textFile(own, func(ctx context.Context) ([]byte, error) {
		st, err := state(ctx)
		if err != nil {
			return nil, err
		}
		out, err := json.MarshalIndent(st, "", "  ")
		return append(out, '\n'), err
	}))
	add("out.log", &launchLog{v: n.v, name: name})
	add("secrets", &inputFile{v: n.v, name: name, max: launch.MaxSecrets, commit: func(b []byte) error {
		m, err := launch.ParseSecrets(b)
		if err != nil {
			return providers.E(providers.Invalid, "launch/"+name+"/secrets", err)
		}
		return n.v.b.SetLaunchSecrets(name, m)
	}})
	add("stdin", &inputFile{v: n.v, name: name, max: launch.MaxStdin, commit: func(b []byte) error {
		return n.v.b.SetLaunchStdin(name, b)
	}})
}

// launchMsg is one message of a launch's ctl.
type launchMsg struct {
	verb  string // start, stop, restart, remove
	spec  launch.Spec
	grace *time.Duration
}

// parseLaunchCtl parses every message of a write to a launch's ctl before
// any runs: one bad message fails the whole write (Invalid).
func parseLaunchCtl(text string) ([]launchMsg, error) {
	const op = "launch ctl"
	lines := splitMessages(text)
	if len(lines) == 0 {
		return nil, providers.Errorf(providers.Invalid, op, "no message")
	}
	var out []launchMsg
	for _, line := range lines {
		words, err := tokenize(line)
		if err != nil {
			return nil, badMessage(op, line, err)
		}
		m := launchMsg{verb: words[0]}
		switch m.verb {
		case "start":
			m.spec, err = launch.ParseStart(words[1:])
		case "stop":
			m.grace, err = parseGrace(words[1:])
		case "restart", "remove":
			if len(words) > 1 {
				err = fmt.Errorf("%s takes no arguments", m.verb)
			}
		default:
			err = fmt.Errorf("unknown verb %q (a launch's ctl takes start, stop, restart, remove)", m.verb)
		}
		if err != nil {
			return nil, badMessage(op, line, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// parseGrace reads stop's optional grace=DURATION.
func parseGrace(words []string) (*time.Duration, error) {
	if len(words) == 0 {
		return nil, nil
	}
	k, v, ok := strings.Cut(words[0], "=")
	if len(words) > 1 || !ok || k != "grace" {
		return nil, fmt.Errorf("stop takes only grace=DURATION")
	}
	s, err := launch.ParseStart([]string{"grace=" + v, "--", "x"})
	if err != nil {
		return nil, err
	}
	return s.Grace, nil
}

// ctl runs a write to the launch's ctl: every message parsed first, then
// run in order; the first failure stops the rest.
func (n *launchNode) ctl(ctx context.Context, data []byte) error {
	msgs, err := parseLaunchCtl(string(data))
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.verb == "stop" || m.verb == "restart" {
			// A stop waits out the grace and the before-stop program,
			// each up to launch.MaxGrace.
			n.v.fs.bounds.extend(ctx, 2*launch.MaxGrace)
			break
		}
	}
	ctx = context.WithoutCancel(ctx)
	b := n.v.b
	for _, m := range msgs {
		switch m.verb {
		case "start":
			_, err = b.StartLaunch(ctx, n.name, m.spec)
		case "stop":
			_, err = b.StopLaunch(ctx, n.name, m.grace)
		case "restart":
			_, err = b.RestartLaunch(ctx, n.name)
		case "remove":
			err = b.RemoveLaunch(ctx, n.name)
		}
		if err != nil {
			return providers.E(0, "launch/"+n.name+" ctl "+m.verb, err)
		}
	}
	return nil
}

// launchLog is out.log: the launch's output, from the oldest byte the box
// keeps, followed until the launch ends (as cmds/N/out follows a command).
type launchLog struct {
	gofs.Inode
	v    *boxView
	name string
}

var (
	_ gofs.NodeOpener    = (*launchLog)(nil)
	_ gofs.NodeGetattrer = (*launchLog)(nil)
)

func (l *launchLog) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	l.v.fs.own.fill(&out.Attr, syscall.S_IFREG, 0o400)
	out.Nlink = 1
	out.SetTimes(nil, &started, &started)
	out.SetTimeout(uncached)
	return 0
}

func (l *launchLog) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if int(flags)&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EACCES
	}
	nonblock := flags&syscall.O_NONBLOCK != 0
	return &launchLogHandle{l: l, pos: -1, nonblock: nonblock}, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_NONSEEKABLE, 0
}

// launchLogHandle reads on from where its last read ended: offsets in the
// box shift as it drops the head of the output, so the handle keeps its own.
// Opened O_NONBLOCK, a read at the end of a running launch's output is
// EAGAIN instead of a wait for more.
type launchLogHandle struct {
	l        *launchLog
	mu       sync.Mutex
	pos      int64 // -1 before the first read: the oldest byte kept
	nonblock bool
}

var _ gofs.FileReader = (*launchLogHandle)(nil)

func (h *launchLogHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.l.v.fs.unbounded(ctx) // waits for output while the launch runs
	h.mu.Lock()
	defer h.mu.Unlock()
	b, name := h.l.v.b, h.l.name
	ended := false
	for {
		lg, err := b.ReadLaunchLog(ctx, name, max(h.pos, 0), len(dest))
		if err != nil {
			if ctx.Err() != nil {
				return nil, syscall.EINTR
			}
			return nil, toErrno(err)
		}
		if len(lg.Data) > 0 {
			h.pos = max(h.pos, lg.Base) + int64(len(lg.Data))
			return fuse.ReadResultData(lg.Data), 0
		}
		h.pos = max(h.pos, lg.End)
		if ended {
			return fuse.ReadResultData(nil), 0
		}
		st, err := b.LaunchState(ctx, name)
		if err != nil || st.Phase.Ended() {
			ended = true // one more read, for what came just before the end
			continue
		}
		if h.nonblock {
			return nil, syscall.EAGAIN
		}
		select {
		case <-ctx.Done():
			return nil, syscall.EINTR
		case <-time.After(launchFollowPoll):
		}
	}
}

// inputFile is a launch's secrets or stdin: write-only; what one open
// writes is taken at its close and held in the daemon's memory for the
// launch's next start.
type inputFile struct {
	gofs.Inode
	v      *boxView
	name   string
	max    int
	commit func([]byte) error
}

var (
	_ gofs.NodeOpener    = (*inputFile)(nil)
	_ gofs.NodeGetattrer = (*inputFile)(nil)
	_ gofs.NodeSetattrer = (*inputFile)(nil)
)

func (f *inputFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.v.fs.own.fill(&out.Attr, syscall.S_IFREG, 0o600)
	out.Nlink = 1
	out.SetTimes(nil, &started, &started)
	out.SetTimeout(uncached)
	return 0
}

// Setattr takes the truncation of `> secrets` and nothing else.
func (f *inputFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if errno := controlSetattr(in); errno != 0 {
		return errno
	}
	return f.Getattr(ctx, fh, out)
}

func (f *inputFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if int(flags)&syscall.O_ACCMODE != syscall.O_WRONLY {
		return nil, 0, syscall.EACCES // never read back
	}
	return &inputHandle{f: f, trunc: flags&syscall.O_TRUNC != 0}, fuse.FOPEN_DIRECT_IO, 0
}

type inputHandle struct {
	f     *inputFile
	mu    sync.Mutex
	buf   []byte
	trunc bool // opened with O_TRUNC: a close with nothing written clears
	dirty bool
	over  bool
}

var (
	_ gofs.FileWriter   = (*inputHandle)(nil)
	_ gofs.FileFlusher  = (*inputHandle)(nil)
	_ gofs.FileReleaser = (*inputHandle)(nil)
)

func (h *inputHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	end := off + int64(len(data))
	if off < 0 || end > int64(h.f.max) {
		h.over = true
		h.f.v.b.SetErr(providers.Errorf(providers.TooLarge, "launch/"+h.f.name, "more than %d bytes written", h.f.max))
		return 0, syscall.EFBIG
	}
	if int(end) > len(h.buf) {
		h.buf = append(h.buf, make([]byte, int(end)-len(h.buf))...)
	}
	copy(h.buf[off:], data)
	h.dirty = true
	return uint32(len(data)), 0
}

// Flush takes what the open wrote (at every close of it, the last wins).
func (h *inputHandle) Flush(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.over || (!h.dirty && !h.trunc) {
		return 0
	}
	if err := h.f.commit(slices.Clone(h.buf)); err != nil {
		h.f.v.b.SetErr(err)
		return toErrno(err)
	}
	h.dirty, h.trunc = false, false
	return 0
}

// Release wipes the handle's copy.
func (h *inputHandle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	clear(h.buf)
	h.buf = nil
	h.mu.Unlock()
	return 0
}

// boxMsg is one message of a box's ctl: a verb of boxVerbs, or launch.
type boxMsg struct {
	cmd    boxCmd
	launch string // the launch's name, for "launch NAME [key=value ...] -- ARGV"
	spec   launch.Spec
}

// parseBoxMsgs parses every message of a write to a box's ctl: the
// verbs parseBoxCtl takes, and launch.
func parseBoxMsgs(text string) ([]boxMsg, error) {
	var out []boxMsg
	for _, line := range splitMessages(text) {
		if !strings.HasPrefix(line, "launch ") && line != "launch" {
			cmds, err := parseBoxCtl(line)
			if err != nil {
				return nil, err
			}
			out = append(out, boxMsg{cmd: cmds[0]})
			continue
		}
		words, err := tokenize(line)
		if err == nil && len(words) < 2 {
			err = fmt.Errorf("launch NAME [key=value ...] -- PROGRAM [ARG ...]")
		}
		var m boxMsg
		if err == nil {
			m.launch = words[1]
			if err = launch.CheckName(m.launch); err == nil {
				m.spec, err = launch.ParseStart(words[2:])
			}
		}
		if err == nil && m.launch == "" {
			err = fmt.Errorf("a launch name is needed")
		}
		if err != nil {
			return nil, badMessage("ctl", line, err)
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, providers.Errorf(providers.Invalid, "ctl", "no message")
	}
	return out, nil
}
