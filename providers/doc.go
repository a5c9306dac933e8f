// Package providers defines the vocabulary every layer of boxfs uses to talk
// to a box: the Provider and Box interfaces, the Spec a box is made from, the
// Facts it reports, commands (ExecRequest, Process), native file access
// (Files, Archiver, PathStater), the typed Error with its fixed list of
// codes, and the registry of provider implementations.
//
// # Providers and boxes
//
// A Provider makes boxes (Create), finds one again by id (Attach) and lists
// boxes by labels (List). A Box runs commands (Exec), reports what it is
// (Facts) and whether it still runs (Status), and can be ended (Destroy).
// Every box has a maximum lifetime that its provider enforces with no call
// from the host. A provider refuses a Spec field it cannot honour with
// Unsupported; it never ignores one.
//
// # Optional abilities
//
// A box may also implement Files (the full set of file operations served
// without a command, e.g. the local provider's host directory), Archiver
// (put and get a tar of a directory) and PathStater (stat one path without a
// command), and a provider may implement Suspender (suspend a box and resume
// it later) and Snapshotter (save a box's filesystem as an image new boxes
// start from). A box may implement Endpointer. Callers find them by type
// assertion; core code never branches on a provider's name. Attach doubles
// as reconnect: a box is found again by its id from another process, the
// commands that ran in it when the earlier process ended left running.
//
// # Errors
//
// Every error a provider returns is an *Error, or wraps one, with a Code
// from a closed list. Callers decide by Code (CodeOf, errors.Is with the
// Err* sentinels), never by error text. A box-side errno, where known, is
// kept as the Error's cause (ErrnoOf).
package providers
