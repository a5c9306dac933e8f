package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
)

const (
	// watchdogStartBound is how long Create waits for a new watchdog to
	// take charge of its box.
	watchdogStartBound = 15 * time.Second
	// watchdogPoll is how often a watchdog looks whether its box was
	// destroyed or handed to another watchdog before its deadline.
	watchdogPoll = 2 * time.Second
)

// startWatchdog starts the watchdog of the box in dir and returns its pid
// once the watchdog has written it into the box's record.
//
// The watchdog must outlive ctx and the calling process, so it is started
// with exec.Command, not CommandContext: ctx bounds only the wait for it to
// take charge. It runs in a session of its own, with stdio on /dev/null and
// no other descriptor of ours (Go opens every file close-on-exec), from /,
// with nothing of our environment but the variable that selects its mode.
func startWatchdog(ctx context.Context, dir string) (int, error) {
	sealInheritedFDs()
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{watchdogArg0, dir}
	cmd.Env = []string{watchdogEnv + "=1"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting the watchdog: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		cmd.Wait() // reap it whenever it ends, however long we live
		close(exited)
	}()
	fail := func(err error) (int, error) {
		cmd.Process.Kill()
		return 0, err
	}
	deadline := time.Now().Add(watchdogStartBound)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		if rec, err := readRecord(dir); err == nil && rec.Watchdog == pid {
			return pid, nil
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("the watchdog did not take charge of the box within %v", watchdogStartBound))
		}
		select {
		case <-exited:
			return 0, errors.New("the watchdog exited before taking charge of the box")
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(delay):
		}
	}
}

// ensureWatchdog starts a new watchdog for a running box whose watchdog is
// gone (killed, or the machine restarted).
func ensureWatchdog(ctx context.Context, dir string, rec record) error {
	if rec.Watchdog > 0 && watchdogAlive(rec.Watchdog, dir) {
		return nil
	}
	_, err := startWatchdog(ctx, dir)
	return err
}

// watchdogAlive reports whether pid is the watchdog of the box in dir.
func watchdogAlive(pid int, dir string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	return bytes.Equal(b, []byte(watchdogArg0+"\x00"+dir+"\x00"))
}

// stopWatchdog kills the box's watchdog, if pid still is it.
func stopWatchdog(pid int, dir string) {
	if watchdogAlive(pid, dir) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// watchdogMain is the watchdog process: it takes charge of the box in dir,
// sleeps until the box's deadline and ends the box. It exits early when
// the box is ended or taken over by another watchdog, and when the box's
// record disappears (Destroy, or the directory removed by other means),
// after killing whatever of the box still runs. It returns the process's
// exit status.
func watchdogMain(dir string) int {
	// Detached already (own session); a stray terminal signal must not end
	// the box's only guard before its time.
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGPIPE)
	id := filepath.Base(dir)
	if !validID(id) {
		return 2
	}
	if err := register(dir); err != nil {
		return 1
	}
	failures := 0
	for {
		rec, err := readRecord(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Destroyed, or its directory removed behind the provider's
			// back (a test's temporary directory cleaned up): either way
			// the box is gone, and so must its processes be.
			if sweep(context.Background(), id) != nil {
				return 1
			}
			return 0
		case err != nil:
			if failures++; failures > 30 {
				return 1
			}
			time.Sleep(time.Second)
			continue
		}
		if rec.State != providers.StateRunning || rec.Watchdog != os.Getpid() {
			return 0
		}
		wait := time.Until(rec.Deadline)
		if wait <= 0 {
			for attempt := 0; ; attempt++ {
				err := endBox(context.Background(), dir, id, "lifetime")
				if err == nil {
					return 0
				}
				if attempt == 5 {
					return 1
				}
				time.Sleep(time.Second)
			}
		}
		time.Sleep(min(wait, watchdogPoll))
	}
}

// register writes the watchdog's pid into the box's record.
func register(dir string) error {
	unlock, err := lockBox(context.Background(), dir, true)
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := readRecord(dir)
	if err != nil {
		return err
	}
	if rec.State != providers.StateRunning {
		return errors.New("box is not running")
	}
	rec.Watchdog = os.Getpid()
	return writeRecord(dir, rec)
}
