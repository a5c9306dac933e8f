package hands

import (
	"context"
	"io"
	"time"

	"github.com/boxfs/boxfs/hands/agent"
	"github.com/boxfs/boxfs/internal/guard"
	"github.com/boxfs/boxfs/providers"
)

// route is one path's implementations, read at once by every operation:
// New may start on one path (the scripts, the native APIs) and switch to
// the agent once its channel answers, and no operation sees half of each.
// An operation that took a route finishes on it.
type route struct {
	via      string
	files    providers.Files
	walker   providers.Walker
	archiver providers.Archiver
	channel  *agent.Channel // the agent channel; nil off the agent path
}

// path returns the route operations take now.
func (h *Hands) path() *route { return h.cur.Load() }

// The operations of providers.Files, providers.Walker and
// providers.Archiver, each on the route in use when it starts.

// Stat returns name's attributes, following symlinks.
func (h *Hands) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	return h.path().files.Stat(ctx, name)
}

// Lstat returns name's attributes, not following a final symlink.
func (h *Hands) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	return h.path().files.Lstat(ctx, name)
}

// ReadDir lists the directory name.
func (h *Hands) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	return h.path().files.ReadDir(ctx, name)
}

// ReadFile streams the whole file.
func (h *Hands) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	return h.path().files.ReadFile(ctx, name)
}

// ReadAt reads up to len(p) bytes of name at off.
func (h *Hands) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	return h.path().files.ReadAt(ctx, name, p, off)
}

// WriteFile replaces name with r's bytes atomically.
func (h *Hands) WriteFile(ctx context.Context, name string, r io.Reader, perm providers.FileMode) error {
	return h.path().files.WriteFile(ctx, name, r, perm)
}

// WriteAt writes p at off into the existing file name.
func (h *Hands) WriteAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	return h.path().files.WriteAt(ctx, name, p, off)
}

// Create makes an empty regular file.
func (h *Hands) Create(ctx context.Context, name string, perm providers.FileMode, exclusive bool) error {
	return h.path().files.Create(ctx, name, perm, exclusive)
}

// Mkdir makes a directory.
func (h *Hands) Mkdir(ctx context.Context, name string, perm providers.FileMode) error {
	return h.path().files.Mkdir(ctx, name, perm)
}

// Remove unlinks name.
func (h *Hands) Remove(ctx context.Context, name string) error {
	return h.path().files.Remove(ctx, name)
}

// Rmdir removes the empty directory name.
func (h *Hands) Rmdir(ctx context.Context, name string) error {
	return h.path().files.Rmdir(ctx, name)
}

// Rename moves oldname to newname, replacing newname.
func (h *Hands) Rename(ctx context.Context, oldname, newname string) error {
	return h.path().files.Rename(ctx, oldname, newname)
}

// Chmod sets name's mode.
func (h *Hands) Chmod(ctx context.Context, name string, mode providers.FileMode) error {
	return h.path().files.Chmod(ctx, name, mode)
}

// Chown sets name's owner; -1 leaves one unchanged.
func (h *Hands) Chown(ctx context.Context, name string, uid, gid int) error {
	return h.path().files.Chown(ctx, name, uid, gid)
}

// Utimes sets name's times; a zero time leaves that one unchanged.
func (h *Hands) Utimes(ctx context.Context, name string, atime, mtime time.Time) error {
	return h.path().files.Utimes(ctx, name, atime, mtime)
}

// Truncate sets name's size.
func (h *Hands) Truncate(ctx context.Context, name string, size int64) error {
	return h.path().files.Truncate(ctx, name, size)
}

// Symlink makes name a symbolic link to target.
func (h *Hands) Symlink(ctx context.Context, target, name string) error {
	return h.path().files.Symlink(ctx, target, name)
}

// Readlink returns the target of the symbolic link name.
func (h *Hands) Readlink(ctx context.Context, name string) (string, error) {
	return h.path().files.Readlink(ctx, name)
}

// Link makes newname a hard link to oldname.
func (h *Hands) Link(ctx context.Context, oldname, newname string) error {
	return h.path().files.Link(ctx, oldname, newname)
}

// Statfs describes the filesystem holding name.
func (h *Hands) Statfs(ctx context.Context, name string) (providers.StatFS, error) {
	return h.path().files.Statfs(ctx, name)
}

// Fsync flushes name to the box's storage.
func (h *Hands) Fsync(ctx context.Context, name string) error {
	return h.path().files.Fsync(ctx, name)
}

// Walk returns every entry under root (see providers.Walker).
func (h *Hands) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	return h.path().walker.Walk(ctx, root)
}

// PutArchive extracts a tar stream into the box directory dir.
func (h *Hands) PutArchive(ctx context.Context, dir string, tar io.Reader) error {
	return h.path().archiver.PutArchive(ctx, dir, tar)
}

// GetArchive returns a tar of path.
func (h *Hands) GetArchive(ctx context.Context, path string) (io.ReadCloser, error) {
	return h.path().archiver.GetArchive(ctx, path)
}

// AgentStarting reports whether the agent is being started in the
// background: the route switches to it once its channel answers.
func (h *Hands) AgentStarting() bool {
	if h.agentDone == nil {
		return false
	}
	select {
	case <-h.agentDone:
		return false
	default:
		return true
	}
}

// WaitAgent waits until the agent New started in the background is up or
// failed to start (the route then stays the one New took), or ctx ends
// (its error then). Without such a start it returns at once.
func (h *Hands) WaitAgent(ctx context.Context) error {
	if h.agentDone == nil {
		return nil
	}
	select {
	case <-h.agentDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startAgent starts the agent in the background while r serves, and
// switches to it once its channel answers; a failed start keeps r, and is
// logged. Close stops the start.
func (h *Hands) startAgent(ctx context.Context, opts Options, r *route) {
	ch := h.newChannel(opts)
	h.cur.Store(r)
	h.agentCh = ch
	done := make(chan struct{})
	h.agentDone = done
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.agentStop = cancel
	guard.Go(func() {
		defer close(done)
		defer cancel()
		if err := openAgent(ctx, ch, opts.agentHook); err != nil {
			ch.Close()
			if ctx.Err() != nil { // Close stopped it
				h.log.Debug("hands: the agent's start was stopped", "err", err)
				return
			}
			h.log.Warn("hands: agent channel did not start; falling back", "via", r.via, "err", err)
			return
		}
		h.cur.Store(h.agentRoute(ch))
		h.log.Debug("hands: the agent is up; operations go through it", "was", r.via)
	}, func(err error) { h.log.Error("hands: starting the agent", "err", err) })
}

// openAgent opens ch in the background start, after hook (Options's, set
// by tests: it may block, or fail the start).
func openAgent(ctx context.Context, ch *agent.Channel, hook func(context.Context) error) error {
	if hook != nil {
		if err := hook(ctx); err != nil {
			return err
		}
	}
	return ch.Open(ctx)
}
