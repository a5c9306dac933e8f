package fs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// boxSide plays a launch's supervisor in a fake box: what the box does is
// the test's own; what boxfs sent is in the fake's call record.
type boxSide struct {
	mu      sync.Mutex
	phase   map[string]string
	started map[string][]byte // the request lines a start read, secrets and stdin left out
}

// program is the fake's sh: it unwraps hands' command record wrapper and
// answers the launch supervisor's modes.
func (s *boxSide) program(ctx context.Context, pc *fake.Proc) int {
	argv := pc.Argv
	if len(argv) > 7 && argv[3] == "boxfs-cmd" {
		inner := make([]string, len(argv)-7)
		for i, a := range argv[7:] {
			d, err := shell.Unescape(a)
			if err != nil {
				return 2
			}
			inner[i] = d
		}
		argv = inner
	}
	if len(argv) < 9 || argv[3] != "boxfs-launch" {
		fmt.Fprintf(pc.Stderr, "sh: not a launch: %q\n", argv)
		return 2
	}
	mode, name := argv[7], argv[8]
	s.mu.Lock()
	defer s.mu.Unlock()
	state := func(phase string) {
		fmt.Fprintf(pc.Stdout, `{"name":%q,"phase":%q,"incarnation":1,"restarts":0,"lastExit":null,"pid":42,"supervisor":41,"watchdog":43,"startedAt":1,"since":1,"secrets":true,"via":"sh","reason":""}`+"\n", name, phase)
	}
	switch mode {
	case "start":
		req, _ := io.ReadAll(pc.Stdin)
		var kept []byte
		for _, l := range bytes.SplitAfter(req, []byte("\n")) {
			if !bytes.HasPrefix(l, []byte("secrets ")) && !bytes.HasPrefix(l, []byte("stdin ")) {
				kept = append(kept, l...)
			}
		}
		s.started[name] = kept
		s.phase[name] = "running"
		state("running")
	case "state", "stop":
		if s.phase[name] == "" {
			fmt.Fprintln(pc.Stderr, "boxfs-launch: no launch")
			return 81
		}
		if mode == "stop" {
			s.phase[name] = "stopped"
		}
		state(s.phase[name])
	case "list":
		for n, ph := range s.phase {
			name = n
			state(ph)
		}
	case "log":
		fmt.Fprint(pc.Stdout, "0 6\n")
		if len(argv) > 9 && argv[9] == "0" {
			fmt.Fprint(pc.Stdout, "hello\n")
		}
	default:
		return 80
	}
	return 0
}

// A secret written through launch/PROG/secrets reaches the box once: on
// the stdin of the one exec that starts the supervisor. It is nowhere else
// boxfs sends (argv, env, file contents, paths, labels) or keeps (its
// state directory, its log, err files, facts.json, the launch's files).
func TestLaunchSecretsLeakNowhere(t *testing.T) {
	marker := "mArKeR-" + providers.NewID(8)
	side := &boxSide{phase: map[string]string{}, started: map[string][]byte{}}
	p := fake.New(fake.WithFacts(func(f *providers.Facts) { f.SecretsVia = "fd" }))
	p.Program("sh", side.program)
	var logbuf bytes.Buffer
	var logMu sync.Mutex
	state := t.TempDir()
	mnt, _ := serve(t, boxes.Options{
		StateDir:        state,
		DefaultProvider: "fake",
		OpenProvider:    func(string) (providers.Provider, error) { return p, nil },
		Logger:          slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logbuf}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	require.NoError(t, os.Mkdir(filepath.Join(mnt, "b"), 0o755))
	dir := filepath.Join(mnt, "b", "launch", "web")
	require.NoError(t, os.Mkdir(dir, 0o755))

	// A bad secrets file is refused without its values in the error.
	assert.ErrorIs(t, writeFile(t, filepath.Join(dir, "secrets"), "ok=1\n"+marker+"\n"), syscall.EINVAL)
	assert.ErrorIs(t, writeFile(t, filepath.Join(dir, "secrets"), "bad-name="+marker+"\n"), syscall.EINVAL)
	require.NoError(t, writeFile(t, filepath.Join(dir, "secrets"), "API_TOKEN="+marker+"\n"))
	require.NoError(t, writeFile(t, filepath.Join(dir, "stdin"), "stdin "+marker+"\n"))
	require.NoError(t, writeFile(t, filepath.Join(dir, "ctl"), "start env.MODE=prod -- server --port 8080\n"))

	leaks := p.Leaks(marker)
	require.Len(t, leaks, 1, "the marker is sent once: %q", leaks)
	var at int
	_, err := fmt.Sscanf(leaks[0], "call %d Exec", &at)
	require.NoError(t, err, leaks[0])
	assert.True(t, strings.HasSuffix(leaks[0], ": stdin"), leaks[0])
	call := p.Calls()[at]
	assert.Contains(t, call.Argv, shell.Escape("start"), "the exec that starts the supervisor")
	assert.Contains(t, string(call.Stdin), "secrets ", "secrets travel on that stdin")
	assert.Contains(t, string(side.started["web"]), "argv server\n", "the program travels in the request")
	assert.NotContains(t, string(side.started["web"]), marker)

	// Reading every file of the launch and of the box: no marker.
	for _, f := range []string{"ctl", "state"} {
		assert.NotContains(t, readFile(t, filepath.Join(dir, f)), marker, f)
	}
	for _, f := range []string{filepath.Join(mnt, "b", "facts.json"), filepath.Join(mnt, "b", "err"), filepath.Join(mnt, "b", "ctl"), filepath.Join(mnt, "err"), filepath.Join(mnt, "ctl")} {
		assert.NotContains(t, readFile(t, f), marker, f)
	}
	_, err = os.ReadFile(filepath.Join(dir, "secrets"))
	assert.ErrorIs(t, err, syscall.EACCES)
	st, err := os.ReadFile(filepath.Join(dir, "state"))
	require.NoError(t, err)
	var parsed map[string]any
	require.NoError(t, json.Unmarshal(st, &parsed))
	require.NoError(t, writeFile(t, filepath.Join(dir, "ctl"), "stop\n"))
	assert.Equal(t, "hello\n", readFile(t, filepath.Join(dir, "out.log")), "out.log of a stopped launch ends")
	logMu.Lock()
	assert.NotContains(t, logbuf.String(), marker, "boxfs's log")
	assert.Contains(t, logbuf.String(), "launch started", "the log was written to")
	logMu.Unlock()
	filepath.WalkDir(state, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(path)
			assert.NotContains(t, string(b), marker, "state directory file %s", path)
		}
		return nil
	})
	assert.Len(t, p.Leaks(marker), 1, "nothing more was sent")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
