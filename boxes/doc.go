// Package boxes keeps the named boxes of a state directory and runs their
// lives: create, attach, forget and destroy; records; health; commands;
// spec parsing; metering hooks.
//
// # Boxes
//
// A Manager holds the boxes of one state directory by name. Each Box
// joins a provider's box to the hands that reach into it and the cache of
// its workspace, opened at first use (connect): a declared box is made
// then, a recorded one attached, and writes an earlier process journaled
// are pushed. Box names are checked by CheckName; the words of a `new`
// message (and of a configured environment) become a Spec by ParseSpec.
//
// # Health
//
// Every operation on a box runs through Do, within the operation bound.
// A failure that says the box, not the request, is in trouble (timeout,
// liveness, a lost channel) marks the box unhealthy: later calls fail fast
// until a background probe gets an answer. A box its provider reports
// ended or removed is gone, and answers Gone from then on.
//
// # Suspend and resume
//
// A box whose provider can suspend it is suspended all or nothing: with a
// command running or a file of its workspace open the suspend is refused
// (EBUSY) unless forced, which kills the commands first (they end killed,
// their readers at EOF); dirty files are pushed, the channel to the box
// closed, and the provider suspends it. The record says so, so a restart
// leaves it at rest. While suspended, a use of its workspace fails at once
// (EHOSTDOWN), or resumes it when its record says resume=auto. A resume
// reopens the workspace as for a box never seen; one that cannot is
// suspended again and says why. A snapshot saves the box's filesystem as
// an image new boxes start from, recorded in the box's snapshots.
//
// # Commands
//
// A box's Commands run command lines in the box, the running ones and the
// last hundred ended ones kept with their output in the state directory,
// so a reader can follow a command's output to its end, and find it again
// after a restart (a command running when its process ended is lost).
// The box's changes are brought into the cache before a reader sees the
// end of a command's output.
//
// # Launches
//
// A box's launches (programs its supervisor keeps alive, package launch)
// are driven through the box's hands: the agent's command stream and
// binary where the box has them, else the sh supervisor. The manager keeps
// only what has no place in the box: the names made and not started, and
// the secrets and stdin written for a launch's next start, in memory.
//
// # Views and meters
//
// The manager presents nothing itself: a View (the FUSE layer) is told of
// the changes in a workspace that the host did not make through it, and a
// Meter (the ledger) is told when a box is made, of each exec sent to it
// and when it ends.
//
// # Without a mount
//
// The CLI drives boxes directly when nothing is mounted on the state
// directory, and for bulk moves (Seed, Pull) that should not go one file
// at a time through the kernel; those paths never open a box's cache,
// which belongs to the mounted daemon.
package boxes
