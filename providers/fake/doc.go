// Package fake provides a scriptable in-process provider for testing the
// layers above providers: boxes whose files live in memory and whose
// commands are Go functions, every call recorded, and failures scripted per
// call.
//
// # Boxes and files
//
// New returns a Provider registered nowhere (the package also registers a
// plain one as "fake"). A box it makes holds an in-memory file tree with an
// empty workspace (/work unless the Spec names one), /root (its HOME) and
// /tmp. The box
// implements providers.Files, Walker, Archiver and PathStater, answering
// with the errnos Linux gives for the same calls on a local file system as
// root (ENOENT, EEXIST, ENOTEMPTY, EISDIR, ENOTDIR, ELOOP after 40 links,
// EXDEV never), with inode numbers, link counts, modes under a 022 umask,
// symlinks (Stat follows them, Lstat does not), hard links, and nanosecond
// times from the fake clock. Permissions are not checked.
//
// # Programs
//
// Provider.Program registers a Go function as a command. Exec runs the
// function argv[0] names with a Proc (argv, env, dir, stdin, stdout,
// stderr, and the box's files); an unknown command exits 127. A command
// ends when its function returns; when Kill is called (exit 137); when the
// Exec's ctx ends (Wait returns Aborted or Timeout); or when the box ends
// (Gone). The function's ctx is cancelled in every case, and a function
// that ignores it is reported ended all the same.
//
// # Suspend and snapshots
//
// The provider is a providers.Suspender and Snapshotter. A suspended box
// keeps its files (Facts.Suspend is "filesystem"): its commands end (Wait
// returns TransportLost), Status says stopped, and every other call on it
// is Refused until Resume. Snapshot copies a box's tree; a box made with
// Spec.Snapshot set to its id starts with a copy of it.
//
// # Recording
//
// Calls returns every call the host made, in order, with exact argv, env
// names (never values), stdin bytes, paths and sizes. Leaks reports where a
// marker (a secret) appears in anything the host sent, env values and file
// contents included.
//
// # Scripting
//
// On(Match) returns a Rule that changes what matching calls do: Fail with a
// code, FailErrno, Delay, Hang until ctx ends, Stall until released
// (whatever ctx does), and for Exec TruncateStdout, DropStdout,
// LoseStdinEOF and GoneMidExec; for Create,
// CreateFailsLeavingBox. A rule applies always, Once or Times(n).
//
// # Time
//
// A Clock drives box lifetimes (a box whose lifetime passed is ended:
// Status says so, Exec and file calls are Gone), scripted delays and file
// times. With NewClock it stands still until the test calls Advance; the
// default RealClock follows the wall clock. A ctx deadline stays in real
// time: it is the caller's, and ends a Hang or a Delay whatever the fake
// clock says. To drive a timeout with the fake clock instead, give calls a
// ctx from Clock.WithTimeout: it ends, as DeadlineExceeded, when Advance
// passes its time.
package fake
