package fake

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Ops are the op names calls are recorded and matched under: the method
// names, except that Files.Create is "CreateFile" (Create makes a box) and
// Process.Kill is "Kill".
var Ops = []string{
	// Provider
	"Create", "Attach", "List", "Suspend", "Resume", "Snapshot",
	// Box
	"Facts", "Exec", "Status", "Destroy", "Kill",
	// Files, Walker, Archiver, PathStater
	"Stat", "Lstat", "ReadDir", "ReadFile", "ReadAt", "WriteFile", "WriteAt",
	"CreateFile", "Mkdir", "Remove", "Rmdir", "Rename", "Chmod", "Chown",
	"Utimes", "Truncate", "Symlink", "Readlink", "Link", "Statfs", "Fsync",
	"Walk", "PutArchive", "GetArchive", "StatPath",
}

// Match selects the calls a Rule applies to. An empty field matches
// anything.
type Match struct {
	Op    string // one of Ops
	Box   string // the box's id
	Argv0 string // Exec: argv[0], or its base name ("sh" matches "/bin/sh")
	Path  string // file ops: the path exactly as given (Rename, Link: the old name)
}

func (m Match) matches(c *Call) bool {
	if m.Op != "" && m.Op != c.Op || m.Box != "" && m.Box != c.Box || m.Path != "" && m.Path != c.Path {
		return false
	}
	if m.Argv0 != "" {
		if len(c.Argv) == 0 || c.Argv[0] != m.Argv0 && path.Base(c.Argv[0]) != m.Argv0 {
			return false
		}
	}
	return true
}

// Rule is a scripted outcome for the calls a Match selects, made by
// Provider.On. Its methods set what happens and return the rule, so they
// chain:
//
//	p.On(fake.Match{Op: "Exec", Argv0: "cat"}).Delay(time.Second).Fail(providers.Unavailable).Once()
//
// The first rule (in the order they were made) that matches a call and has
// uses left applies to it; the others do not. A rule applies always unless
// Once or Times limits it. A delay comes first, then a stall, then a hang,
// then a failure.
type Rule struct {
	p     *Provider
	match Match
	left  int // uses left; -1 unlimited
	hits  int
	out   outcome
}

// outcome is what a rule does to one call.
type outcome struct {
	code     providers.Code
	errno    syscall.Errno
	delay    time.Duration
	hang     bool
	stall    <-chan struct{} // Stall: blocks, whatever ctx does, until closed
	truncate int             // Exec: stdout bytes delivered before the rest is lost; -1 all
	loseEOF  bool
	goneMid  bool
	leaveBox bool
}

var noOutcome = outcome{truncate: -1}

// On adds a rule for the calls m selects. It panics on an op not in Ops.
func (p *Provider) On(m Match) *Rule {
	if m.Op != "" && !slices.Contains(Ops, m.Op) {
		panic(fmt.Sprintf("fake: On with unknown op %q (ops: %v)", m.Op, Ops))
	}
	r := &Rule{p: p, match: m, left: -1, out: noOutcome}
	p.mu.Lock()
	p.rules = append(p.rules, r)
	p.mu.Unlock()
	return r
}

// ClearRules removes every rule.
func (p *Provider) ClearRules() {
	p.mu.Lock()
	p.rules = nil
	p.mu.Unlock()
}

func (r *Rule) set(f func(o *outcome)) *Rule {
	r.p.mu.Lock()
	f(&r.out)
	r.p.mu.Unlock()
	return r
}

func (r *Rule) onlyFor(method string, ops ...string) {
	if r.match.Op != "" && !slices.Contains(ops, r.match.Op) {
		panic(fmt.Sprintf("fake: Rule.%s applies to %v, not to %q", method, ops, r.match.Op))
	}
}

// Fail makes the call fail with code (as an *providers.Error whose Op is
// "fake.<op>"). On Exec, Exec itself fails and the program never starts.
func (r *Rule) Fail(code providers.Code) *Rule {
	return r.set(func(o *outcome) { o.code = code })
}

// FailErrno makes a file op fail as the box's file system would with errno
// (ENOSPC, EACCES ...): the error's code comes from the errno, which is its
// cause.
func (r *Rule) FailErrno(errno syscall.Errno) *Rule {
	return r.set(func(o *outcome) { o.errno = errno; o.code = providers.CodeOfErrno(errno) })
}

// Delay makes the call wait d on the fake clock before it goes ahead (or
// fails, with Fail). If ctx ends first the call returns Aborted or Timeout.
func (r *Rule) Delay(d time.Duration) *Rule {
	return r.set(func(o *outcome) { o.delay = d })
}

// Hang makes the call block until its ctx ends; it then returns Aborted
// (cancelled) or Timeout (deadline passed). Nothing else ends it.
func (r *Rule) Hang() *Rule {
	return r.set(func(o *outcome) { o.hang = true })
}

// Stall makes the call block until release is closed, whatever its ctx
// does: a provider stuck in a call that ignores its deadline, for testing
// the bounds the layers above keep on their own. After release the call
// goes on (a Fail set too then applies).
func (r *Rule) Stall(release <-chan struct{}) *Rule {
	return r.set(func(o *outcome) { o.stall = release })
}

// TruncateStdout lets only the first n bytes of an Exec's stdout reach the
// caller; the rest is lost without a word, and the exit code still arrives,
// as from a transport that drops the tail of a stream.
func (r *Rule) TruncateStdout(n int) *Rule {
	r.onlyFor("TruncateStdout", "Exec")
	return r.set(func(o *outcome) { o.truncate = max(n, 0) })
}

// DropStdout loses all of an Exec's stdout, silently: TruncateStdout(0).
func (r *Rule) DropStdout() *Rule { return r.TruncateStdout(0) }

// LoseStdinEOF makes an Exec's program never see the end of its stdin: it
// gets every byte the caller sends, and then a read blocks until the
// command is killed or its ctx ends.
func (r *Rule) LoseStdinEOF() *Rule {
	r.onlyFor("LoseStdinEOF", "Exec")
	return r.set(func(o *outcome) { o.loseEOF = true })
}

// GoneMidExec makes the box vanish while an Exec's program runs: at the
// program's first write to stdout or stderr (after that write reaches the
// caller) or when it returns, whichever comes first. Wait returns Gone, and
// the box is gone from then on (Status Gone, Attach NotFound).
func (r *Rule) GoneMidExec() *Rule {
	r.onlyFor("GoneMidExec", "Exec")
	return r.set(func(o *outcome) { o.goneMid = true })
}

// CreateFailsLeavingBox makes Create make the box and then fail with the
// rule's Fail code (OutcomeUnknown if none), with the error's Box set to the
// id of the box left behind, as the Provider contract asks. The box runs
// and is listed.
func (r *Rule) CreateFailsLeavingBox() *Rule {
	r.onlyFor("CreateFailsLeavingBox", "Create")
	return r.set(func(o *outcome) { o.leaveBox = true })
}

// Once limits the rule to the next matching call.
func (r *Rule) Once() *Rule { return r.Times(1) }

// Times limits the rule to the next n matching calls.
func (r *Rule) Times(n int) *Rule {
	r.p.mu.Lock()
	r.left = n
	r.p.mu.Unlock()
	return r
}

// Hits returns how many calls the rule has applied to.
func (r *Rule) Hits() int {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	return r.hits
}

// script returns the outcome for the call: that of the first live rule
// matching it.
func (p *Provider) script(rec *record) outcome {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.left == 0 || !r.match.matches(&rec.Call) {
			continue
		}
		if r.left > 0 {
			r.left--
		}
		r.hits++
		return r.out
	}
	return noOutcome
}

var errScripted = errors.New("scripted failure")

// before runs the parts of an outcome that come before the call does its
// work: the delay, the hang and, unless the call fails only after its
// work (Create leaving a box), the failure.
func (o outcome) before(ctx context.Context, clk *Clock, op string, c *Call) error {
	if o.delay > 0 {
		if err := clk.Sleep(ctx, op, o.delay); err != nil {
			return err
		}
	}
	if o.stall != nil {
		<-o.stall
	}
	if o.hang {
		<-ctx.Done()
		return ctxError(ctx, op)
	}
	if o.code != 0 && !o.leaveBox {
		return o.failure(op, c)
	}
	return nil
}

func (o outcome) failure(op string, c *Call) *providers.Error {
	if o.errno != 0 {
		return providers.PathError(op, c.Box, c.Path, o.errno)
	}
	return &providers.Error{Code: o.code, Op: op, Box: c.Box, Path: c.Path, Err: errScripted}
}
