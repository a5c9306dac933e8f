package providers

import (
	"context"
	"io"
	"os"
	"time"
)

// Provider makes and finds boxes of one kind.
type Provider interface {
	// Name is the provider's registry name ("local", "docker").
	Name() string
	// Create makes a box from spec and returns once it runs. The spec is
	// checked first (Validate, then the fields the provider supports): a
	// field it cannot honour is Unsupported. The box carries spec.Labels plus
	// the provider's own reserved labels. A create that fails leaves no box
	// behind, or says so in its error.
	Create(ctx context.Context, spec Spec) (Box, error)
	// Attach finds the box with id again, also from another process. A box
	// that no longer exists is NotFound.
	Attach(ctx context.Context, id string) (Box, error)
	// List returns the boxes of this provider that carry every label in
	// labels (nil: every box this provider made). Ended boxes may be listed
	// while the provider still knows them.
	List(ctx context.Context, labels map[string]string) ([]Box, error)
}

// Box is one running machine.
type Box interface {
	// ID is the provider's id for the box, stable for its whole life.
	ID() string
	// Labels returns the labels the box was made with (the caller's and
	// the provider's own).
	Labels() map[string]string
	// Facts reports what the box is and has.
	Facts(ctx context.Context) (Facts, error)
	// Exec starts a command. The command ends when it exits, when Kill is
	// called, or when ctx is done: then its whole process group is killed,
	// its end confirmed, and Wait returns Aborted (ctx cancelled) or Timeout
	// (deadline passed).
	Exec(ctx context.Context, req ExecRequest) (Process, error)
	// Status reports whether the box runs. A destroyed box is Gone.
	Status(ctx context.Context) (Status, error)
	// Destroy ends every process of the box and removes it. Destroying a
	// box that is already gone is not an error. After Destroy every call on
	// the box returns Gone.
	Destroy(ctx context.Context) error
}

// State is where a box is in its life.
type State string

// Box states.
const (
	StateStarting State = "starting"
	StateRunning  State = "running"
	StateStopped  State = "stopped" // paused or stopped; may be started again
	StateEnded    State = "ended"   // its lifetime passed or it exited; cannot run again
)

// Status is a box's state.
type Status struct {
	State     State     `json:"state"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	EndedAt   time.Time `json:"endedAt,omitzero"`
	Reason    string    `json:"reason,omitempty"` // why it stopped or ended, in the provider's words
}

// ExecRequest is one command to run in a box.
type ExecRequest struct {
	// Argv is the program and its arguments, passed to the box byte for
	// byte (no shell in between unless Argv names one).
	Argv []string
	// Env is the command's whole environment on top of the box's fixed
	// base (PATH, HOME, TMPDIR). The host's environment never reaches it.
	Env map[string]string
	// Dir is the working directory; "" is the box's workspace, and a
	// relative Dir is within the workspace (WorkDir).
	Dir string
	// Stdin is read until EOF, and then the command's stdin is closed. Nil
	// means an empty stdin: the command reads EOF at once.
	Stdin io.Reader
	// Stdout and Stderr receive the command's output as it comes, each
	// from its own goroutine. Nil discards it. When both are the same
	// writer (==), the command gets one stream for both, as os/exec does, so
	// their order is kept as the command wrote it.
	Stdout, Stderr io.Writer
}

// Process is a running command.
type Process interface {
	// Wait waits for the command to end and for its output to be copied.
	// It returns the exit code (128+n when a signal n ended it) with a nil
	// error; or a typed error when the outcome is not an exit: Aborted or
	// Timeout when ctx ended it, Gone when the box went away,
	// TransportLost when the channel broke.
	Wait() (int, error)
	// Kill ends the command's whole process group and returns once the box
	// confirms none of it runs, or ctx is done. Killing an ended command is
	// not an error.
	Kill(ctx context.Context) error
}

// Files is the full set of file operations on a box's files, with box-side
// absolute paths. hands serves it for any box; a box whose provider can
// serve it without running a command (the local provider's host directory,
// the fake's memory) implements it itself. Errors are *Error with the
// box-side errno kept as the cause where there is one.
type Files interface {
	Stat(ctx context.Context, name string) (FileInfo, error)  // follows symlinks
	Lstat(ctx context.Context, name string) (FileInfo, error) // does not
	ReadDir(ctx context.Context, name string) ([]FileInfo, error)
	// ReadFile streams the whole file.
	ReadFile(ctx context.Context, name string) (io.ReadCloser, error)
	// ReadAt reads up to len(p) bytes at off; io.EOF at the end as io.ReaderAt.
	ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error)
	// WriteFile replaces name with r's bytes atomically (a temporary name in
	// the same directory, then rename): a reader in the box sees the old file
	// or the new one, never half. perm applies to a new file; an existing
	// file keeps its mode.
	WriteFile(ctx context.Context, name string, r io.Reader, perm FileMode) error
	// WriteAt writes p at off into an existing file.
	WriteAt(ctx context.Context, name string, p []byte, off int64) (int, error)
	// Create makes an empty regular file; with exclusive, an existing name is
	// Exists (EEXIST), else an existing file is truncated.
	Create(ctx context.Context, name string, perm FileMode, exclusive bool) error
	Mkdir(ctx context.Context, name string, perm FileMode) error
	Remove(ctx context.Context, name string) error // unlink; a directory is EISDIR
	Rmdir(ctx context.Context, name string) error
	// Rename moves oldname to newname, replacing newname (as rename(2)).
	Rename(ctx context.Context, oldname, newname string) error
	Chmod(ctx context.Context, name string, mode FileMode) error
	Chown(ctx context.Context, name string, uid, gid int) error // -1 leaves one unchanged
	// Utimes sets times to the nanosecond; a zero time leaves it unchanged.
	Utimes(ctx context.Context, name string, atime, mtime time.Time) error
	Truncate(ctx context.Context, name string, size int64) error
	Symlink(ctx context.Context, target, name string) error
	Readlink(ctx context.Context, name string) (string, error)
	Link(ctx context.Context, oldname, newname string) error
	Statfs(ctx context.Context, name string) (StatFS, error)
	Fsync(ctx context.Context, name string) error
}

// StatWriter is an optional part of Files: the mutations that make a file
// answer with the attributes they left (as Lstat of the name would), so a
// caller that records them spends one round trip, not two. hands implements
// it over every path, with the second call where the path has no such answer.
type StatWriter interface {
	// CreateStat is Create, then Lstat of name.
	CreateStat(ctx context.Context, name string, perm FileMode, exclusive bool) (FileInfo, error)
	// MkdirStat is Mkdir, then Lstat of name.
	MkdirStat(ctx context.Context, name string, perm FileMode) (FileInfo, error)
	// WriteFileStat is WriteFile with the attributes of o applied to the new
	// content before it takes the name, then Lstat of name.
	WriteFileStat(ctx context.Context, name string, r io.Reader, o WriteOptions) (FileInfo, error)
}

// RenameStater is an optional part of Files: a rename answered with the
// attributes it left, so that a caller recording them spends one round
// trip, not three (rename(2) moves the file's change time and both
// directories' times).
type RenameStater interface {
	// RenameStat is Rename, then Lstat of newname and of the directories
	// holding newname (dirs[0]) and oldname (dirs[1], when another); dirs
	// is shorter when the box could not say. A remote that cannot answer
	// so returns Unsupported, having renamed nothing.
	RenameStat(ctx context.Context, oldname, newname string) (fi FileInfo, dirs []FileInfo, err error)
}

// LinkAttrSetter is an optional part of Files: a symbolic link's own owner
// and times (lchown, utimensat with AT_SYMLINK_NOFOLLOW), which Chown and
// Utimes cannot set because they follow the link. It works on a dangling
// link too. Errors are as Files's: *Error with the box-side errno (ENOENT
// for a missing name, EPERM...).
type LinkAttrSetter interface {
	// Lchown sets name's own owner; -1 leaves one unchanged.
	Lchown(ctx context.Context, name string, uid, gid int) error
	// Lutimes sets name's own times to the nanosecond; a zero time leaves
	// that one unchanged.
	Lutimes(ctx context.Context, name string, atime, mtime time.Time) error
}

// CappedWalker is an optional Walker that lists a tree only when it is
// small: one round trip that renews every listing of a workspace at once,
// never by accident the listing of a huge one.
type CappedWalker interface {
	// WalkMax is Walk for a tree of at most max entries; a larger tree is
	// TooLarge, and nothing of it is returned.
	WalkMax(ctx context.Context, root string, max int) ([]FileInfo, error)
}

// KeepAliver is an optional part of Box for a provider that ends a box it
// finds idle before the box's lifetime (Daytona stops, and so deletes, a
// sandbox after 15 minutes with no activity it counts): KeepAlive tells
// it the box is in use.
type KeepAliver interface {
	KeepAlive(ctx context.Context) error
}

// CappedLister is an optional part of Files that lists a directory only
// when it is small enough to hold: a box decides how many entries a
// directory has, and the host must not hold a million of them to learn
// that it will not keep them.
type CappedLister interface {
	// ReadDirMax is ReadDir for a directory of at most max entries; a
	// larger one is TooLarge (EFBIG), and nothing of it is returned.
	ReadDirMax(ctx context.Context, name string, max int) ([]FileInfo, error)
}

// HostReader is an optional part of Files: a box whose files are the
// host's own (a local box) opens one for reading as a host file, so a
// read needs no copy. A box whose files are elsewhere says Unsupported.
type HostReader interface {
	OpenHost(ctx context.Context, name string) (*os.File, error)
}

// HostWriter is an optional part of Files: a box whose files are the
// host's own opens one for writing as a host file, so a write lands in
// the box with no copy and no push. flags are open(2)'s access mode and
// O_CREAT, O_EXCL and O_TRUNC (O_CREAT makes the file with perm exactly,
// as Create does); the file is a regular file of the box, and fi its
// attributes once opened. A box whose files are elsewhere says
// Unsupported.
type HostWriter interface {
	// HostFiles reports whether the box's files are the host's own, so
	// that OpenHostWrite can serve.
	HostFiles() bool
	OpenHostWrite(ctx context.Context, name string, flags int, perm FileMode) (f *os.File, fi FileInfo, err error)
}

// SizedReader is an optional part of Files: ReadFile of a file whose size
// the caller knows, which may then take a path that pays off only for
// large files (the provider's archive API).
type SizedReader interface {
	ReadFileSized(ctx context.Context, name string, size int64) (io.ReadCloser, error)
}

// BatchWriter is an optional part of Files: many whole files written in
// one round trip, each as StatWriter's WriteFileStat writes one (its
// content atomically, with its attributes), each answered with its own
// result. The write-behind mode pushes its batches through it.
type BatchWriter interface {
	// WriteFiles writes files in order and returns one result per file, in
	// the same order. An error means the batch as a whole failed: which of
	// its files were written is not known.
	WriteFiles(ctx context.Context, files []FileWrite) ([]FileWritten, error)
}

// FileWrite is one file of a BatchWriter's batch, or, with Dir, one
// directory: made with Options.Perm (exactly) when Make and missing (an
// existing directory is fine), then given Options' owner (Chown), mode
// (ForceMode) and times; without Make it must exist.
type FileWrite struct {
	Name      string    // box-side absolute path
	Data      io.Reader // exactly Size bytes
	Size      int64
	Options   WriteOptions
	Dir, Make bool
}

// FileWritten is what became of one file of a batch: its attributes as
// Lstat gives them after the write, or the error that left it unwritten.
type FileWritten struct {
	Info FileInfo
	Err  error
}

// SmallReader is an optional part of Files: many small files of one
// directory read whole in one round trip, each with the attributes it had
// while read, so a scan of a tree (grep -r, an indexer) need not spend a
// round trip per file.
type SmallReader interface {
	// ReadSmall reads the regular files names (base names) of dir, in that
	// order, while their sizes fit max bytes in all. A name that is missing,
	// not a regular file, too large for what is left, or changed while read
	// is left out of the answer; that is not an error.
	ReadSmall(ctx context.Context, dir string, names []string, max int) ([]SmallFile, error)
}

// SmallFile is one file a SmallReader read.
type SmallFile struct {
	Info FileInfo // Name is the base name
	Data []byte
}

// WriteOptions are the attributes a StatWriter's WriteFileStat gives the
// file it writes.
type WriteOptions struct {
	// Perm is WriteFile's perm: the mode of a new file (under the box's
	// umask); an existing file keeps its own unless ForceMode.
	Perm      FileMode
	ForceMode bool // Perm applies to an existing file too, exactly
	// Chown sets the owner to UID and GID (-1 leaves one as it is).
	Chown    bool
	UID, GID int
	// Atime and Mtime are set to the nanosecond; a zero one is left as the
	// write made it.
	Atime, Mtime time.Time
	// Exclusive: the name must be free; a file there (made since the
	// caller looked) is Exists (EEXIST) and stays as it is.
	Exclusive bool
}

// Walker lists a whole tree in one go: the listing syncengine's marks are
// made of, one round trip instead of one per directory where the box allows.
type Walker interface {
	// Walk returns every entry under root (root itself left out), parents
	// before children, siblings in byte order of their names, with Name set
	// to the entry's slash-separated path relative to root. Symlinks are
	// listed, never followed; Target is set for them.
	Walk(ctx context.Context, root string) ([]FileInfo, error)
}

// Archiver moves whole trees as tar streams, the provider's bulk path.
type Archiver interface {
	// PutArchive extracts the tar stream into the box directory dir, which
	// must exist.
	PutArchive(ctx context.Context, dir string, tar io.Reader) error
	// GetArchive returns a tar of path (a file or a directory). As Docker's
	// archive API does, member names start with path's base name.
	GetArchive(ctx context.Context, path string) (io.ReadCloser, error)
}

// PathStater stats one box path without running a command.
type PathStater interface {
	StatPath(ctx context.Context, path string) (FileInfo, error)
}

// CallCounter is an optional part of a Box whose provider bills it per
// call (an Archil box: each command is one billed exec call). It counts
// the billed calls this process has made for the box, including those its
// file operations, create and removal made, which never pass through
// Box.Exec; a ledger prices calls by it rather than by counting Execs.
type CallCounter interface {
	BilledCalls() int64
}

// Endpointer reaches a port the box listens on.
type Endpointer interface {
	Endpoint(ctx context.Context, port int) (string, error)
}
