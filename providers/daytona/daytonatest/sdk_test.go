package daytonatest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers/daytona/daytonatest"
	"github.com/boxfs/boxfs/providers/daytona/daytonatest/spec"
)

// sdkScript drives the fake through Daytona's TypeScript SDK with each
// call providers/daytona makes, and prints what it saw as one JSON
// object. Each step's failure is recorded rather than thrown, so the test
// names every step that broke. Two of boxfs's calls have no method of
// their own in the SDK, which makes them through its generated clients
// instead: GET /sandbox/{id}/toolbox-proxy-url (the SDK calls it only for
// a sandbox whose answer lacks toolboxProxyUrl) and GET /files/download
// (the SDK downloads through files/bulk-download).
const sdkScript = `
const { Daytona, DaytonaError } = await import(process.env.DAYTONA_SDK);
const daytona = new Daytona({ apiKey: process.env.DAYTONA_TEST_KEY, apiUrl: process.env.DAYTONA_TEST_URL, target: 'us', useDeprecatedPolling: true });
const out = { errors: {} };
const step = async (name, fn) => { try { out[name] = await fn(); } catch (e) { out.errors[name] = String(e && e.stack || e); } };
const failure = async fn => { try { await fn(); return null; } catch (e) { return { name: e.constructor.name, status: e.statusCode ?? null, daytona: e instanceof DaytonaError }; } };
const text = b => Buffer.from(b).toString();
let sbx;
await step('create', async () => {
  sbx = await daytona.create({ name: 'sdk-box', envVars: { SDK_VAR: 'from create' }, labels: { boxfs: '1', note: 'with space & =x' }, autoStopInterval: 0, autoDeleteInterval: 30, ttlMinutes: 60 }, { timeout: 60 });
  return { id: sbx.id, name: sbx.name, state: sbx.state, labels: sbx.labels, autoDeleteInterval: sbx.autoDeleteInterval };
});
await step('get', async () => {
  const byName = await daytona.get('sdk-box');
  const proxy = (await daytona.sandboxApi.getToolboxProxyUrl(sbx.id)).data.url;
  return { id: byName.id, state: byName.state, env: byName.env, proxy, own: byName.toolboxProxyUrl };
});
await step('execute', async () => {
  const r = await sbx.process.executeCommand('printf "$SDK_VAR $REQ"; printf " err" >&2; exit 3', undefined, { REQ: 'req' }, 30);
  return { exitCode: r.exitCode, result: r.result };
});
await step('execute_cwd', async () => (await sbx.process.executeCommand('pwd')).result);
await step('execute_timeout', () => failure(() => sbx.process.executeCommand('sleep 30', undefined, undefined, 1)));
await step('session', async () => {
  await sbx.process.createSession('s1');
  const again = await failure(() => sbx.process.createSession('s1'));
  const started = await sbx.process.executeSessionCommand('s1', { command: 'printf out; printf err >&2; (exit 4)', runAsync: true });
  const stdout = [], stderr = [];
  await sbx.process.getSessionCommandLogs('s1', started.cmdId, s => stdout.push(s), s => stderr.push(s));
  const cmd = await sbx.process.getSessionCommand('s1', started.cmdId);
  const logs = await sbx.process.getSessionCommandLogs('s1', started.cmdId);
  const sync = await sbx.process.executeSessionCommand('s1', { command: 'echo "$SDK_VAR"' });
  const session = await sbx.process.getSession('s1');
  await sbx.process.deleteSession('s1');
  const gone = await failure(() => sbx.process.getSession('s1'));
  return {
    again, cmdId: started.cmdId, followed: { stdout: stdout.join(''), stderr: stderr.join('') },
    exitCode: cmd.exitCode, command: cmd.command, logs: { stdout: logs.stdout, stderr: logs.stderr },
    sync: { exitCode: sync.exitCode, stdout: sync.stdout }, commands: session.commands.length, gone,
  };
});
await step('files', async () => {
  await sbx.fs.createFolder('dir/sub', '755');
  await sbx.fs.uploadFile(Buffer.from('first content'), 'dir/a.txt');
  await sbx.fs.uploadFiles([{ source: Buffer.from([0, 1, 2, 255]), destination: 'dir/sub/b.bin' }, { source: Buffer.from('c'), destination: 'dir/c.txt' }]);
  const info = await sbx.fs.getFileDetails('dir/a.txt');
  const bulk = text(await sbx.fs.downloadFile('dir/a.txt'));
  const raw = text((await sbx.fs.apiClient.downloadFile('dir/sub/b.bin', { responseType: 'arraybuffer' })).data);
  const rawBytes = Array.from(Buffer.from((await sbx.fs.apiClient.downloadFile('dir/sub/b.bin', { responseType: 'arraybuffer' })).data));
  await sbx.fs.setFilePermissions('dir/a.txt', { mode: '600' });
  const { mode, permissions } = await sbx.fs.getFileDetails('dir/a.txt');
  await sbx.fs.moveFiles('dir/a.txt', 'dir/sub/moved.txt');
  const listed = (await sbx.fs.listFiles('dir')).map(f => ({ name: f.name, isDir: f.isDir, size: f.size })).sort((a, b) => a.name < b.name ? -1 : 1);
  const moved = text(await sbx.fs.downloadFile('dir/sub/moved.txt'));
  await sbx.fs.deleteFile('dir/c.txt');
  const missing = await failure(() => sbx.fs.getFileDetails('dir/c.txt'));
  const notEmpty = await failure(() => sbx.fs.deleteFile('dir/sub'));
  await sbx.fs.deleteFile('dir/sub', true);
  const after = (await sbx.fs.listFiles('dir')).map(f => f.name);
  const cwd = (await sbx.process.executeCommand('pwd', 'dir')).result;
  return { info: { name: info.name, size: info.size, isDir: info.isDir }, bulk, raw, rawBytes, mode, permissions, listed, moved, missing, notEmpty, after, cwd };
});
await step('activity', async () => { await sbx.refreshActivity(); return true; });
await step('autodelete', async () => { await sbx.setAutoDeleteInterval(45); await sbx.refreshData(); return sbx.autoDeleteInterval; });
await step('list', async () => {
  const extra = [];
  for (const n of ['sdk-l1', 'sdk-l2']) extra.push(await daytona.create({ name: n, labels: { boxfs: '1' } }));
  const ids = [];
  for await (const s of daytona.list({ labels: { boxfs: '1' }, states: ['started'] })) ids.push(s.id);
  const none = [];
  for await (const s of daytona.list({ labels: { boxfs: 'other' } })) none.push(s.id);
  for (const s of extra) await s.delete(60, true);
  return { ids: ids.sort(), extra: extra.map(s => s.id).sort(), none: none.length };
});
await step('snapshot', async () => {
  await sbx.fs.uploadFile(Buffer.from('in the snapshot'), 'snap.txt');
  await sbx.createSnapshot('sdk-snap');
  const state = sbx.state;
  await sbx.fs.uploadFile(Buffer.from('after the snapshot'), 'snap.txt');
  const copy = await daytona.create({ name: 'sdk-copy', snapshot: 'sdk-snap' });
  const got = text(await copy.fs.downloadFile('snap.txt'));
  await copy.delete(60, true);
  const unknown = await failure(() => daytona.create({ name: 'sdk-nosnap', snapshot: 'never-taken' }));
  return { state, text: got, unknown };
});
await step('stop_start', async () => {
  await sbx.stop();
  const stopped = sbx.state;
  const refused = await failure(() => sbx.process.executeCommand('true'));
  await sbx.start();
  const text2 = text(await sbx.fs.downloadFile('snap.txt'));
  return { stopped, refused, started: sbx.state, text: text2 };
});
await step('delete', async () => {
  await sbx.delete(60, true);
  return { state: sbx.state, get: await failure(() => daytona.get(sbx.id)) };
});
console.log(JSON.stringify(out));
process.exit(0);
`

// sdkFailure is what the script reports of a call that threw.
type sdkFailure struct {
	Name    string
	Status  *int
	Daytona bool
}

// sdkResult is what sdkScript prints.
type sdkResult struct {
	Errors map[string]string `json:"errors"`
	Create struct {
		ID, Name, State    string
		Labels             map[string]string
		AutoDeleteInterval int
	} `json:"create"`
	Get struct {
		ID, State, Proxy, Own string
		Env                   map[string]string
	} `json:"get"`
	Execute struct {
		ExitCode int
		Result   string
	} `json:"execute"`
	ExecuteCwd     string      `json:"execute_cwd"`
	ExecuteTimeout *sdkFailure `json:"execute_timeout"`
	Session        struct {
		Again    *sdkFailure
		CmdID    string
		Followed struct{ Stdout, Stderr string }
		ExitCode *int
		Command  string
		Logs     struct{ Stdout, Stderr string }
		Sync     struct {
			ExitCode int
			Stdout   string
		}
		Commands int
		Gone     *sdkFailure
	} `json:"session"`
	Files struct {
		Info struct {
			Name  string
			Size  int
			IsDir bool
		}
		Bulk, Raw string
		RawBytes  []int
		Mode      string
		Perms     string `json:"permissions"`
		Listed    []struct {
			Name  string
			IsDir bool
			Size  int
		}
		Moved             string
		Missing, NotEmpty *sdkFailure
		After             []string
		Cwd               string
	} `json:"files"`
	Activity   bool `json:"activity"`
	Autodelete int  `json:"autodelete"`
	List       struct {
		IDs   []string `json:"ids"`
		Extra []string
		None  int
	} `json:"list"`
	Snapshot struct {
		State, Text string
		Unknown     *sdkFailure
	} `json:"snapshot"`
	StopStart struct {
		Stopped, Started, Text string
		Refused                *sdkFailure
	} `json:"stop_start"`
	Delete struct {
		State string
		Get   *sdkFailure
	} `json:"delete"`
}

// TestOfficialSDK drives the fake with Daytona's TypeScript SDK (the
// version package spec pins), pointed at it by apiUrl, through every call
// providers/daytona makes: create (from a snapshot too), get by name, the
// toolbox proxy URL, list by labels and state over pages, process/execute,
// sessions (create, exec async and sync, command, logs as JSON and
// followed over the WebSocket, delete), files (folder, bulk-upload, info,
// download, bulk-download, permissions, move, list, delete), last
// activity, autodelete, snapshot, stop, start and delete. The SDK polls
// (useDeprecatedPolling) rather than follow the event socket, which the
// fake does not serve; boxfs polls too. Every request the SDK made is then
// checked against the spec. It needs Node and npm (and the npm registry
// on its first run); without them it is skipped, or fails under
// BOXFS_REQUIRE_NPM=1.
func TestOfficialSDK(t *testing.T) {
	sdk, version := installSDK(t)
	srv := daytonatest.New(daytonatest.Options{CreatingPolls: 1, StoppingFor: 50 * time.Millisecond, DeleteLag: 50 * time.Millisecond, SnapshottingFor: 50 * time.Millisecond})
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	script := filepath.Join(dir, "drive.mjs")
	require.NoError(t, os.WriteFile(script, []byte(sdkScript), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = dir // no .env of the developer's is read
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DAYTONA_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "DAYTONA_TEST_URL="+srv.APIURL(), "DAYTONA_TEST_KEY="+srv.APIKey(), "DAYTONA_SDK="+sdk)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node: %s", stderr.String())
	var res sdkResult
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), "the script printed %q; stderr %s", stdout.String(), stderr.String())
	for step, e := range res.Errors {
		t.Errorf("SDK step %s failed: %s", step, e)
	}
	defer func() {
		if t.Failed() {
			for _, r := range srv.Requests() {
				t.Logf("%s %s?%s: %d %.200s", r.Method, r.Path, r.Query, r.Status, r.Response)
			}
		}
	}()

	status := func(n int) *int { return &n }
	id := res.Create.ID
	assert.NotEmpty(t, id)
	assert.Equal(t, "sdk-box", res.Create.Name)
	assert.Equal(t, "started", res.Create.State)
	assert.Equal(t, "with space & =x", res.Create.Labels["note"])
	assert.Equal(t, 30, res.Create.AutoDeleteInterval)
	assert.Equal(t, id, res.Get.ID, "get by name")
	assert.Equal(t, "started", res.Get.State)
	assert.Equal(t, "from create", res.Get.Env["SDK_VAR"])
	assert.Equal(t, srv.URL()+"/toolbox", res.Get.Proxy)
	assert.Equal(t, res.Get.Proxy, res.Get.Own)

	assert.Equal(t, 3, res.Execute.ExitCode)
	assert.Equal(t, "from create req err", res.Execute.Result, "process/execute: output combined, the sandbox's env and the request's")
	assert.NotEmpty(t, strings.TrimSpace(res.ExecuteCwd), "a command without cwd runs in the sandbox's working directory")
	if assert.NotNil(t, res.ExecuteTimeout, "a command past its timeout") {
		assert.Equal(t, status(408), res.ExecuteTimeout.Status)
	}

	s := res.Session
	if assert.NotNil(t, s.Again, "a second session of one id") {
		assert.Equal(t, status(409), s.Again.Status)
	}
	assert.NotEmpty(t, s.CmdID)
	// The daemon labels the log line by line, ending each with a newline.
	assert.Equal(t, "out\n", s.Followed.Stdout, "the followed log, split by the SDK from the fake's markers")
	assert.Equal(t, "err\n", s.Followed.Stderr)
	if assert.NotNil(t, s.ExitCode) {
		assert.Equal(t, 4, *s.ExitCode)
	}
	assert.Equal(t, "printf out; printf err >&2; (exit 4)", s.Command)
	assert.Equal(t, "out\n", s.Logs.Stdout)
	assert.Equal(t, "err\n", s.Logs.Stderr)
	assert.Equal(t, 0, s.Sync.ExitCode)
	assert.Equal(t, "from create\n", s.Sync.Stdout)
	assert.Equal(t, 2, s.Commands)
	if assert.NotNil(t, s.Gone, "a deleted session") {
		assert.Equal(t, status(404), s.Gone.Status)
	}

	f := res.Files
	assert.Equal(t, "a.txt", f.Info.Name)
	assert.Equal(t, 13, f.Info.Size)
	assert.False(t, f.Info.IsDir)
	assert.Equal(t, "first content", f.Bulk)
	assert.Equal(t, []int{0, 1, 2, 255}, f.RawBytes)
	assert.Equal(t, "-rw-------", f.Mode)
	assert.Equal(t, "0600", f.Perms)
	if assert.Len(t, f.Listed, 2) {
		assert.Equal(t, "c.txt", f.Listed[0].Name)
		assert.Equal(t, 1, f.Listed[0].Size)
		assert.Equal(t, "sub", f.Listed[1].Name)
		assert.True(t, f.Listed[1].IsDir)
	}
	assert.Equal(t, "first content", f.Moved)
	if assert.NotNil(t, f.Missing) {
		assert.Equal(t, status(404), f.Missing.Status)
	}
	assert.NotNil(t, f.NotEmpty, "a non-recursive delete of a directory with files")
	assert.Empty(t, f.After)
	assert.Equal(t, filepath.Join(strings.TrimSpace(res.ExecuteCwd), "dir")+"\n", f.Cwd, "a relative cwd is in the sandbox's working directory")

	// Relative paths are the sandbox's: nothing landed in the test's own
	// working directory.
	for _, name := range []string{"dir", "snap.txt"} {
		_, err := os.Lstat(name)
		assert.ErrorIs(t, err, os.ErrNotExist, "%s in the test's working directory", name)
	}

	assert.True(t, res.Activity)
	assert.Equal(t, 45, res.Autodelete)
	assert.Len(t, res.List.Extra, 2)
	assert.ElementsMatch(t, append([]string{id}, res.List.Extra...), res.List.IDs, "a listing over pages of 2")
	assert.Equal(t, 0, res.List.None)
	assert.Equal(t, "started", res.Snapshot.State, "the sandbox after its snapshot")
	assert.Equal(t, "in the snapshot", res.Snapshot.Text)
	if assert.NotNil(t, res.Snapshot.Unknown) {
		assert.Equal(t, status(400), res.Snapshot.Unknown.Status)
	}
	assert.Equal(t, "stopped", res.StopStart.Stopped)
	assert.NotNil(t, res.StopStart.Refused, "the toolbox of a stopped sandbox")
	assert.Equal(t, "started", res.StopStart.Started)
	assert.Equal(t, "after the snapshot", res.StopStart.Text, "files outlive a stop")
	assert.Equal(t, "destroyed", res.Delete.State)
	if assert.NotNil(t, res.Delete.Get) {
		assert.Equal(t, status(404), res.Delete.Get.Status)
	}
	assert.Empty(t, srv.SandboxIDs())

	// What the SDK sent: its version header on every request, and only
	// routes, parameters and fields of the spec.
	for _, r := range srv.Requests() {
		assert.Equal(t, version, r.Header.Get("X-Daytona-SDK-Version"), "%s %s", r.Method, r.Path)
	}
	for _, err := range srv.SpecErrors() {
		t.Errorf("spec: %v", err)
	}
}

// installSDK installs the pinned SDK once into the user's cache and
// returns the path of its ES module and its version; without Node and npm
// it skips the test, or fails it under BOXFS_REQUIRE_NPM=1.
func installSDK(t *testing.T) (entry, version string) {
	t.Helper()
	testbox.RequireNPM(t)
	packs, err := spec.Versions()
	require.NoError(t, err)
	for _, p := range packs {
		if p.Name == "@daytonaio/sdk" {
			version = p.Version
		}
	}
	require.NotEmpty(t, version, "package spec pins no @daytonaio/sdk")
	cache, err := os.UserCacheDir()
	require.NoError(t, err)
	dir := filepath.Join(cache, "boxfs", "npm-daytonaio-sdk-"+version)
	entry = filepath.Join(dir, "node_modules", "@daytonaio", "sdk", "esm", "index.js")
	if _, err := os.Stat(entry); err == nil {
		return entry, version
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(dir), 0o755))
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	require.NoError(t, err)
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	msg, err := exec.CommandContext(ctx, "npm", "install", "--prefix", tmp, "--no-audit", "--no-fund", "--no-save", "@daytonaio/sdk@"+version).CombinedOutput()
	if err != nil {
		testbox.NPMUnavailable(t, "npm install @daytonaio/sdk@%s: %v\n%s", version, err, msg)
	}
	if err := os.Rename(tmp, dir); err != nil {
		_, serr := os.Stat(entry) // another test process got there first
		require.NoError(t, serr, "installing the SDK: %v", err)
	}
	return entry, version
}
