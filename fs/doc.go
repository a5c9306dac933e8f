// Package fs presents the boxes a boxes.Manager keeps as a FUSE file
// system: go-fuse nodes for the namespace's root, each box's control
// files and commands, and its work tree.
//
// # Namespace
//
// New makes the namespace over a Manager and Mount serves it through the
// kernel. The root holds ctl (new, attach, forget; read: one line per box)
// and err, and one directory per box, made by `new` or mkdir. A box's
// directory holds ctl (destroy, release, flush, sync, kill, suspend,
// resume, snapshot, launch; read: one key=value status line), exec, cmds/,
// launch/, facts.json, receipt.json, snapshots, err and work/. Control
// files and the work tree never share a directory.
//
// # Control files
//
// A control message is a newline-terminated line of words, several per
// write; every message of a write is parsed before any runs, and one bad
// message fails the whole write with EINVAL. Reads render the file once
// per open, so reads at any offset see one snapshot; control files use
// direct I/O. A failure's text is kept in the nearest err file, since an
// errno alone loses it.
//
// A control message is acted on once its newline came, however the
// kernel split its write (a last one without a newline at close); one
// past its limit is refused whole with E2BIG. Nothing the namespace
// holds itself can be removed or renamed.
//
// # Permissions
//
// The kernel checks every request against the attributes reported
// (default_permissions): the namespace's own files belong to the user who
// mounted (control files 0600 or 0400, shared with a group given at
// mount), work/ shows the box's owners and modes, and what another user
// makes in work/ is made theirs in the box (owner.go).
//
// # Commands
//
// A write of one line to exec starts a command (the box's Commands); a
// read on the same open follows its output to the end. cmds/N/ keeps each
// command's line, output, status and a ctl that kills it.
//
// # Launches
//
// launch/PROG/ is a program the box keeps alive (package launch, driven by
// the box's manager): ctl (start, stop, restart, remove; read: a status line),
// state (JSON), out.log (followed while the launch runs), and the
// write-only secrets and stdin, held in memory for the next start.
//
// # Work tree
//
// work/ is the box's workspace, served through the box's cache: every
// operation runs within the box's bounds (boxes.Box.Do), and the kernel is
// told to drop what it holds of paths the box changed behind it (after a
// command, at sync, or as a watch reports). Inode numbers stay the same
// for a path across remounts of the same box.
//
// # Errors
//
// Errors reach the kernel through one table from providers codes to
// errnos (toErrno); a box-side errno is answered as is where it is the
// more exact answer.
//
// # Bounds
//
// Every request is answered within its bound (MountOptions.RequestBound,
// default 5 minutes) whatever a box or a lock does: the kernel talks to
// a wrapper of go-fuse's node bridge (bound.go) that runs each request's
// work on a goroutine of its own and, past the bound, answers ETIMEDOUT
// and logs the daemon's goroutines while the work goes on. A node whose
// request waits by design (a read that follows output) lifts its bound.
package fs
