package fs

import (
	"context"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// patient returns the context for a work/ operation that changes nothing
// (a lookup, a stat, a listing, a read), and its release. The kernel
// interrupts a request, which cancels its context, for any signal its
// caller gets: a Go program's preemption signal, a shell's SIGCHLD, a
// terminal's SIGWINCH. A local disk never answers those calls with EINTR,
// and programs do not retry them (make, a Go program's os.Symlink that
// looked the name up first), so the operation goes on; it is given up
// only when the signal ends the caller (Ctrl-C, kill), so a dying process
// is not left waiting on a slow box. Either way the box's operation bound
// holds.
func patient(ctx context.Context) (context.Context, context.CancelFunc) {
	caller, ok := fuse.FromContext(ctx)
	if !ok || caller.Pid == 0 {
		return ctx, func() {}
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if dying(int(caller.Pid)) {
			cancel()
		}
	})
	return pctx, func() {
		stop()
		cancel()
	}
}
