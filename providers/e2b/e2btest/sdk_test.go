package e2btest_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers/e2b/e2btest"
	"github.com/boxfs/boxfs/providers/e2b/internal/envd/filesystem"
	"github.com/boxfs/boxfs/providers/e2b/internal/envd/process"
)

// sdkVersion is the official JavaScript SDK the fake is checked against:
// the version whose wire the provider was written from.
const sdkVersion = "2.51.0"

// sdkScript drives the fake through the SDK the way a user would, and
// prints what it saw as one JSON object. Each step's failure is recorded
// rather than thrown, so the test names every step that broke.
const sdkScript = `
const { Sandbox, CommandExitError } = await import(process.env.E2B_SDK);
const out = { errors: {} };
const step = async (name, fn) => { try { out[name] = await fn(); } catch (e) { out.errors[name] = String(e && e.stack || e); } };
const sbx = await Sandbox.create('base', { metadata: { boxfs: '1', note: 'with space & =x' }, envs: { SDK_VAR: 'from create' }, timeoutMs: 120000 });
out.id = sbx.sandboxId;
await step('run', async () => {
  try {
    const r = await sbx.commands.run('printf out; printf err >&2; printf " $SDK_VAR $REQ"; exit 3', { envs: { REQ: 'req' } });
    return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    if (e instanceof CommandExitError) return { exitCode: e.exitCode, stdout: e.stdout, stderr: e.stderr };
    throw e;
  }
});
await step('cwd', async () => (await sbx.commands.run('pwd; mkdir -p sub', {})).stdout);
await step('stdin', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true });
  await sbx.commands.sendStdin(h.pid, 'hello ');
  await sbx.commands.sendStdin(h.pid, new Uint8Array([0x73, 0x74, 0x64, 0x69, 0x6e]));
  await sbx.commands.closeStdin(h.pid);
  const r = await h.wait();
  return { exitCode: r.exitCode, stdout: r.stdout };
});
await step('files', async () => {
  await sbx.files.write('dir/a.txt', 'first content');
  await sbx.files.write('dir/b.bin', new Blob([new Uint8Array([0, 1, 2, 255])]), { useOctetStream: true });
  const text = await sbx.files.read('dir/a.txt');
  const bytes = Array.from(await sbx.files.read('dir/b.bin', { format: 'bytes' }));
  await sbx.files.makeDir('dir/sub');
  await sbx.files.rename('dir/a.txt', 'dir/sub/c.txt');
  const entries = (await sbx.files.list('dir')).map(e => ({ name: e.name, type: e.type, size: e.size })).sort((a, b) => a.name < b.name ? -1 : 1);
  const info = await sbx.files.getInfo('dir/sub/c.txt');
  const existsBefore = await sbx.files.exists('dir/b.bin');
  await sbx.files.remove('dir/b.bin');
  const existsAfter = await sbx.files.exists('dir/b.bin');
  let missing = '';
  try { await sbx.files.read('dir/nope'); } catch (e) { missing = e.constructor.name; }
  return { text, bytes, entries, info: { name: info.name, type: info.type, size: info.size }, existsBefore, existsAfter, missing };
});
await step('watch', async () => {
  const events = [];
  const w = await sbx.files.watchDir('dir', ev => events.push({ name: ev.name, type: ev.type }), { recursive: true });
  await sbx.files.write('dir/sub/w.txt', 'watched');
  for (let i = 0; i < 100 && !events.some(e => e.name === 'sub/w.txt'); i++) await new Promise(r => setTimeout(r, 20));
  await w.stop();
  return events.filter(e => e.name === 'sub/w.txt').map(e => e.type);
});
await step('list', async () => {
  const items = await Sandbox.list({ query: { metadata: { note: 'with space & =x' }, state: ['running'] } }).nextItems();
  const none = await Sandbox.list({ query: { metadata: { note: 'other' } } }).nextItems();
  return { ids: items.map(s => s.sandboxId), none: none.length, metadata: items[0] && items[0].metadata };
});
await step('kill_command', async () => {
  const h = await sbx.commands.run('sleep 100', { background: true });
  const listed = (await sbx.commands.list()).some(p => p.pid === h.pid);
  const killed = await h.kill();
  let exitCode = null;
  try { await h.wait(); } catch (e) { exitCode = e.exitCode; }
  return { listed, killed, exitCode };
});
await step('timeout', async () => { await sbx.setTimeout(60000); const i = await sbx.getInfo(); return { state: i.state, cpuCount: i.cpuCount, memoryMB: i.memoryMB, left: Math.round((i.endAt - Date.now()) / 1000) }; });
await step('pause', async () => {
  await sbx.files.write('paused.txt', 'kept while paused');
  const h = await sbx.commands.run('sleep 300', { background: true });
  const paused = await sbx.pause();
  const again = await Sandbox.pause(sbx.sandboxId);
  const state = (await Sandbox.getInfo(sbx.sandboxId)).state;
  const back = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60000 });
  const text = await back.files.read('paused.txt');
  const alive = (await back.commands.list()).some(p => p.pid === h.pid);
  await back.commands.kill(h.pid);
  return { paused, again, state, text, alive, after: (await back.getInfo()).state };
});
await step('snapshot', async () => {
  await sbx.files.write('snap.txt', 'in the snapshot');
  const snap = await sbx.createSnapshot({ name: 'sdk-snap' });
  await sbx.files.write('snap.txt', 'after the snapshot');
  const copy = await Sandbox.create(snap.snapshotId, { timeoutMs: 60000 });
  const text = await copy.files.read('snap.txt');
  await copy.kill();
  return { id: snap.snapshotId, names: snap.names, text, deleted: await Sandbox.deleteSnapshot(snap.snapshotId), again: await Sandbox.deleteSnapshot(snap.snapshotId) };
});
await step('kill', async () => ({ first: await Sandbox.kill(sbx.sandboxId), second: await Sandbox.kill(sbx.sandboxId), running: await sbx.isRunning() }));
console.log(JSON.stringify(out));
`

// sdkResult is what sdkScript prints.
type sdkResult struct {
	Errors map[string]string `json:"errors"`
	ID     string            `json:"id"`
	Run    struct {
		ExitCode       int
		Stdout, Stderr string
	} `json:"run"`
	Cwd   string `json:"cwd"`
	Stdin struct {
		ExitCode int
		Stdout   string
	} `json:"stdin"`
	Files struct {
		Text    string
		Bytes   []int
		Entries []struct {
			Name, Type string
			Size       int
		}
		Info struct {
			Name, Type string
			Size       int
		}
		ExistsBefore, ExistsAfter bool
		Missing                   string
	} `json:"files"`
	Watch []string `json:"watch"`
	List  struct {
		IDs      []string `json:"ids"`
		None     int
		Metadata map[string]string
	} `json:"list"`
	KillCommand struct {
		Listed, Killed bool
		ExitCode       *int
	} `json:"kill_command"`
	Timeout struct {
		State              string
		CPUCount, MemoryMB int
		Left               int
	} `json:"timeout"`
	Pause struct {
		Paused, Again, Alive bool
		State, After, Text   string
	} `json:"pause"`
	Snapshot struct {
		ID, Text       string
		Names          []string
		Deleted, Again bool
	} `json:"snapshot"`
	Kill struct{ First, Second, Running bool } `json:"kill"`
}

// TestOfficialSDK drives the fake with the official E2B JavaScript SDK,
// pointed at it by E2B_API_URL and E2B_SANDBOX_URL: create, commands with
// env, stdin and kill, files, watch, list by metadata, pause and connect,
// snapshots, timeout and kill.
// It needs Node and npm (and the npm registry on its first run); without
// them it is skipped.
func TestOfficialSDK(t *testing.T) {
	sdk := installSDK(t)
	srv := e2btest.New(e2btest.Options{})
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	script := filepath.Join(dir, "drive.mjs")
	require.NoError(t, os.WriteFile(script, []byte(sdkScript), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Env = append(os.Environ(),
		"E2B_API_URL="+srv.APIURL(), "E2B_SANDBOX_URL="+srv.SandboxURL(), "E2B_API_KEY="+srv.APIKey(),
		"E2B_SDK="+sdk, "E2B_DOMAIN=", "E2B_DEBUG=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node: %s", stderr.String())
	var res sdkResult
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), "the script printed %q", stdout.String())
	for step, e := range res.Errors {
		t.Errorf("SDK step %s failed: %s", step, e)
	}

	home, _ := srv.Dir(res.ID)
	assert.Equal(t, 3, res.Run.ExitCode)
	assert.Equal(t, "out from create req", res.Run.Stdout)
	assert.Equal(t, "err", res.Run.Stderr)
	assert.Equal(t, home+"\n", res.Cwd, "a command without cwd runs in the sandbox's home")
	assert.Equal(t, 0, res.Stdin.ExitCode)
	assert.Equal(t, "hello stdin", res.Stdin.Stdout)
	assert.Equal(t, "first content", res.Files.Text)
	assert.Equal(t, []int{0, 1, 2, 255}, res.Files.Bytes)
	if assert.Len(t, res.Files.Entries, 2) {
		assert.Equal(t, "b.bin", res.Files.Entries[0].Name)
		assert.Equal(t, "file", res.Files.Entries[0].Type)
		assert.Equal(t, 4, res.Files.Entries[0].Size)
		assert.Equal(t, "sub", res.Files.Entries[1].Name)
		assert.Equal(t, "dir", res.Files.Entries[1].Type)
	}
	assert.Equal(t, "c.txt", res.Files.Info.Name)
	assert.Equal(t, 13, res.Files.Info.Size)
	assert.True(t, res.Files.ExistsBefore)
	assert.False(t, res.Files.ExistsAfter)
	assert.Equal(t, "FileNotFoundError", res.Files.Missing)
	assert.Contains(t, res.Watch, "create")
	assert.Equal(t, []string{res.ID}, res.List.IDs)
	assert.Equal(t, 0, res.List.None)
	assert.Equal(t, "with space & =x", res.List.Metadata["note"])
	assert.True(t, res.KillCommand.Listed)
	assert.True(t, res.KillCommand.Killed)
	assert.Equal(t, "running", res.Timeout.State)
	assert.Equal(t, 2, res.Timeout.CPUCount)
	assert.InDelta(t, 60, res.Timeout.Left, 5)
	assert.True(t, res.Pause.Paused, "pause of a running sandbox")
	assert.False(t, res.Pause.Again, "pause of a paused sandbox")
	assert.Equal(t, "paused", res.Pause.State)
	assert.Equal(t, "kept while paused", res.Pause.Text)
	assert.True(t, res.Pause.Alive, "a process started before the pause, after connect")
	assert.Equal(t, "running", res.Pause.After)
	assert.Equal(t, "e2btest/sdk-snap:default", res.Snapshot.ID)
	assert.Equal(t, []string{res.Snapshot.ID}, res.Snapshot.Names)
	assert.Equal(t, "in the snapshot", res.Snapshot.Text)
	assert.True(t, res.Snapshot.Deleted)
	assert.False(t, res.Snapshot.Again, "a second delete of the snapshot")
	assert.Equal(t, struct{ First, Second, Running bool }{true, false, false}, res.Kill)
	assert.Empty(t, srv.SandboxIDs())

	// What the SDK sent: JSON Connect with its headers.
	var starts int
	for _, r := range srv.Requests() {
		if r.Path == "/process.Process/Start" {
			starts++
			assert.Equal(t, "application/connect+json", r.Header.Get("Content-Type"))
			assert.Equal(t, res.ID, r.Header.Get("E2b-Sandbox-Id"))
			assert.Equal(t, "49983", r.Header.Get("E2b-Sandbox-Port"))
			assert.Equal(t, "50", r.Header.Get("Keepalive-Ping-Interval"))
			assert.NotEmpty(t, r.Header.Get("X-Access-Token"))
		}
	}
	assert.Positive(t, starts)
}

// installSDK installs the SDK once into the user's cache and returns the
// path of its ES module; it skips the test without Node and npm.
func installSDK(t *testing.T) string {
	t.Helper()
	testbox.RequireNPM(t)
	out, err := exec.Command("node", "-p", "process.versions.node").Output()
	require.NoError(t, err)
	if v := strings.Split(strings.TrimSpace(string(out)), "."); len(v) < 2 || atoi(v[0]) < 20 || atoi(v[0]) == 20 && atoi(v[1]) < 18 {
		testbox.NPMUnavailable(t, "the e2b SDK needs Node 20.18 or later; this is %s", out)
	}
	cache, err := os.UserCacheDir()
	require.NoError(t, err)
	dir := filepath.Join(cache, "boxfs", "npm-e2b-"+sdkVersion)
	entry := filepath.Join(dir, "node_modules", "e2b", "dist", "index.mjs")
	if _, err := os.Stat(entry); err == nil {
		return entry
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(dir), 0o755))
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	require.NoError(t, err)
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", tmp, "--no-audit", "--no-fund", "--no-save", "e2b@"+sdkVersion)
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "npm install e2b@%s: %s", sdkVersion, msg)
	if err := os.Rename(tmp, dir); err != nil {
		_, serr := os.Stat(entry) // another test process got there first
		require.NoError(t, serr, "installing the SDK: %v", err)
	}
	return entry
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// TestSchemasMatchSDK compares the project's envd schemas with the ones
// compiled into the official SDK: every service, method, message, field
// (name, number, type, label, oneof, optional) and enum value.
func TestSchemasMatchSDK(t *testing.T) {
	sdk := installSDK(t)
	js, err := os.ReadFile(strings.TrimSuffix(sdk, ".mjs") + ".js")
	require.NoError(t, err)
	theirs := map[string]*descriptorpb.FileDescriptorProto{}
	for _, m := range regexp.MustCompile(`fileDesc\)\("([A-Za-z0-9+/=]+)"`).FindAllSubmatch(js, -1) {
		raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(string(m[1]), "="))
		require.NoError(t, err)
		fd := &descriptorpb.FileDescriptorProto{}
		require.NoError(t, proto.Unmarshal(raw, fd))
		theirs[fd.GetName()] = fd
	}
	for _, f := range []protoreflect.FileDescriptor{process.File_process_process_proto, filesystem.File_filesystem_filesystem_proto} {
		ours := protodesc.ToFileDescriptorProto(f)
		sdkFD, ok := theirs[ours.GetName()]
		if !assert.True(t, ok, "the SDK has no %s (it has %v)", ours.GetName(), keys(theirs)) {
			continue
		}
		assert.Equal(t, sdkFD.GetPackage(), ours.GetPackage())
		assert.Equal(t, shape(sdkFD), shape(ours), "%s differs from the SDK's", ours.GetName())
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// shape lists what the wire depends on in a file, one line per item.
func shape(fd *descriptorpb.FileDescriptorProto) []string {
	var out []string
	var msg func(prefix string, m *descriptorpb.DescriptorProto)
	msg = func(prefix string, m *descriptorpb.DescriptorProto) {
		name := prefix + m.GetName()
		out = append(out, "message "+name)
		for _, f := range m.GetField() {
			oneof := ""
			if f.OneofIndex != nil && !f.GetProto3Optional() {
				oneof = " oneof " + m.GetOneofDecl()[f.GetOneofIndex()].GetName()
			}
			out = append(out, name+"."+f.GetName()+" = "+strconv.Itoa(int(f.GetNumber()))+" "+f.GetLabel().String()+" "+f.GetType().String()+" "+f.GetTypeName()+oneof+" optional="+strconv.FormatBool(f.GetProto3Optional()))
		}
		for _, n := range m.GetNestedType() {
			msg(name+".", n)
		}
		for _, e := range m.GetEnumType() {
			out = append(out, enum(name+".", e)...)
		}
	}
	for _, m := range fd.GetMessageType() {
		msg("", m)
	}
	for _, e := range fd.GetEnumType() {
		out = append(out, enum("", e)...)
	}
	for _, s := range fd.GetService() {
		for _, m := range s.GetMethod() {
			out = append(out, "rpc "+s.GetName()+"."+m.GetName()+"("+m.GetInputType()+") "+m.GetOutputType()+
				" client-stream="+strconv.FormatBool(m.GetClientStreaming())+" server-stream="+strconv.FormatBool(m.GetServerStreaming()))
		}
	}
	slices.Sort(out)
	return out
}

func enum(prefix string, e *descriptorpb.EnumDescriptorProto) []string {
	var out []string
	for _, v := range e.GetValue() {
		out = append(out, "enum "+prefix+e.GetName()+"."+v.GetName()+" = "+strconv.Itoa(int(v.GetNumber())))
	}
	return out
}
