package archil_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/archil"
	"github.com/boxfs/boxfs/providers/archil/archiltest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// run runs a command line in bash and returns its stdout, failing t on
// anything but exit 0.
func run(t *testing.T, ctx context.Context, b providers.Box, line string) string {
	t.Helper()
	var out, errb bytes.Buffer
	p, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"bash", "-c", line}, Stdout: &out, Stderr: &errb})
	require.NoError(t, err)
	code, err := p.Wait()
	require.NoError(t, err, "stderr: %s", errb.String())
	require.Equal(t, 0, code, "stderr: %s", errb.String())
	return out.String()
}

// waitStarted waits until a command in box id made the file name in its
// directory: it runs, and so holds the box. (The fake runs a call's
// container before its command takes the box.)
func waitStarted(t *testing.T, srv *archiltest.Server, id, name string) {
	t.Helper()
	f := filepath.Join(srv.DiskDir(srv.DiskIDs()[0]), "boxes", id, name)
	require.Eventually(t, func() bool { _, err := os.Stat(f); return err == nil }, 30*time.Second, 10*time.Millisecond, "no command made %s", name)
}

// TestTwoHosts runs commands of one box from two provider instances, as
// two hosts would: the second host's command waits for the first's
// checkout and runs after it; its upload lands without waiting; and with a
// short queue_wait it gives up with Unavailable.
func TestTwoHosts(t *testing.T) {
	srv := archiltest.New(archiltest.Options{SharedMode: true})
	t.Cleanup(srv.Close)
	ctx := ctxT(t)
	a := open(t, srv, nil)
	bx, err := a.Create(ctx, providers.Spec{})
	require.NoError(t, err)
	t.Cleanup(func() { bx.Destroy(context.Background()) })
	b := open(t, srv, nil)
	by, err := b.Attach(ctx, bx.ID())
	require.NoError(t, err)

	first, err := bx.Exec(ctx, providers.ExecRequest{Argv: []string{"bash", "-c", "echo a-start >> log; sleep 1; echo a-end >> log"}})
	require.NoError(t, err)
	waitStarted(t, srv, bx.ID(), "log")
	// While host A's command holds the box, host B uploads a file (no
	// checkout needed) and runs a command (which waits for A's).
	f, err := by.Facts(ctx)
	require.NoError(t, err)
	w := by.(interface {
		WriteFile(context.Context, string, io.Reader, providers.FileMode) error
	})
	require.NoError(t, w.WriteFile(ctx, f.Workspace+"/uploaded", strings.NewReader("from b\n"), 0o600))
	assert.Equal(t, "a-start\na-end\n", run(t, ctx, by, "cat log; echo b >> log"), "host B's command ran before host A's ended")
	code, err := first.Wait()
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "a-start\na-end\nb\nfrom b\n", run(t, ctx, bx, "cat log uploaded"))

	// A host that may wait only 1s gives up while the other holds the box.
	c, err := archil.New(providers.Config{Options: map[string]string{"api_url": srv.URL(), "s3_url": srv.URL(), "api_key": srv.APIKey(), "disk": "work", "queue_wait": "1s"}})
	require.NoError(t, err)
	bz, err := c.Attach(ctx, bx.ID())
	require.NoError(t, err)
	long, err := bx.Exec(ctx, providers.ExecRequest{Argv: []string{"bash", "-c", "touch long; sleep 4"}})
	require.NoError(t, err)
	waitStarted(t, srv, bx.ID(), "long")
	p, err := bz.Exec(ctx, providers.ExecRequest{Argv: []string{"true"}})
	require.NoError(t, err)
	_, err = p.Wait()
	assert.Equal(t, providers.Unavailable, providers.CodeOf(err), "a command waiting past queue_wait: %v", err)
	_, err = long.Wait()
	assert.NoError(t, err)
}

// TestSharedDisk checks that facts say what a box's commands can do: read
// the files of another box on the same work disk.
func TestSharedDisk(t *testing.T) {
	srv := archiltest.New(archiltest.Options{SharedMode: true})
	t.Cleanup(srv.Close)
	ctx := ctxT(t)
	p := open(t, srv, nil)
	one, err := p.Create(ctx, providers.Spec{})
	require.NoError(t, err)
	t.Cleanup(func() { one.Destroy(context.Background()) })
	two, err := p.Create(ctx, providers.Spec{})
	require.NoError(t, err)
	t.Cleanup(func() { two.Destroy(context.Background()) })
	run(t, ctx, one, "echo mine > note")
	f, err := two.Facts(ctx)
	require.NoError(t, err)
	assert.Equal(t, providers.SharedDisk, f.FilesSharedWith)
	assert.Equal(t, "mine\n", run(t, ctx, two, "cat ../"+one.ID()+"/note"), "a box on the same disk read another's file")
}

// TestOrderInProcess checks that commands of one process run in the order
// Exec was called, one at a time.
func TestOrderInProcess(t *testing.T) {
	srv := archiltest.New(archiltest.Options{QueueLatency: 5 * time.Millisecond})
	t.Cleanup(srv.Close)
	ctx := ctxT(t)
	bx, err := open(t, srv, nil).Create(ctx, providers.Spec{})
	require.NoError(t, err)
	t.Cleanup(func() { bx.Destroy(context.Background()) })
	var procs []providers.Process
	for i := range 8 {
		p, err := bx.Exec(ctx, providers.ExecRequest{Argv: []string{"bash", "-c", "echo " + string(rune('a'+i)) + " >> order"}})
		require.NoError(t, err)
		procs = append(procs, p)
	}
	for _, p := range procs {
		_, err := p.Wait()
		require.NoError(t, err)
	}
	assert.Equal(t, "a\nb\nc\nd\ne\nf\ng\nh\n", run(t, ctx, bx, "cat order"))
}

// clock is a settable clock for lifetimes.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestLazyLifetime checks that a box past its lifetime is ended by the
// first call that looks at it, from any host, and that List removes
// directories left without a record.
func TestLazyLifetime(t *testing.T) {
	srv := archiltest.New(archiltest.Options{})
	t.Cleanup(srv.Close)
	ctx := ctxT(t)
	clk := &clock{t: time.Now()}
	p := open(t, srv, nil)
	archil.SetClock(p, clk.now)
	short, err := p.Create(ctx, providers.Spec{Lifetime: time.Minute, Labels: map[string]string{"k": "short"}})
	require.NoError(t, err)
	long, err := p.Create(ctx, providers.Spec{Lifetime: time.Hour, Labels: map[string]string{"k": "long"}})
	require.NoError(t, err)
	t.Cleanup(func() { long.Destroy(context.Background()) })
	disk := srv.DiskDir(srv.DiskIDs()[0])
	require.DirExists(t, filepath.Join(disk, "boxes", short.ID()))
	// A directory without a record: a destroy that stopped half way.
	orphan := filepath.Join(disk, "boxes", "0123456789abcdef")
	require.NoError(t, os.MkdirAll(orphan, 0o755))

	clk.add(2 * time.Minute)
	other := open(t, srv, nil)
	archil.SetClock(other, clk.now)
	_, err = other.Attach(ctx, short.ID())
	assert.Equal(t, providers.NotFound, providers.CodeOf(err), "Attach of a box past its lifetime: %v", err)
	assert.NoFileExists(t, filepath.Join(disk, "boxes.records", short.ID()+".json"))
	assert.NoDirExists(t, filepath.Join(disk, "boxes", short.ID()))

	_, err = short.Exec(ctx, providers.ExecRequest{Argv: []string{"true"}})
	assert.Equal(t, providers.Gone, providers.CodeOf(err), "Exec in an ended box: %v", err)
	_, err = short.Status(ctx)
	assert.Equal(t, providers.Gone, providers.CodeOf(err))

	boxes, err := other.List(ctx, nil)
	require.NoError(t, err)
	require.Len(t, boxes, 1)
	assert.Equal(t, long.ID(), boxes[0].ID())
	assert.NoDirExists(t, orphan, "List leaves a directory without a record")
	assert.DirExists(t, filepath.Join(disk, "boxes", long.ID()))

	// The same through List alone: the long box, once past its end.
	clk.add(2 * time.Hour)
	boxes, err = other.List(ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, boxes)
	assert.NoDirExists(t, filepath.Join(disk, "boxes", long.ID()))
}

// TestDestroyDuringCommand destroys a box while a command runs in it: the
// command ends (Gone) at once, and nothing of the box stays.
func TestDestroyDuringCommand(t *testing.T) {
	srv := archiltest.New(archiltest.Options{SharedMode: true})
	t.Cleanup(srv.Close)
	ctx := ctxT(t)
	a := open(t, srv, nil)
	bx, err := a.Create(ctx, providers.Spec{})
	require.NoError(t, err)
	p, err := bx.Exec(ctx, providers.ExecRequest{Argv: []string{"bash", "-c", "touch started; sleep 300 & sleep 300"}})
	require.NoError(t, err)
	waitStarted(t, srv, bx.ID(), "started")
	// Destroyed from another host, which has no command of its own there.
	by, err := open(t, srv, nil).Attach(ctx, bx.ID())
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, by.Destroy(ctx))
	_, err = p.Wait()
	assert.Equal(t, providers.Gone, providers.CodeOf(err), "Wait of a command whose box was destroyed: %v", err)
	t.Logf("the command ended %v after Destroy began", time.Since(start).Round(time.Millisecond))
	assert.Equal(t, 0, srv.Running(srv.DiskIDs()[0]), "a command still runs")
	disk := srv.DiskDir(srv.DiskIDs()[0])
	assert.NoDirExists(t, filepath.Join(disk, "boxes", bx.ID()))
	assert.NoDirExists(t, filepath.Join(disk, "boxes.cmds", bx.ID()))
	_, err = a.Attach(ctx, bx.ID())
	assert.Equal(t, providers.NotFound, providers.CodeOf(err))
}

// TestBilledCalls checks that a box counts every exec call the platform
// bills (its create, commands, file operations and removal) and nothing
// else (reads through the object API, refusals).
func TestBilledCalls(t *testing.T) {
	srv := archiltest.New(archiltest.Options{})
	t.Cleanup(srv.Close)
	ctx := ctxT(t)
	bx, err := open(t, srv, nil).Create(ctx, providers.Spec{})
	require.NoError(t, err)
	cc, ok := bx.(providers.CallCounter)
	require.True(t, ok, "an archil box is priced per call")
	assert.Equal(t, srv.Execs(), cc.BilledCalls(), "after create")
	run(t, ctx, bx, "echo hi > f")
	files := bx.(interface {
		ReadFile(context.Context, string) (io.ReadCloser, error)
		WriteFile(context.Context, string, io.Reader, providers.FileMode) error
	})
	f, _ := bx.Facts(ctx)
	before := cc.BilledCalls()
	rc, err := files.ReadFile(ctx, f.Workspace+"/f")
	require.NoError(t, err)
	rc.Close()
	assert.Equal(t, before, cc.BilledCalls(), "a read through the object API is not an exec")
	require.NoError(t, files.WriteFile(ctx, f.Workspace+"/g", strings.NewReader("x"), 0o644))
	assert.Equal(t, before+1, cc.BilledCalls(), "a write is one upload and one exec")
	_, err = bx.Exec(ctx, providers.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("x")})
	assert.Equal(t, providers.Unsupported, providers.CodeOf(err))
	require.NoError(t, bx.Destroy(ctx))
	assert.Equal(t, srv.Execs(), cc.BilledCalls(), "after destroy")
}

// TestFilesExact moves bytes through the object API: every byte value,
// modes of new and replaced files, writes at offsets, archives, and the
// refusal of writes outside the workspace.
func TestFilesExact(t *testing.T) {
	srv := archiltest.New(archiltest.Options{SharedMode: true})
	t.Cleanup(srv.Close)
	ctx := ctxT(t)
	bx, err := open(t, srv, nil).Create(ctx, providers.Spec{})
	require.NoError(t, err)
	t.Cleanup(func() { bx.Destroy(context.Background()) })
	b := bx.(*archil.Box)
	f, err := b.Facts(ctx)
	require.NoError(t, err)
	ws := f.Workspace
	data := make([]byte, 3<<20)
	rand.Read(data)
	for i := range 256 {
		data[i] = byte(i)
	}
	require.NoError(t, b.WriteFile(ctx, ws+"/bin", bytes.NewReader(data), 0o640))
	rc, err := b.ReadFile(ctx, ws+"/bin")
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "ReadFile of what WriteFile wrote differs")
	assert.Equal(t, "640\n", run(t, ctx, b, "stat -c %a bin"))
	run(t, ctx, b, "chmod 751 bin")
	require.NoError(t, b.WriteFile(ctx, ws+"/bin", strings.NewReader("short"), 0o600))
	assert.Equal(t, "751 short", run(t, ctx, b, `printf '%s %s' "$(stat -c %a bin)" "$(cat bin)"`), "a replaced file keeps its mode")

	n, err := b.WriteAt(ctx, ws+"/bin", []byte("\x00\xffend"), 5)
	require.NoError(t, err)
	assert.Equal(t, 5, n)
	buf := make([]byte, 16)
	n, err = b.ReadAt(ctx, ws+"/bin", buf, 3)
	assert.Equal(t, io.EOF, err)
	assert.Equal(t, "rt\x00\xffend", string(buf[:n]))
	n, err = b.ReadAt(ctx, ws+"/bin", buf, 100)
	assert.Equal(t, 0, n)
	assert.Equal(t, io.EOF, err)

	_, err = b.WriteAt(ctx, ws+"/missing", []byte("x"), 0)
	errno, _ := providers.ErrnoOf(err)
	assert.Equal(t, syscall.ENOENT, errno, "WriteAt of a missing file: %v", err)
	_, err = b.ReadFile(ctx, ws+"/missing")
	assert.Equal(t, providers.Unsupported, providers.CodeOf(err), "a read the object API cannot settle goes to a script")

	for _, outside := range []string{"/etc/boxfs-x", filepath.Dir(ws) + "/other-box/f", ws + "/../x"} {
		err := b.WriteFile(ctx, outside, strings.NewReader("x"), 0o644)
		errno, _ := providers.ErrnoOf(err)
		assert.Equal(t, syscall.EACCES, errno, "WriteFile(%s): %v", outside, err)
	}

	run(t, ctx, b, "mkdir -p tree/sub && printf one > tree/a && printf two > tree/sub/b")
	arc, err := b.GetArchive(ctx, ws+"/tree")
	require.NoError(t, err)
	tarball, err := io.ReadAll(arc)
	require.NoError(t, err)
	require.NoError(t, arc.Close())
	run(t, ctx, b, "mkdir copy")
	require.NoError(t, b.PutArchive(ctx, ws+"/copy", bytes.NewReader(tarball)))
	assert.Equal(t, "one two", run(t, ctx, b, `printf '%s %s' "$(cat copy/tree/a)" "$(cat copy/tree/sub/b)"`))
}

// TestExecNotEnabled checks the refusals of a region without exec: made
// up front where the configuration says so, and the platform's own answer
// otherwise, leaving no box.
func TestExecNotEnabled(t *testing.T) {
	srv := archiltest.New(archiltest.Options{Region: "gcp-us-central1"})
	t.Cleanup(srv.Close)
	ctx := ctxT(t)
	p := open(t, srv, map[string]string{"region": "gcp-us-central1"})
	_, err := p.Create(ctx, providers.Spec{})
	assert.Equal(t, providers.Unsupported, providers.CodeOf(err), "%v", err)
	assert.Empty(t, srv.Requests(), "a refused create made calls")

	q := open(t, srv, nil) // configured for an AWS region, on a disk that has no exec
	_, err = q.Create(ctx, providers.Spec{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Exec is not enabled")
	boxes, err := q.List(ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, boxes, "a failed create left a box")
}

// TestOptions checks New's refusals.
func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts map[string]string
		code providers.Code
	}{
		{"no key", map[string]string{"disk": "w"}, providers.Auth},
		{"unknown option", map[string]string{"api_key": "k", "disk": "w", "colour": "red"}, providers.Invalid},
		{"no disk", map[string]string{"api_key": "k"}, providers.Invalid},
		{"bad disk", map[string]string{"api_key": "k", "disk": "a/b"}, providers.Invalid},
		{"unknown region", map[string]string{"api_key": "k", "disk": "w", "region": "mars-1"}, providers.Invalid},
		{"plain http off loopback", map[string]string{"api_key": "k", "disk": "w", "api_url": "http://example.com", "s3_url": "https://s3.example.com"}, providers.Invalid},
		{"bad max_exec", map[string]string{"api_key": "k", "disk": "w", "max_exec": "3s"}, providers.Invalid},
		{"max_exec over the platform's bound", map[string]string{"api_key": "k", "disk": "w", "max_exec": "31s"}, providers.Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ARCHIL_API_KEY", "")
			t.Setenv("ARCHIL_DISK", "")
			t.Setenv("ARCHIL_REGION", "")
			t.Setenv("ARCHIL_S3_BASE_URL", "")
			_, err := archil.New(providers.Config{Options: tc.opts})
			assert.Equal(t, tc.code, providers.CodeOf(err), "%v", err)
		})
	}
}

// TestExecBound checks the platform's bound on one command. The fake
// answers a call whose container runs past its bound with 504 "Command
// timed out" and no output, as the vendor does; the provider gives each
// command its own deadline inside the bound, so a command that needs
// longer ends with Timeout, an error that says what to do instead, and
// leaves the box free for the next command. The bound is 30 s by default
// (in facts too); the test makes it small so as not to wait for it.
func TestExecBound(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		srv := archiltest.New(archiltest.Options{ExecLimit: 500 * time.Millisecond})
		t.Cleanup(srv.Close)
		ctx := ctxT(t)
		post := func(path, body string) (int, map[string]any) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+path, strings.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Authorization", "key-"+srv.APIKey())
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var env map[string]any
			require.NoError(t, jsonDecode(resp, &env))
			return resp.StatusCode, env
		}
		status, _ := post("/api/disks", `{"name":"work"}`)
		require.Equal(t, http.StatusCreated, status)
		disk := srv.DiskIDs()[0]
		start := time.Now()
		status, env := post("/api/disks/"+disk+"/exec", `{"command":"echo lost; sleep 30"}`)
		assert.Equal(t, http.StatusGatewayTimeout, status)
		assert.Equal(t, map[string]any{"success": false, "error": "Command timed out"}, env, "a timed-out call carries no output")
		assert.Less(t, time.Since(start), 10*time.Second, "the fake waited for the command, not its bound")
		assert.Equal(t, 0, srv.Running(disk), "the container outlived its bound")
		status, env = post("/api/disks/"+disk+"/exec", `{"command":"echo quick"}`)
		assert.Equal(t, http.StatusOK, status)
		assert.Equal(t, "quick\n", env["data"].(map[string]any)["stdout"])
	})

	t.Run("provider", func(t *testing.T) {
		assert.Equal(t, 30*time.Second, archil.MaxExec)
		assert.Equal(t, archil.MaxExec, archiltest.DefaultExecLimit, "the fake's default bound is the provider's")
		srv := archiltest.New(archiltest.Options{ExecLimit: 6 * time.Second, SharedMode: true})
		t.Cleanup(srv.Close)
		ctx := ctxT(t)
		// max_exec 6s: each command's own deadline is 1s.
		bx, err := open(t, srv, map[string]string{"max_exec": "6s"}).Create(ctx, providers.Spec{})
		require.NoError(t, err)
		t.Cleanup(func() { bx.Destroy(context.Background()) })
		f, err := bx.Facts(ctx)
		require.NoError(t, err)
		assert.Equal(t, 6000, f.MaxExecMs)

		var out bytes.Buffer
		p, err := bx.Exec(ctx, providers.ExecRequest{Argv: []string{"bash", "-c", "echo partial; sleep 30"}, Stdout: &out})
		require.NoError(t, err)
		_, err = p.Wait()
		assert.Equal(t, providers.Timeout, providers.CodeOf(err), "a command past its deadline: %v", err)
		assert.ErrorContains(t, err, "boxfs launch", "the error says what to do for longer work")
		assert.Equal(t, "partial\n", out.String(), "the output up to the deadline arrives")
		for _, r := range srv.Requests() {
			assert.NotEqual(t, http.StatusGatewayTimeout, r.Status, "a call ran into the platform's bound: %s %s", r.Method, r.Path)
		}
		start := time.Now()
		assert.Equal(t, "free\n", run(t, ctx, bx, "echo free"), "the next command")
		assert.Less(t, time.Since(start), 5*time.Second, "the next command waited for the box")

		bare, err := open(t, srv, nil).Attach(ctx, bx.ID())
		require.NoError(t, err)
		f, err = bare.Facts(ctx)
		require.NoError(t, err)
		assert.Equal(t, 30000, f.MaxExecMs, "the default is the vendor's bound")
	})
}

// TestSharedOwnership checks that the provider changes nothing on a
// shared disk it has not checked out, as the vendor's shared-disk rules
// require: its commands' wrapper (markers, output, status, the lock, the
// clean-up of a destroyed box), the file scripts (a staged upload moved
// into place, an archive made), Destroy and the List sweep. The fake
// refuses a command that changes a path its container does not own.
func TestSharedOwnership(t *testing.T) {
	srv := archiltest.New(archiltest.Options{SharedMode: true})
	t.Cleanup(srv.Close)
	ctx := ctxT(t)
	p := open(t, srv, nil)
	bx, err := p.Create(ctx, providers.Spec{})
	require.NoError(t, err)
	b := bx.(*archil.Box)
	f, err := b.Facts(ctx)
	require.NoError(t, err)
	run(t, ctx, b, "echo one > f && mkdir d && mv f d/g && rm d/g")
	require.NoError(t, b.WriteFile(ctx, f.Workspace+"/w", strings.NewReader("new"), 0o644))
	require.NoError(t, b.WriteFile(ctx, f.Workspace+"/w", strings.NewReader("replaced"), 0o644))
	_, err = b.WriteAt(ctx, f.Workspace+"/w", []byte("R"), 0)
	require.NoError(t, err)
	arc, err := b.GetArchive(ctx, f.Workspace+"/w")
	require.NoError(t, err)
	tarball, err := io.ReadAll(arc)
	require.NoError(t, err)
	require.NoError(t, arc.Close())
	run(t, ctx, b, "mkdir copy")
	require.NoError(t, b.PutArchive(ctx, f.Workspace+"/copy", bytes.NewReader(tarball)))
	assert.Equal(t, "Replaced", run(t, ctx, b, "cat copy/w"))

	// A command killed, and one whose box is destroyed while it runs.
	k, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"bash", "-c", "touch k; sleep 20"}})
	require.NoError(t, err)
	waitStarted(t, srv, b.ID(), "k")
	require.NoError(t, k.Kill(ctx))
	k.Wait()
	g, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"bash", "-c", "touch g; sleep 20"}})
	require.NoError(t, err)
	waitStarted(t, srv, b.ID(), "g")
	require.NoError(t, b.Destroy(ctx))
	_, err = g.Wait()
	assert.Equal(t, providers.Gone, providers.CodeOf(err), "%v", err)

	// A directory without a record, which List sweeps.
	disk := srv.DiskDir(srv.DiskIDs()[0])
	orphan := filepath.Join(disk, "boxes", "0123456789abcdef")
	require.NoError(t, os.MkdirAll(filepath.Join(orphan, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(orphan, "sub", "file"), []byte("x"), 0o644))
	_, err = p.List(ctx, nil)
	require.NoError(t, err)
	assert.NoDirExists(t, orphan, "List left a directory without a record")
	assert.NoDirExists(t, filepath.Join(disk, "boxes", b.ID()))
	assert.NoDirExists(t, filepath.Join(disk, "boxes.cmds", b.ID()))
	assert.Empty(t, srv.Violations(), "commands that changed paths they had not checked out")
}
