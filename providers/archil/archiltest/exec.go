package archiltest

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"time"

	"golang.org/x/sys/unix"
)

// shim is the "archil" program a command finds first on its PATH: the
// client's checkout and checkin, modelled with one entry per checkout in
// the fake's co/ directory ("<client>.<n>" holding the disk-relative path),
// under a lock.
const shim = `#!/bin/bash
set -u
cmd=${1-}
case $cmd in checkout | checkin) ;; *)
	echo "archil: $cmd: not modelled by archiltest" >&2
	exit 2
	;;
esac
[ $# -eq 2 ] || { echo "usage: archil $cmd PATH" >&2; exit 2; }
p=$(realpath -m -- "$2")
rel=${p#"$ARCHILTEST_ROOT"/}
if [ "$rel" = "$p" ]; then
	echo "archil: $2 is not on an Archil disk" >&2
	exit 1
fi
co=$ARCHILTEST_STATE/co
exec 9>"$ARCHILTEST_STATE/co.lock"
flock 9
if [ "$cmd" = checkin ]; then
	for f in "$co/$ARCHILTEST_CLIENT".*; do
		[ -f "$f" ] && [ "$(cat "$f")" = "$rel" ] && rm -f "$f"
	done
	exit 0
fi
for f in "$co"/*; do
	[ -f "$f" ] || continue
	case ${f##*/} in "$ARCHILTEST_CLIENT".*) continue ;; esac
	o=$(cat "$f")
	case $rel/ in "$o"/*) echo "archil: $2 is owned by another client" >&2; exit 1 ;; esac
	case $o/ in "$rel"/*) echo "archil: $2 is owned by another client" >&2; exit 1 ;; esac
done
printf %s "$rel" > "$co/$ARCHILTEST_CLIENT.$$"
printf '%s\n' "$rel" >> "$ARCHILTEST_STATE/hist/$ARCHILTEST_CLIENT"
`

// run is one command running in a fake container.
type run struct {
	disk   string
	client string
	cmd    *exec.Cmd
	once   sync.Once
	// Shared mode: what may change on the disk while the command runs,
	// besides what its own checkouts cover (guarded by Server.mu).
	before map[string]fileState // the disk when it began
	others []string             // paths other containers checked out or made, ended meanwhile
	s3     []string             // keys the object API wrote or deleted meanwhile
	made   []string             // directories made while it ran
}

// kill ends every process of the command's session (bash runs as a
// session leader, and job control moves its jobs to groups of their own
// within it): the container goes away.
func (r *run) kill() {
	r.once.Do(func() {
		if r.cmd.Process == nil {
			return
		}
		sid := r.cmd.Process.Pid
		syscall.Kill(-sid, syscall.SIGKILL)
		for range 3 {
			ents, _ := os.ReadDir("/proc")
			for _, e := range ents {
				pid, err := strconv.Atoi(e.Name())
				if err != nil {
					continue
				}
				if s, err := unix.Getsid(pid); err == nil && s == sid {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
}

// readAll reads a command's output file from its start.
func readAll(f *os.File) string {
	b, _ := os.ReadFile(f.Name())
	return string(b)
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request, id string) {
	d := s.lookup(w, id)
	if d == nil {
		return
	}
	var req struct {
		Command string `json:"command"`
	}
	if err := readJSON(r, &req); err != nil || req.Command == "" {
		envelopeError(w, http.StatusBadRequest, "command is required")
		return
	}
	if !strings.HasPrefix(s.opts.Region, "aws-") {
		envelopeError(w, http.StatusBadRequest, "Exec is not enabled")
		return
	}
	start := time.Now()
	if s.opts.QueueLatency > 0 {
		t := time.NewTimer(s.opts.QueueLatency)
		select {
		case <-r.Context().Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	queued := time.Since(start)
	s.execs.Add(1)
	stdout, err1 := os.CreateTemp(s.state, "out-")
	stderr, err2 := os.CreateTemp(s.state, "err-")
	if err1 != nil || err2 != nil {
		envelopeError(w, http.StatusInternalServerError, "the runtime could not start the command")
		return
	}
	defer func() {
		stdout.Close()
		stderr.Close()
		os.Remove(stdout.Name())
		os.Remove(stderr.Name())
	}()
	cmd := exec.Command("/bin/bash", "-c", req.Command)
	cmd.Dir = d.Dir
	client := "c" + randHex(8)
	cmd.Env = []string{
		"PATH=" + filepath.Join(s.state, "bin") + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "LANG=C.UTF-8",
		"ARCHILTEST_STATE=" + s.state, "ARCHILTEST_ROOT=" + d.Dir, "ARCHILTEST_CLIENT=" + client,
	}
	// Files, not pipes: the answer comes when bash exits, whatever its
	// children still hold open.
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// The container counts as running from before the disk is first
	// looked at, so that every object write meanwhile is noted for it.
	ru := &run{disk: id, client: client, cmd: cmd}
	s.mu.Lock()
	s.running[client] = ru
	s.mu.Unlock()
	if s.opts.SharedMode {
		before := snapshot(d.Dir)
		s.mu.Lock()
		ru.before = before
		s.mu.Unlock()
	}
	if err := cmd.Start(); err != nil {
		s.release(client)
		envelopeError(w, http.StatusInternalServerError, "the runtime could not start the command")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ExecLimit)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	timedOut := false
	select {
	case err = <-done:
	case <-ctx.Done():
		timedOut = true
		ru.kill()
		err = <-done
	}
	cancel()
	ru.kill() // the container is released with whatever it left running
	var unowned []string
	if s.opts.SharedMode {
		unowned = s.unowned(ru, snapshot(d.Dir))
	}
	s.release(client)
	ran := time.Since(start) - queued
	if timedOut {
		envelopeError(w, http.StatusGatewayTimeout, "Command timed out")
		return
	}
	if len(unowned) > 0 {
		s.mu.Lock()
		s.violations = append(s.violations, Violation{Disk: id, Command: req.Command, Paths: unowned})
		s.mu.Unlock()
		envelopeError(w, http.StatusForbidden, "shared mode: the command changed paths its container had not checked out: "+strings.Join(unowned, ", "))
		return
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		envelopeError(w, http.StatusInternalServerError, "the runtime lost the command")
		return
	}
	envelope(w, http.StatusOK, map[string]any{
		"exitCode": code,
		"stdout":   readAll(stdout),
		"stderr":   readAll(stderr),
		"timing": map[string]any{
			"totalMs":   time.Since(start).Milliseconds(),
			"queueMs":   queued.Milliseconds(),
			"executeMs": ran.Milliseconds(),
		},
	})
}

// release ends a container's checkouts. The paths it held and the
// directories it made are passed to every container still running, whose
// changes they may cover.
func (s *Server) release(client string) {
	held := s.history(client)
	os.Remove(filepath.Join(s.state, "hist", client))
	s.mu.Lock()
	if r := s.running[client]; r != nil {
		held = append(held, r.made...)
	}
	delete(s.running, client)
	for _, r := range s.running {
		r.others = append(r.others, held...)
	}
	s.mu.Unlock()
	matches, _ := filepath.Glob(filepath.Join(s.state, "co", client+".*"))
	for _, m := range matches {
		os.Remove(m)
	}
}

// heldByOther reports whether a running container holds key (a
// disk-relative path) or a directory above it.
func (s *Server) heldByOther(key string) bool {
	ents, err := os.ReadDir(filepath.Join(s.state, "co"))
	if err != nil {
		return false
	}
	for _, e := range ents {
		client, _, _ := strings.Cut(e.Name(), ".")
		s.mu.Lock()
		live := s.running[client] != nil
		s.mu.Unlock()
		if !live {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.state, "co", e.Name()))
		if err != nil {
			continue
		}
		if o := string(b); key == o || strings.HasPrefix(key, o+"/") {
			return true
		}
	}
	return false
}
