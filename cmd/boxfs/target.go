package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
)

// target is where a command's box operations go: through the files of the
// mount serving the state directory (dogfooding the namespace), or, when
// nothing is mounted, to the namespace driven directly in this process.
type target struct {
	e *env

	// Mounted.
	mnt string
	pid int

	// Direct.
	m    *boxes.Manager
	lock *stateLock
}

func (t *target) mounted() bool { return t.mnt != "" }

// mountStartWait is how long a command waits for a mount that holds the
// state directory's lock to answer (it may be starting).
const mountStartWait = 10 * time.Second

// open finds the mount serving the state directory, or opens the
// namespace directly under a shared lock. A state directory held by a
// mount that does not answer is an error naming it.
func (e *env) open(ctx context.Context) (*target, error) {
	if err := e.makeStateDir(); err != nil {
		return nil, err
	}
	lock, err := lockState(e.state, false)
	if err == nil {
		opts, err := e.boxOptions(false)
		if err != nil {
			lock.release()
			return nil, err
		}
		f, err := boxes.New(opts)
		if err != nil {
			lock.release()
			return nil, err
		}
		return &target{e: e, m: f, lock: lock}, nil
	}
	if !errors.Is(err, errLocked) {
		return nil, err
	}
	t, err := e.findMount(ctx)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// findMount finds the mount holding the state directory's lock.
func (e *env) findMount(ctx context.Context) (*target, error) {
	deadline := time.Now().Add(mountStartWait)
	var rec mountRecord
	var err error
	for {
		rec, err = readMountRecord(e.state)
		if err == nil && pidAlive(rec.PID) && answers(rec.Mountpoint, answerWait) {
			return &target{e: e, mnt: rec.Mountpoint, pid: rec.PID}, nil
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, providers.Errorf(providers.Refused, "boxfs", "state directory %s is held by another boxfs process (a mount starting or stopping?) and has no mount record", e.state)
	}
	return nil, providers.Errorf(providers.Refused, "boxfs", "state directory %s is held by the mount at %s (pid %d), which does not answer; `boxfs umount %s` ends it", e.state, rec.Mountpoint, rec.PID, rec.Mountpoint)
}

// close ends the target: in direct mode, closes the channels to the boxes
// (pushing nothing: direct mode has no cache) and releases the lock.
func (t *target) close() {
	if t.m != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.m.Shutdown(ctx)
		cancel()
	}
	t.lock.release()
}

// path is a name in the mount.
func (t *target) path(elem ...string) string {
	return filepath.Join(append([]string{t.mnt}, elem...)...)
}

// boxDir is the mounted box's directory; NotFound when there is no box name.
func (t *target) boxDir(name string) (string, error) {
	if err := boxes.CheckName(name); err != nil {
		return "", err
	}
	dir := t.path(name)
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", providers.Errorf(providers.NotFound, "boxfs", "no box named %q", name).WithBox(name)
		}
		return "", providers.E(0, "boxfs", err).WithBox(name)
	}
	return dir, nil
}

// writeCtl writes one message to a ctl file of the mount. A refused write
// becomes an error with the errno's code and the text the namespace kept
// in errFile (MOUNT/err or MOUNT/NAME/err).
func (t *target) writeCtl(ctl, errFile, box, msg string) error {
	f, err := os.OpenFile(ctl, os.O_WRONLY, 0)
	if err != nil {
		return mountErr(err, "", box)
	}
	_, err = f.Write([]byte(msg + "\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return mountErr(err, errFile, box)
	}
	return nil
}

// mountErr turns an error of a file operation on the mount into one with a
// code (from the errno) and the namespace's own words (from errFile).
func mountErr(err error, errFile, box string) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return providers.E(0, "boxfs", err).WithBox(box)
	}
	code := providers.CodeOfErrno(errno)
	if errFile != "" {
		if b, rerr := os.ReadFile(errFile); rerr == nil {
			if text := strings.TrimSpace(string(b)); text != "" {
				return &namespaceError{code: code, box: box, text: text}
			}
		}
	}
	return providers.E(code, "boxfs", err).WithBox(box)
}

// namespaceError is an error the mount reported: its text is the
// namespace's err file, its code the errno's.
type namespaceError struct {
	code providers.Code
	box  string
	text string
}

func (e *namespaceError) Error() string { return e.text }

// Unwrap gives CodeOf and errors.Is the code.
func (e *namespaceError) Unwrap() error {
	return providers.E(e.code, "", nil).WithBox(e.box)
}

// readAll reads a file of the mount.
func readAll(name, errFile, box string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, mountErr(err, errFile, box)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, mountErr(err, errFile, box)
	}
	return b, nil
}

// ctlQuote quotes a word of a ctl message when it needs it: the ctl
// tokenizer takes '...' and "..." (with \ escapes).
func ctlQuote(w string) string {
	if w != "" && !strings.ContainsAny(w, " \t'\"\\") {
		return w
	}
	if !strings.Contains(w, "'") {
		return "'" + w + "'"
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(w) + `"`
}

// ctlQuotePair quotes the value of a key=value word.
func ctlQuotePair(p string) string {
	k, v, ok := strings.Cut(p, "=")
	if !ok {
		return ctlQuote(p)
	}
	if v == "" || strings.ContainsAny(v, " \t'\"\\") {
		return k + "=" + ctlQuote(v)
	}
	return p
}

// needName checks a command's box-name argument.
func needName(args []string, cmd string, n int) (string, error) {
	if len(args) < 1 {
		return "", usagef("%s: a box name is needed (see boxfs %s --help)", cmd, cmd)
	}
	if n >= 0 && len(args) != n {
		return "", usagef("%s: takes %d argument(s), got %d: %s (see boxfs %s --help)", cmd, n, len(args), strings.Join(args, " "), cmd)
	}
	if err := boxes.CheckName(args[0]); err != nil {
		return "", usagef("%s: %v", cmd, specError(err))
	}
	return args[0], nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
