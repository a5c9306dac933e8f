package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/urfave/cli/v2"

	"github.com/boxfs/boxfs/boxes"
	boxfs "github.com/boxfs/boxfs/fs"
	"github.com/boxfs/boxfs/providers"
)

const (
	// shutdownFlush bounds pushing dirty files when the mount ends; what is
	// not pushed by then stays journaled for the next mount.
	shutdownFlush = 60 * time.Second
	// backgroundStart bounds how long `mount --background` waits for the
	// mount to answer.
	backgroundStart = 60 * time.Second
	// shutdownGrace is how much longer than shutdownFlush the whole end
	// of a mount (the push, then the unmount) may take before the daemon
	// exits anyway.
	shutdownGrace = 30 * time.Second
	// recoverBound bounds pushing an earlier run's journaled writes.
	recoverBound = 10 * time.Minute
)

// shutdownBound bounds the end of a mount at a signal or an unmount: past
// it the daemon logs what still runs and exits. A variable for tests.
var shutdownBound = shutdownFlush + shutdownGrace

// mountOpts are the mount's settings from flags and -o.
type mountOpts struct {
	background  bool
	allowOther  bool
	group       string // a group name or number sharing the control files; "" none
	symlinks    string // "", "transform" or "keep"
	debug       bool
	attrTimeout time.Duration
	// requestBound bounds one request of the mount (0: the config's
	// request_bound, else fs.DefaultRequestBound).
	requestBound time.Duration
	write        string // boxes.WriteThrough or boxes.WriteBehind; "" is through
	cacheSize    string // the content cache's bound ("" for the default)
	watch        string // boxes.WatchOn or boxes.WatchOff; "" is on
}

func mountCommand() *cli.Command {
	return &cli.Command{
		Name:      "mount",
		Usage:     "serve the boxes at MOUNTPOINT (foreground; --background to detach once the mount answers)",
		ArgsUsage: "MOUNTPOINT",
		Description: `One mount serves one state directory. SIGINT or SIGTERM pushes dirty files
(bounded), then unmounts. A stale mount left at MOUNTPOINT by a killed daemon
is cleaned up first; boxes recorded in the state directory are found again and
writes a killed daemon journaled are pushed.

-o takes mount(8)-style options, so that an fstab line works:
  background, allow_other, group=GROUP, symlinks=transform|keep, debug,
  attr_timeout=DUR, write=through|behind, cache_size=SIZE, watch=on|off,
  provider=P,
  state=DIR,
  config=FILE, log_format=F, log_level=L; rw, defaults, nofail, _netdev,
  noauto, auto, user, users, nouser, dev, nodev, suid, nosuid, exec, noexec,
  atime, noatime, relatime, x-* and comment=* are accepted and ignored.
fstab (mount.fuse runs "boxfs mount /boxes -o ..."; boxfs in /usr/local/bin):
  mount  /boxes  fuse.boxfs  background,state=/var/lib/boxfs,nofail  0  0`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "background", Aliases: []string{"b"}, Usage: "detach once the mount answers; the daemon logs to STATE/mount.log"},
			&cli.BoolFlag{Name: "allow-other", Usage: "let other users into the mount, as the modes allow: the workspaces' files as their owners and modes say; the control files are yours alone (needs user_allow_other in /etc/fuse.conf unless root)"},
			&cli.StringFlag{Name: "group", Usage: "give `GROUP` your access to the control files: its members can make, destroy and run commands in boxes (as the box's user)"},
			&cli.StringFlag{Name: "symlinks", Usage: "absolute symlink targets in work/: `transform` (read relative, inside the mount) or keep; default: transform on boxes whose provider isolates them, keep on local boxes"},
			&cli.BoolFlag{Name: "debug", Usage: "log every FUSE request and answer"},
			&cli.DurationFlag{Name: "attr-timeout", Usage: "how long the kernel and the cache trust attributes and listings", DefaultText: "the config's attr_timeout, else 1s"},
			&cli.DurationFlag{Name: "request-bound", Usage: "how long one request of the mount may wait for its answer before it fails with ETIMEDOUT and the daemon's goroutines are logged (a ctl new, a launch's start get their documented extra time)", DefaultText: "the config's request_bound, else 5m"},
			&cli.StringFlag{Name: "write", Usage: "when close(2) returns in work/: `through` (the box has the bytes) or behind (the host's journal has them; batches reach the box within 100 ms, and before every command, fsync and ctl flush); a box's `new ... write=` overrides it", DefaultText: "through"},
			&cli.StringFlag{Name: "cache-size", Usage: "bound on the host disk the boxes' content caches take (`SIZE`: 512m, 20g; 0 for none); least recently used clean copies go past it", DefaultText: "a tenth of the state directory's file system"},
			&cli.StringFlag{Name: "watch", Usage: "watch the boxes' workspaces, so a change made in a box behind boxfs's back shows at once: `on` or off (then it shows after the attribute timeout); a box's `new ... watch=off` turns it off for that box", DefaultText: "on"},
			&cli.StringSliceFlag{Name: "o", Usage: "mount(8)-style `OPTIONS`, comma-separated (see above)"},
		},
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			if len(args) != 1 {
				return usagef("mount: takes one mount point, got %d arguments (boxfs mount MOUNTPOINT)", len(args))
			}
			mo, err := parseMountOptions(c)
			if err != nil {
				return err
			}
			e, err := newEnv(c, true)
			if err != nil {
				return err
			}
			if mo.attrTimeout == 0 {
				mo.attrTimeout = e.attrTimeout
			}
			e.attrTimeout = mo.attrTimeout
			mnt, err := resolveMountpoint(args[0])
			if err != nil {
				return usagef("mount: %v", err)
			}
			// Whatever the configuration holds that could fail the mount
			// is checked here, before detaching: one line, exit 2.
			if _, err := e.cfg.declared(); err != nil {
				return err
			}
			e.noteAgentOff(!mo.background)
			if mo.background {
				return startBackground(c, e, mnt, mo)
			}
			return serve(c.Context, e, mnt, mo)
		},
	}
}

// ignoredMountOptions are what mount(8) and mount.fuse pass that mean
// nothing to boxfs.
var ignoredMountOptions = map[string]bool{
	"rw": true, "defaults": true, "nofail": true, "_netdev": true, "noauto": true,
	"auto": true, "user": true, "users": true, "nouser": true, "owner": true,
	"dev": true, "nodev": true, "suid": true, "nosuid": true, "exec": true,
	"noexec": true, "atime": true, "noatime": true, "relatime": true,
	"strictatime": true, "nodiratime": true, "diratime": true, "async": true,
	"fsname": true, "subtype": true,
}

// parseMountOptions reads the mount's flags and -o options; -o's state=,
// config=, provider=, log_format= and log_level= set the global flags.
func parseMountOptions(c *cli.Context) (mountOpts, error) {
	mo := mountOpts{
		background:   c.Bool("background"),
		allowOther:   c.Bool("allow-other"),
		group:        c.String("group"),
		symlinks:     c.String("symlinks"),
		debug:        c.Bool("debug"),
		attrTimeout:  c.Duration("attr-timeout"),
		requestBound: c.Duration("request-bound"),
		write:        c.String("write"),
		cacheSize:    c.String("cache-size"),
		watch:        c.String("watch"),
	}
	if err := checkWatch("--watch", mo.watch); err != nil {
		return mo, err
	}
	if _, err := cacheBudget(mo.cacheSize); err != nil {
		return mo, err
	}
	if err := checkWrite("--write", mo.write); err != nil {
		return mo, err
	}
	if c.IsSet("attr-timeout") && mo.attrTimeout <= 0 {
		return mo, usagef("mount --attr-timeout %v: must be positive", mo.attrTimeout)
	}
	if c.IsSet("request-bound") && mo.requestBound <= 0 {
		return mo, usagef("mount --request-bound %v: must be positive", mo.requestBound)
	}
	for _, o := range c.StringSlice("o") {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		k, v, hasV := strings.Cut(o, "=")
		switch k {
		case "background", "bg":
			mo.background = true
		case "foreground", "fg":
			mo.background = false
		case "allow_other":
			mo.allowOther = true
		case "symlinks":
			mo.symlinks = v
		case "group":
			if v == "" {
				return mo, usagef("mount -o group: needs a group (group=NAME or group=GID)")
			}
			mo.group = v
		case "debug":
			mo.debug = true
		case "attr_timeout":
			d, err := parseSeconds("attr_timeout", scalar(v))
			if err != nil || d <= 0 {
				return mo, usagef("mount -o attr_timeout=%q: want a positive duration (1s, 500ms or 2)", v)
			}
			mo.attrTimeout = d
		case "request_bound":
			d, err := parseSeconds("request_bound", scalar(v))
			if err != nil || d <= 0 {
				return mo, usagef("mount -o request_bound=%q: want a positive duration (5m, 30s or 300)", v)
			}
			mo.requestBound = d
		case "write":
			if err := checkWrite("-o write", v); err != nil {
				return mo, err
			}
			mo.write = v
		case "watch":
			if err := checkWatch("-o watch", v); err != nil {
				return mo, err
			}
			mo.watch = v
		case "cache_size":
			if _, err := cacheBudget(v); err != nil {
				return mo, err
			}
			mo.cacheSize = v
		case "state", "config", "provider", "log_format", "log_level":
			if !hasV || (v == "" && k != "config") {
				return mo, usagef("mount -o %s: needs a value (%s=...)", k, k)
			}
			if err := c.Set(strings.ReplaceAll(k, "_", "-"), v); err != nil {
				return mo, usagef("mount -o %s: %v", o, err)
			}
		case "ro":
			return mo, usagef("mount -o ro: boxfs mounts are read-write (boxes run commands through files)")
		default:
			if ignoredMountOptions[k] || strings.HasPrefix(k, "x-") || k == "comment" {
				continue
			}
			return mo, usagef("mount -o %s: unknown option (see boxfs mount --help)", o)
		}
	}
	if mo.group != "" {
		if _, err := groupID(mo.group); err != nil {
			return mo, usagef("mount --group %s: %v", mo.group, err)
		}
	}
	switch mo.symlinks {
	case "", "transform", "keep":
	default:
		return mo, usagef("mount --symlinks %q: want transform or keep", mo.symlinks)
	}
	return mo, nil
}

// serve mounts the namespace at mnt and serves it until a signal or an
// unmount ends it.
func serve(ctx context.Context, e *env, mnt string, mo mountOpts) error {
	// Signals are caught before the mount answers: a SIGTERM that comes as
	// soon as the mount is up must still flush and unmount.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	defer signal.Stop(sigs)
	const op = "mount"
	if err := e.makeStateDir(); err != nil {
		return err
	}
	lock, err := lockState(e.state, true)
	if errors.Is(err, errLocked) {
		return heldError(e.state)
	}
	if err != nil {
		return err
	}
	defer lock.release()
	defer startPprof(e.log, e.state)()
	if err := prepareMountpoint(e, mnt); err != nil {
		return err
	}
	opts, err := e.boxOptions(true)
	if err != nil {
		return err
	}
	opts.AttrTimeout = mo.attrTimeout
	opts.WriteBehind = mo.write == boxes.WriteBehind
	opts.CacheBudget, _ = cacheBudget(mo.cacheSize)
	opts.NoWatch = mo.watch == boxes.WatchOff
	m, err := boxes.New(opts)
	if err != nil {
		return err
	}
	fo := boxfs.MountOptions{AllowOther: mo.allowOther, Symlinks: boxfs.Symlinks(mo.symlinks), Debug: mo.debug, FsName: "boxfs",
		RequestBound: mo.requestBound}
	if fo.RequestBound == 0 {
		fo.RequestBound, _ = e.cfg.requestBound()
	}
	if mo.group != "" {
		if fo.Group, err = groupID(mo.group); err != nil {
			return usagef("mount --group %s: %v", mo.group, err)
		}
	}
	server, err := boxfs.New(m).Mount(mnt, fo)
	if err != nil {
		return providers.E(0, op, err).WithPath(mnt)
	}
	defer startShellServer(e.log, mnt, m)()
	if err := writeMountRecord(e.state, mountRecord{Mountpoint: mnt, PID: os.Getpid(), Started: time.Now().UTC(), Version: versionString()}); err != nil {
		e.log.Error("mount record not written: other boxfs commands will not find this mount", "err", err)
	}
	defer os.Remove(filepath.Join(e.state, mountFile))
	e.log.Info("mounted", "mountpoint", mnt, "state", e.state, "pid", os.Getpid(), "provider", e.provider, "boxes", len(m.Names()),
		"requestBound", cmp.Or(fo.RequestBound, boxfs.DefaultRequestBound))

	go func() {
		rctx, cancel := context.WithTimeout(context.Background(), recoverBound)
		defer cancel()
		n, err := m.RecoverJournals(rctx)
		if err != nil {
			e.log.Error("journaled writes of an earlier run not all pushed; they stay journaled", "boxes", n, "err", err)
		} else if n > 0 {
			e.log.Info("journaled writes of an earlier run pushed", "boxes", n)
		}
	}()

	waitUnmount(ctx, e, sigs, server, m, mnt)
	e.log.Info("unmounted", "mountpoint", mnt)
	return nil
}

// waitUnmount serves until a signal, ctx or an unmount from outside ends
// the mount, then pushes dirty files (bounded) and unmounts: lazily when
// the mount is busy. A second signal exits at once.
func waitUnmount(ctx context.Context, e *env, sigs chan os.Signal, server *fuse.Server, m *boxes.Manager, mnt string) {
	ended := make(chan struct{})
	go func() {
		server.Wait()
		close(ended)
	}()

	var why string
	select {
	case sig := <-sigs:
		why = sig.String()
	case <-ctx.Done():
		why = ctx.Err().Error()
	case <-ended:
	}
	if why == "" {
		e.log.Info("unmounted from outside; pushing dirty files", "mountpoint", mnt)
	} else {
		e.log.Info("ending: pushing dirty files, then unmounting", "why", why)
		go func() {
			sig := <-sigs
			e.log.Error("second signal: exiting without waiting; unpushed files stay journaled for the next mount", "signal", sig.String())
			os.Exit(exitError)
		}()
	}
	endMount(e.log, m, server, mnt, why != "", shutdownBound)
}

// endMount pushes dirty files (bounded by shutdownFlush), then, if
// unmount, unmounts: lazily when the mount is busy. It returns within
// bound whatever a box or a lock does: past it, it logs the daemon's
// goroutines (what is still running), detaches the mount and returns, so
// the daemon exits. That is a crash as far as the state directory goes,
// which it is made to survive: what was not pushed stays in the boxes'
// journals (a line torn mid-write is skipped), pushed by the next mount.
func endMount(log *slog.Logger, m *boxes.Manager, server *fuse.Server, mnt string, unmount bool, bound time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fctx, cancel := context.WithTimeout(context.Background(), shutdownFlush)
		if err := m.Shutdown(fctx); err != nil {
			log.Error("dirty files not all pushed; they stay journaled for the next mount", "err", err)
		}
		cancel()
		if !unmount {
			return
		}
		if err := server.Unmount(); err != nil {
			log.Warn("mount busy; detaching it lazily (open files on it will fail)", "mountpoint", mnt, "err", err)
			if err := lazyUnmount(mnt); err != nil {
				log.Error("lazy unmount failed", "mountpoint", mnt, "err", err)
			}
		}
	}()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	}
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 2)
	log.Error("shutdown passed its bound: exiting with this still running; files not pushed stay journaled for the next mount",
		"bound", bound, "goroutines", buf.String())
	if !unmount {
		return
	}
	// Detached, the mount goes once nothing uses it; a request still on
	// it when the daemon exits answers ENOTCONN, never hangs.
	if err := lazyUnmount(mnt); err != nil {
		log.Error("lazy unmount failed", "mountpoint", mnt, "err", err)
	}
}

// heldError explains a state directory whose lock another process holds.
func heldError(state string) error {
	if rec, err := readMountRecord(state); err == nil && pidAlive(rec.PID) {
		return providers.Errorf(providers.Exists, "mount", "state directory %s is already served by the mount at %s (pid %d)", state, rec.Mountpoint, rec.PID)
	}
	return providers.Errorf(providers.Refused, "mount", "state directory %s is in use by another boxfs process (a command running without a mount, or a mount starting); try again when it ends", state)
}

// prepareMountpoint makes mnt ready to mount on: a stale mount (its daemon
// killed) is lazily unmounted, a missing directory made; a live boxfs mount
// there is refused.
func prepareMountpoint(e *env, mnt string) error {
	const op = "mount"
	fi, err := statMountpoint(mnt)
	switch {
	case isStale(err):
		e.log.Warn("stale mount found (its daemon is gone); unmounting it", "mountpoint", mnt)
		if err := lazyUnmount(mnt); err != nil {
			return providers.E(0, op, fmt.Errorf("cleaning up the stale mount: %w", err)).WithPath(mnt)
		}
		fi, err = statMountpoint(mnt)
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			return providers.E(0, op, err).WithPath(mnt)
		}
		fi, err = statMountpoint(mnt)
	}
	if err != nil {
		return providers.E(0, op, err).WithPath(mnt)
	}
	if !fi.IsDir() {
		return providers.Errorf(providers.Invalid, op, "not a directory").WithPath(mnt)
	}
	if typ, ok := mountedAt(mnt); ok && typ == "fuse.boxfs" {
		return providers.Errorf(providers.Exists, op, "a boxfs mount (of another state directory?) is already there (boxfs umount %s ends it)", mnt).WithPath(mnt)
	}
	return nil
}

// statMountpoint stats the mount point mnt. The kernel may answer a stat
// of a mount's root from its attribute cache after the daemon died (the
// permission checks of a path walk keep it fresh), so a boxfs mount there
// is also asked for its ctl, which is never cached: a dead one answers
// "transport endpoint is not connected".
func statMountpoint(mnt string) (os.FileInfo, error) {
	fi, err := os.Stat(mnt)
	if err != nil {
		return fi, err
	}
	if typ, ok := mountedAt(mnt); ok && typ == "fuse.boxfs" {
		if _, cerr := os.Stat(filepath.Join(mnt, "ctl")); isStale(cerr) {
			return nil, cerr
		}
	}
	return fi, nil
}

// checkMountpoint refuses, without changing anything, a mount point that
// prepareMountpoint would refuse: a file that is not a directory, or a live
// boxfs mount. A missing directory or a stale mount is not an error.
func checkMountpoint(mnt string) error {
	const op = "mount"
	fi, err := statMountpoint(mnt)
	switch {
	case err == nil && !fi.IsDir():
		return providers.Errorf(providers.Invalid, op, "not a directory").WithPath(mnt)
	case err != nil && !isStale(err) && !errors.Is(err, os.ErrNotExist):
		return providers.E(0, op, unwrapPathError(err)).WithPath(mnt)
	case err == nil:
		if typ, ok := mountedAt(mnt); ok && typ == "fuse.boxfs" {
			return providers.Errorf(providers.Exists, op, "a boxfs mount of another state directory is already there (boxfs umount %s ends it)", mnt).WithPath(mnt)
		}
	}
	return nil
}

// startBackground starts the mount as a detached process (its own
// session, stdio on STATE/mount.log) and returns once it answers, or fails
// with the end of its log.
//
// The daemon must outlive this process, so it is started with
// exec.Command, not CommandContext; ctx bounds only the wait.
func startBackground(c *cli.Context, e *env, mnt string, mo mountOpts) error {
	const op = "mount"
	if err := e.makeStateDir(); err != nil {
		return err
	}
	if rec, err := readMountRecord(e.state); err == nil && rec.Mountpoint == mnt && pidAlive(rec.PID) && answers(mnt, answerWait) {
		fmt.Fprintf(e.stderr, "boxfs: already mounted at %s (pid %d, state %s)\n", mnt, rec.PID, e.state)
		return nil
	}
	// What the daemon would refuse is refused here, in one line, rather
	// than from the end of its log.
	if err := checkMountpoint(mnt); err != nil {
		return err
	}
	lock, err := lockState(e.state, true)
	if errors.Is(err, errLocked) {
		return heldError(e.state)
	}
	if err != nil {
		return err
	}
	lock.release()

	exe, err := os.Executable()
	if err != nil {
		return providers.E(0, op, err)
	}
	args := []string{"--state", e.state, "--config", e.cfg.file, "--provider", e.provider,
		"--log-format", e.logFormat, "--log-level", e.logLevel,
		"mount", "--attr-timeout", mo.attrTimeoutOrDefault().String()}
	if mo.allowOther {
		args = append(args, "--allow-other")
	}
	if mo.group != "" {
		args = append(args, "--group", mo.group)
	}
	if mo.symlinks != "" {
		args = append(args, "--symlinks", mo.symlinks)
	}
	if mo.debug {
		args = append(args, "--debug")
	}
	if mo.write != "" {
		args = append(args, "--write", mo.write)
	}
	if mo.watch != "" {
		args = append(args, "--watch", mo.watch)
	}
	if mo.cacheSize != "" {
		args = append(args, "--cache-size", mo.cacheSize)
	}
	if mo.requestBound > 0 {
		args = append(args, "--request-bound", mo.requestBound.String())
	}
	args = append(args, "--", mnt)
	logName := filepath.Join(e.state, mountLog)
	logf, err := os.OpenFile(logName, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return providers.E(0, op, err).WithPath(logName)
	}
	defer logf.Close()
	start, _ := logf.Seek(0, io.SeekEnd)
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return providers.E(0, op, err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(backgroundStart)
	for {
		if rec, err := readMountRecord(e.state); err == nil && rec.PID == pid && answers(mnt, answerWait) {
			fmt.Fprintf(e.stderr, "boxfs: mounted at %s (pid %d, state %s, log %s)\n", mnt, pid, e.state, logName)
			return nil
		}
		select {
		case err := <-exited:
			tail := logTail(logName, start, 10)
			for _, l := range tail {
				fmt.Fprintf(e.stderr, "  %s\n", l)
			}
			why := fmt.Sprint(err)
			if len(tail) > 0 {
				why = tail[len(tail)-1]
			}
			return providers.Errorf(providers.Unknown, op, "the mount did not start (%s); log %s", strings.TrimPrefix(why, "boxfs: "), logName)
		case <-c.Context.Done():
			cmd.Process.Signal(syscall.SIGTERM)
			return c.Context.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Signal(syscall.SIGTERM)
			for _, l := range logTail(logName, start, 10) {
				fmt.Fprintf(e.stderr, "  %s\n", l)
			}
			return providers.Errorf(providers.Timeout, op, "the mount did not answer within %v; stopped it; log %s", backgroundStart, logName)
		}
	}
}

// cacheBudget is the boxes.Options.CacheBudget a cache size asks for: 0
// (the default) for "", -1 (no bound) for 0.
func cacheBudget(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := boxes.ParseBytes(v)
	if err != nil {
		return 0, usagef("mount cache_size=%q: want a size (512m, 20g; 0 for no bound)", v)
	}
	if n == 0 {
		return -1, nil
	}
	return n, nil
}

// checkWrite refuses a write mode other than through and behind.
func checkWrite(what, v string) error {
	if v != "" && v != boxes.WriteThrough && v != boxes.WriteBehind {
		return usagef("mount %s=%q: want through or behind", what, v)
	}
	return nil
}

// groupID returns the id of the group named (or numbered) g; root's group
// (0) cannot be given, since 0 means none.
func groupID(g string) (uint32, error) {
	id := g
	if grp, err := user.LookupGroup(g); err == nil {
		id = grp.Gid
	} else if _, nerr := strconv.ParseUint(g, 10, 32); nerr != nil {
		return 0, fmt.Errorf("no group %q", g)
	}
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("group %q: not a group other than root's", g)
	}
	return uint32(n), nil
}

func (mo mountOpts) attrTimeoutOrDefault() time.Duration {
	if mo.attrTimeout > 0 {
		return mo.attrTimeout
	}
	return time.Second
}

// resolveMountpoint makes p absolute with its parent's symlinks resolved,
// as the kernel's mount table names it. p itself is not followed: it may be
// a stale mount, whose stat fails.
func resolveMountpoint(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if abs == "/" {
		return abs, nil
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(dir, filepath.Base(abs))
	}
	return abs, nil
}

// logTail returns the last n non-empty lines of the log written since off.
func logTail(name string, off int64, n int) []string {
	f, err := os.Open(name)
	if err != nil {
		return nil
	}
	defer f.Close()
	f.Seek(off, io.SeekStart)
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// servingDaemon returns the record of the daemon that serves the state
// directory at mnt: the process mount.json names must be the one holding
// the state directory's lock, or the record is stale (its daemon died and
// the pid may be another process's now) and names no one to signal.
func servingDaemon(state, mnt string) (mountRecord, bool) {
	rec, err := readMountRecord(state)
	if err != nil || rec.Mountpoint != mnt || !pidAlive(rec.PID) {
		return rec, false
	}
	holder, ok := lockHolder(state)
	return rec, ok && holder == rec.PID
}

func umountCommand() *cli.Command {
	return &cli.Command{
		Name:      "umount",
		Aliases:   []string{"unmount"},
		Usage:     "end the mount at MOUNTPOINT: its daemon pushes dirty files, then unmounts",
		ArgsUsage: "MOUNTPOINT",
		Description: `Sends SIGTERM to the daemon the state directory records for MOUNTPOINT and
waits for it to end. Without such a daemon it unmounts MOUNTPOINT itself (a
stale mount lazily).`,
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "timeout", Value: 2 * shutdownFlush, Usage: "how long to wait for the daemon to end"},
		},
		Action: func(c *cli.Context) error {
			const op = "umount"
			args := c.Args().Slice()
			if len(args) != 1 {
				return usagef("umount: takes one mount point (boxfs umount MOUNTPOINT)")
			}
			mnt, err := resolveMountpoint(args[0])
			if err != nil {
				return usagef("umount: %v", err)
			}
			e, err := newEnv(c, false)
			if err != nil {
				return err
			}
			if rec, ok := servingDaemon(e.state, mnt); ok {
				if err := syscall.Kill(rec.PID, syscall.SIGTERM); err != nil {
					return providers.E(0, op, err).WithPath(mnt)
				}
				deadline := time.Now().Add(c.Duration("timeout"))
				for pidAlive(rec.PID) {
					if time.Now().After(deadline) {
						return providers.Errorf(providers.Timeout, op, "the mount's daemon (pid %d) did not end within %v; see %s", rec.PID, c.Duration("timeout"), filepath.Join(e.state, mountLog)).WithPath(mnt)
					}
					time.Sleep(50 * time.Millisecond)
				}
				if _, err := statMountpoint(mnt); isStale(err) {
					return lazyUnmount(mnt)
				}
				return nil
			}
			_, err = statMountpoint(mnt)
			switch {
			case isStale(err):
				if err := lazyUnmount(mnt); err != nil {
					return providers.E(0, op, err).WithPath(mnt)
				}
				return nil
			case err != nil:
				return providers.E(0, op, unwrapPathError(err)).WithPath(mnt)
			}
			if _, ok := mountedAt(mnt); !ok {
				return providers.Errorf(providers.NotFound, op, "nothing is mounted there").WithPath(mnt)
			}
			if err := unmount(mnt); err != nil {
				return providers.E(0, op, err).WithPath(mnt)
			}
			return nil
		},
	}
}

// checkWatch checks a --watch or -o watch value.
func checkWatch(what, v string) error {
	if v != "" && v != boxes.WatchOn && v != boxes.WatchOff {
		return usagef("mount %s=%q: want on or off", what, v)
	}
	return nil
}
