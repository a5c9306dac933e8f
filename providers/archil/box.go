package archil

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// The disk's layout. A command works in boxes/<id>/; boxfs's own files
// for the box are elsewhere, so that no command's checkout covers them.
const (
	boxesDir   = "boxes"         // boxes/<id>/: the box's directory, its workspace
	cmdsDir    = "boxes.cmds"    // boxes.cmds/<id>/: its commands' output, status and checkout lock
	recordsDir = "boxes.records" // boxes.records/<id>.json: its record
	recordMax  = 1 << 20         // the most bytes of a record read
)

func recordKey(id string) string { return recordsDir + "/" + id + ".json" }

// record is a box's record on the disk.
type record struct {
	ID      string            `json:"id"`
	Labels  map[string]string `json:"labels"`
	Created time.Time         `json:"createdAt"`
	Ends    time.Time         `json:"endsAt"`
	// Measured in the box when it was made: where a command's container
	// mounts the disk, its architecture and its shell.
	Root  string `json:"root,omitempty"`
	Arch  string `json:"arch,omitempty"`
	Shell string `json:"shell,omitempty"`
}

func limitReader(r io.Reader, n int64) io.Reader { return io.LimitReader(r, n) }

// boxState is what every Box value of one box shares in this process: the
// queue of its commands and uploads, and its count of billed calls.
type boxState struct {
	mu      sync.Mutex
	tail    chan struct{} // closed when the last turn handed out ends
	calls   atomic.Int64
	ended   atomic.Bool // destroyed or found ended by this process
	removed atomic.Bool // Destroy ran in this process
}

func newBoxState() *boxState {
	c := make(chan struct{})
	close(c)
	return &boxState{tail: c}
}

// take hands out the next turn, in call order: start is closed when the
// turn begins, and release (idempotent) ends it.
func (s *boxState) take() (start <-chan struct{}, release func()) {
	s.mu.Lock()
	prev := s.tail
	mine := make(chan struct{})
	s.tail = mine
	s.mu.Unlock()
	var once sync.Once
	return prev, func() { once.Do(func() { close(mine) }) }
}

// turn waits for the next turn; when ctx ends first, the turn is given up
// (passed on once it comes) and ctx's error returned.
func (s *boxState) turn(ctx context.Context) (func(), error) {
	start, release := s.take()
	select {
	case <-start:
		return release, nil
	case <-ctx.Done():
		go func() { <-start; release() }()
		return nil, ctx.Err()
	}
}

// Box is one directory of the work disk.
//
// Besides providers.Box it serves, through the object API: ReadFile and
// ReadAt of files in the workspace (GET, with a Range), WriteFile and
// WriteAt (an upload, then one command that puts it in place), and
// PutArchive and GetArchive (a tar uploaded or made by one command, then
// moved as one object). Mutations outside the workspace are refused: they
// would land in a command's throwaway container or in another box. Other
// file operations, and any the object API cannot settle exactly, answer
// Unsupported, so that a caller (hands) runs its scripts, one command each.
type Box struct {
	p    *Provider
	disk string
	id   string
	rec  record
	st   *boxState
}

var (
	_ providers.Box         = (*Box)(nil)
	_ providers.Archiver    = (*Box)(nil)
	_ providers.CallCounter = (*Box)(nil)
)

func (p *Provider) newBox(disk string, rec record) *Box {
	return &Box{p: p, disk: disk, id: rec.ID, rec: rec, st: p.state(rec.ID)}
}

// ID returns the box's id.
func (b *Box) ID() string { return b.id }

// Labels returns the box's labels.
func (b *Box) Labels() map[string]string {
	out := make(map[string]string, len(b.rec.Labels))
	for k, v := range b.rec.Labels {
		out[k] = v
	}
	return out
}

// BilledCalls returns how many exec calls this process has made for the
// box (its commands, its file operations, its create and removal): the
// platform bills each.
func (b *Box) BilledCalls() int64 { return b.st.calls.Load() }

// workspace is the box's directory as a command sees it.
func (b *Box) workspace() string { return b.rec.Root + "/" + boxesDir + "/" + b.id }

func (b *Box) expired() bool { return !b.p.now().Before(b.rec.Ends) }

func (b *Box) putRecord(ctx context.Context) error {
	data, err := json.Marshal(b.rec)
	if err != nil {
		return err
	}
	return b.p.c.putObject(ctx, b.disk, recordKey(b.id), bytes.NewReader(data), int64(len(data)))
}

// check looks at the box before a call: one destroyed or ended by this
// process is Gone at once; otherwise its record is read, and a box whose
// record is gone, or whose lifetime has passed (it is ended now), is Gone.
func (b *Box) check(ctx context.Context, op string) error {
	if b.st.ended.Load() {
		return providers.Errorf(providers.Gone, op, "the box has ended").WithBox(b.id)
	}
	rec, err := b.p.readRecord(ctx, b.disk, b.id)
	if statusOf(err) == http.StatusNotFound {
		b.st.ended.Store(true)
		return providers.Errorf(providers.Gone, op, "the box's record is gone: it was destroyed").WithBox(b.id)
	}
	if err != nil {
		return wrap(op, b.id, err)
	}
	b.rec = rec
	return b.checkLifetime(ctx, op)
}

// checkLifetime ends a box past its lifetime (Gone); it makes no call
// otherwise.
func (b *Box) checkLifetime(ctx context.Context, op string) error {
	if b.st.ended.Load() {
		return providers.Errorf(providers.Gone, op, "the box has ended").WithBox(b.id)
	}
	if b.expired() {
		b.endLazily(ctx, true)
		return providers.Errorf(providers.Gone, op, "the box ended at %s, its lifetime", b.rec.Ends.Format(time.RFC3339)).WithBox(b.id)
	}
	return nil
}

// endLazily ends a box found past its lifetime: as Destroy, with a bound
// of its own, logging rather than returning a failure. A caller in this
// process's turn (a command that found it) does not wait for the turn.
func (b *Box) endLazily(ctx context.Context, waitTurn bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	b.p.log.Info("archil: ending a box past its lifetime", "box", b.id, "ends", b.rec.Ends)
	if err := b.destroy(ctx, waitTurn); err != nil {
		b.p.log.Warn("archil: ending a box past its lifetime", "box", b.id, "err", err)
	}
}

// Facts reports the box, from its record: what was measured when it was
// made, and what every command gets (a VM of its own, of the platform's
// size, with the platform's limit on its time; no process outlives it).
func (b *Box) Facts(ctx context.Context) (providers.Facts, error) {
	const op = "archil.Facts"
	if err := b.check(ctx, op); err != nil {
		return providers.Facts{}, err
	}
	return providers.Facts{
		Provider:      Name,
		ID:            b.id,
		Isolation:     providers.IsolationMicroVM,
		OS:            "linux",
		Arch:          b.rec.Arch,
		Workspace:     b.workspace(),
		Shell:         b.rec.Shell,
		CPUs:          maxCPUs,
		MemoryMB:      maxMemoryMB,
		Ports:         []int{},
		LiveProcesses: providers.Bool(false),
		Stdin:         providers.Bool(false),
		StartedAt:     b.rec.Created,
		MaxExecMs:     int(b.p.maxExec / time.Millisecond),
		// Every box of the work disk can read and write this one's files.
		FilesSharedWith: providers.SharedDisk,
	}, nil
}

// Status reads the box's record: a box destroyed, or ended by its
// lifetime (which this call then carries out), is Gone.
func (b *Box) Status(ctx context.Context) (providers.Status, error) {
	const op = "archil.Status"
	if err := b.check(ctx, op); err != nil {
		return providers.Status{}, err
	}
	return providers.Status{State: providers.StateRunning, StartedAt: b.rec.Created}, nil
}

// Destroy ends the box: it deletes the record first, which ends it for
// every client at once (a running command's wrapper sees it gone and kills
// the command), then removes the box's directories in one command. A
// directory left behind by a failure there is removed by a later List.
func (b *Box) Destroy(ctx context.Context) error { return b.destroy(ctx, true) }

func (b *Box) destroy(ctx context.Context, waitTurn bool) error {
	const op = "archil.Destroy"
	b.st.ended.Store(true)
	if b.st.removed.Swap(true) {
		return nil
	}
	if err := b.p.c.deleteObject(ctx, b.disk, recordKey(b.id)); err != nil {
		b.st.removed.Store(false)
		return wrap(op, b.id, err)
	}
	// Wait (bounded) for this process's own commands to see the record
	// gone, so that the removal does not race them.
	if waitTurn {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		release, err := b.st.turn(wctx)
		cancel()
		if err == nil {
			release()
		}
	}
	// Each directory is checked out before it is removed, as a shared
	// disk needs; a command still running there holds it for a moment.
	dirs := boxesDir + "/" + b.id + " " + cmdsDir + "/" + b.id
	script := ownScript + "for i in 1 2 3 4 5; do own " + dirs + " && rm -rf -- " + dirs + " && exit 0; sleep 1; done; exit 1"
	if _, err := b.p.maintain(ctx, b.disk, b.st, op, script); err != nil {
		b.p.log.Warn("archil: the box's directory stays until a List sweeps it", "box", b.id, "err", err)
	}
	return nil
}
