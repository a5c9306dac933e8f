package e2b_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// newBox makes a box, destroyed when t ends.
func newBox(t *testing.T, p providers.Provider, spec providers.Spec) providers.Box {
	t.Helper()
	b, err := p.Create(ctx(t), spec)
	require.NoError(t, err)
	t.Cleanup(func() { b.Destroy(context.Background()) })
	return b
}

// run runs req, which must exit 0, and returns its stdout.
func run(t *testing.T, b providers.Box, req providers.ExecRequest) string {
	t.Helper()
	var out, errb bytes.Buffer
	req.Stdout, req.Stderr = &out, &errb
	p, err := b.Exec(ctx(t), req)
	require.NoError(t, err)
	code, err := p.Wait()
	require.NoError(t, err)
	require.Equal(t, 0, code, "stderr: %s", errb.String())
	return out.String()
}

// lines collects output and waits for whole lines of it.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) wait(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		ls := strings.Split(l.buf.String(), "\n")
		l.mu.Unlock()
		if len(ls) > n {
			return ls[:n]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("fewer than %d lines of output in 30 s", n)
	return nil
}

func waitWithin(t *testing.T, p providers.Process, d time.Duration) (int, error) {
	t.Helper()
	type res struct {
		code int
		err  error
	}
	c := make(chan res, 1)
	go func() { code, err := p.Wait(); c <- res{code, err} }()
	select {
	case r := <-c:
		return r.code, r.err
	case <-time.After(d):
		t.Fatalf("Wait did not return within %v", d)
		return 0, nil
	}
}

// alive reports whether a process of this machine (the fake runs
// sandboxes' processes here) is alive and not a zombie.
func alive(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	s = s[strings.LastIndexByte(s, ')')+1:]
	f := strings.Fields(s)
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
