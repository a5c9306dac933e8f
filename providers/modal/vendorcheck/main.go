// Command vendorcheck drives Modal's own Go client (modal-go, the module
// github.com/modal-labs/modal-client/go) through every call boxfs's
// providers/modal makes that the client exposes, against the server at
// MODAL_SERVER_URL (in tests, the fake of providers/modal/modaltest), and
// prints one JSON object per step on standard output.
//
// It is a module of its own because modal-go and boxfs cannot link into
// one binary: both register Modal's protocol buffers under the same names.
// providers/modal/modaltest's TestVendorClient builds and runs it.
//
// Usage:
//
//	MODAL_SERVER_URL=http://127.0.0.1:PORT MODAL_TOKEN_ID=... MODAL_TOKEN_SECRET=... vendorcheck [-run all|throttle]
//
// The client is held to Modal's V1 sandbox API (MODAL_SANDBOX_V2=0), the
// one boxfs speaks. A step that fails prints its error and the rest still
// run where they can; the exit status is 0 either way, so the caller reads
// every step.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	modal "github.com/modal-labs/modal-client/go"
)

// step is one line of the output.
type step struct {
	Step string         `json:"step"`
	OK   bool           `json:"ok"`
	Err  string         `json:"err,omitempty"`
	Data map[string]any `json:"data,omitempty"`
}

var out = json.NewEncoder(os.Stdout)

// report prints the step's result and says whether it succeeded.
func report(name string, data map[string]any, err error) bool {
	s := step{Step: name, OK: err == nil, Data: data}
	if err != nil {
		s.Err = err.Error()
	}
	out.Encode(s)
	return err == nil
}

func main() {
	run := flag.String("run", "all", "which steps: all (every call boxfs makes) or throttle (one call, against a throttling server)")
	flag.Parse()
	os.Setenv("MODAL_SANDBOX_V2", "0")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c, err := modal.NewClient()
	if !report("client", map[string]any{"version": versionOf(c)}, err) {
		return
	}
	defer c.Close()
	switch *run {
	case "throttle":
		throttle(ctx, c)
	default:
		all(ctx, c)
	}
}

func versionOf(c *modal.Client) string {
	if c == nil {
		return ""
	}
	return c.Version()
}

// throttle makes one call and says how long it took: against a server that
// throttles it, the client waits as asked before each new attempt.
func throttle(ctx context.Context, c *modal.Client) {
	start := time.Now()
	app, err := c.Apps.FromName(ctx, "boxfs-vendorcheck", &modal.AppFromNameParams{CreateIfMissing: true})
	d := map[string]any{"elapsed_ms": time.Since(start).Milliseconds()}
	if app != nil {
		d["app_id"] = app.AppID
	}
	report("throttled_app", d, err)
}

// execResult runs argv in sb with stdin and returns what it printed and its
// exit code.
func execResult(ctx context.Context, sb *modal.Sandbox, argv []string, stdin string, params *modal.SandboxExecParams) (map[string]any, error) {
	p, err := sb.Exec(ctx, argv, params)
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(p.Stdin, stdin); err != nil {
		return nil, fmt.Errorf("stdin: %w", err)
	}
	if err := p.Stdin.Close(); err != nil {
		return nil, fmt.Errorf("stdin close: %w", err)
	}
	var stdout, stderr bytes.Buffer
	errc := make(chan error, 1)
	go func() { _, err := io.Copy(&stderr, p.Stderr); errc <- err }()
	if _, err := io.Copy(&stdout, p.Stdout); err != nil {
		return nil, fmt.Errorf("stdout: %w", err)
	}
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("stderr: %w", err)
	}
	code, err := p.Wait(ctx, nil)
	if err != nil {
		return nil, err
	}
	return map[string]any{"stdout": stdout.String(), "stderr": stderr.String(), "exit_code": code}, nil
}

func all(ctx context.Context, c *modal.Client) {
	app, err := c.Apps.FromName(ctx, "boxfs-vendorcheck", &modal.AppFromNameParams{CreateIfMissing: true})
	if !report("app", map[string]any{"app_id": appID(app)}, err) {
		return
	}

	img, err := c.Images.FromRegistry("alpine:3.20", nil).Build(ctx, app, nil)
	if !report("image_build", map[string]any{"image_id": imageID(img)}, err) {
		return
	}
	got, err := c.Images.FromID(ctx, img.ImageID, nil)
	report("image_from_id", map[string]any{"image_id": imageID(got)}, err)

	secret, err := c.Secrets.FromMap(ctx, map[string]string{"VC_SECRET": "s3cret"}, nil)
	report("secret_from_map", nil, err)
	var secrets []*modal.Secret
	if secret != nil {
		secrets = []*modal.Secret{secret}
	}

	sb, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{
		Timeout:          10 * time.Minute,
		Secrets:          secrets,
		UnencryptedPorts: []int{8080},
	})
	if !report("create", map[string]any{"sandbox_id": sandboxID(sb)}, err) {
		return
	}
	defer sb.Terminate(context.WithoutCancel(ctx), nil)

	tags := map[string]string{"boxfs": "vendorcheck", "box": sb.SandboxID}
	report("tags_set", nil, sb.SetTags(ctx, tags, nil))
	gotTags, err := sb.GetTags(ctx, nil)
	report("tags_get", map[string]any{"tags": gotTags}, err)

	code, err := sb.Poll(ctx, nil)
	report("poll_running", map[string]any{"exit_code": code}, err)

	d, err := execResult(ctx, sb, []string{"sh", "-c", "cat; echo to-stderr >&2; exit 3"}, "hello from stdin\n", nil)
	report("exec", d, err)

	d, err = execResult(ctx, sb, []string{"sh", "-c", `printf %s "$VC_SECRET/$VC_ENV"`}, "", &modal.SandboxExecParams{Env: map[string]string{"VC_ENV": "e1"}})
	report("exec_env", d, err)

	d, err = execResult(ctx, sb, []string{"sh", "-c", "cat > vendorcheck.txt"}, "file body\n", nil)
	report("file_write", d, err)
	d, err = execResult(ctx, sb, []string{"cat", "vendorcheck.txt"}, "", nil)
	report("file_read", d, err)

	tunnels, err := sb.Tunnels(ctx, 10*time.Second, nil)
	td := map[string]any{}
	for port, t := range tunnels {
		h, p, terr := t.TCPSocket()
		td[fmt.Sprint(port)] = map[string]any{"host": h, "port": p, "err": errString(terr)}
	}
	report("tunnels", td, err)

	var listed []string
	seq, err := c.Sandboxes.List(ctx, &modal.SandboxListParams{Tags: map[string]string{"box": sb.SandboxID}})
	if err == nil {
		for s, lerr := range seq {
			if lerr != nil {
				err = lerr
				break
			}
			listed = append(listed, s.SandboxID)
		}
	}
	sort.Strings(listed)
	report("list", map[string]any{"sandbox_ids": listed}, err)

	again, err := c.Sandboxes.FromID(ctx, sb.SandboxID, nil)
	if err == nil {
		d, err = execResult(ctx, again, []string{"cat", "vendorcheck.txt"}, "", nil)
	}
	report("from_id_exec", d, err)

	snap, err := sb.SnapshotFilesystem(ctx, nil)
	if report("snapshot", map[string]any{"image_id": imageID(snap)}, err) {
		sb2, err := c.Sandboxes.Create(ctx, app, snap, &modal.SandboxCreateParams{Timeout: 10 * time.Minute})
		if report("create_from_snapshot", map[string]any{"sandbox_id": sandboxID(sb2)}, err) {
			d, err = execResult(ctx, sb2, []string{"cat", "vendorcheck.txt"}, "", nil)
			report("snapshot_file_read", d, err)
			_, err = sb2.Terminate(ctx, nil)
			report("terminate_snapshot_box", nil, err)
		}
	}

	code2, err := sb.Terminate(ctx, &modal.SandboxTerminateParams{Wait: true})
	report("terminate", map[string]any{"exit_code": code2}, err)
	code, err = sb.Poll(ctx, nil)
	report("poll_ended", map[string]any{"exit_code": code}, err)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func appID(a *modal.App) string {
	if a == nil {
		return ""
	}
	return a.AppID
}

func imageID(i *modal.Image) string {
	if i == nil {
		return ""
	}
	return i.ImageID
}

func sandboxID(s *modal.Sandbox) string {
	if s == nil {
		return ""
	}
	return s.SandboxID
}
