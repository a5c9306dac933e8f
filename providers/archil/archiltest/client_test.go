package archiltest_test

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
	"github.com/boxfs/boxfs/providers/archil/archiltest"
)

// clientScript drives the fake through Archil's own client (the npm
// package archiltest.ClientPackage) with each call providers/archil makes,
// and prints what it saw as one JSON object. Each step's failure is
// recorded rather than thrown, so the test names every step that broke.
// Not here, because the client cannot say them: a ranged GetObject (it
// sends no Range header) and S3's multipart upload (it has none).
const clientScript = `
const { Archil, ArchilApiError, ArchilS3Error, Disk } = await import(process.env.ARCHIL_CLIENT);
const a = new Archil({ apiKey: process.env.ARCHIL_API_KEY, region: 'aws-us-east-1', baseUrl: process.env.ARCHIL_URL, s3BaseUrl: process.env.ARCHIL_URL });
const out = { errors: {} };
const step = async (name, fn) => { try { out[name] = await fn(); } catch (e) { out.errors[name] = String(e && e.stack || e); } };
const failure = async fn => { try { await fn(); return null; } catch (e) { return { name: e.name, status: e.status ?? null, code: e.code ?? null, api: e instanceof ArchilApiError, s3: e instanceof ArchilS3Error }; } };
let disk;
await step('create', async () => {
  const made = await a.disks.create({ name: 'client-disk' });
  disk = made.disk;
  return { id: made.disk.id, name: made.disk.name, token: made.token, tokenIdentifier: made.tokenIdentifier };
});
await step('create_again', async () => { const again = await a.disks.create({ name: 'client-disk' }); return { id: again.disk.id, token: again.token }; });
await step('create_conflict', () => failure(() => a.disks.create({ name: 'client-disk', allowedIps: ['192.0.2.1'] })));
await step('create_bad_name', () => failure(() => a.disks.create({ name: 'no spaces' })));
await step('list', async () => ({
  byName: (await a.disks.list({ name: 'client-disk' })).map(d => d.id),
  other: (await a.disks.list({ name: 'other' })).length,
  all: (await a.disks.list()).map(d => d.id),
}));
await step('get', async () => {
  const d = await a.disks.get(disk.id);
  return { id: d.id, name: d.name, status: d.status, region: d.region, organization: d.organization, provider: d.provider, createdAt: d.createdAt };
});
await step('get_missing', () => failure(() => a.disks.get('dsk-0000000000000000')));
await step('exec', async () => {
  const r = await disk.exec('printf out; printf err >&2; exit 3');
  return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr, timing: r.timing };
});
await step('objects', async () => {
  const put = await disk.putObject('dir/a b.txt', 'first content');
  await disk.putObject('dir/sub/ü.bin', new Uint8Array([0, 1, 2, 255]));
  await disk.putObject('top.txt', 'top', 'text/plain');
  const text = new TextDecoder().decode(await disk.getObject('dir/a b.txt'));
  const bytes = Array.from(await disk.getObject('dir/sub/ü.bin'));
  const head = await disk.headObject('dir/a b.txt');
  const headMissing = await disk.headObject('dir/nope');
  const missing = await failure(() => disk.getObject('dir/nope'));
  return { etag: put.etag ?? null, text, bytes, head: { size: head.size, etag: head.etag ?? null, lastModified: head.lastModified ? head.lastModified.toISOString() : null }, headMissing, missing };
});
await step('exec_sees_objects', async () => (await disk.exec('cat "dir/a b.txt"; ls dir/sub')).stdout);
await step('list_objects', async () => {
  for (let i = 0; i < 5; i++) await disk.putObject('many/f' + i, 'x'.repeat(i));
  const level = await disk.listObjects('dir/');
  const all = await disk.listObjects('', { recursive: true });
  const first = await disk.listObjects('many/', { singlePage: true });
  const next = await disk.listObjects('many/', { singlePage: true, continuationToken: first.nextContinuationToken });
  const after = await disk.listObjects('many/', { startAfter: 'many/f2' });
  return {
    levelKeys: level.objects.map(o => o.key), levelPrefixes: level.commonPrefixes, levelSize: level.objects.map(o => o.size),
    allKeys: all.objects.map(o => o.key).sort(),
    first: { keys: first.objects.map(o => o.key), truncated: first.isTruncated, keyCount: first.keyCount, token: !!first.nextContinuationToken },
    next: { keys: next.objects.map(o => o.key), truncated: next.isTruncated },
    after: after.objects.map(o => o.key),
    lastModified: level.objects.every(o => o.lastModified instanceof Date && !isNaN(o.lastModified)),
  };
});
await step('delete_object', async () => {
  await disk.deleteObject('top.txt');
  await disk.deleteObject('top.txt');
  return { exists: await disk.objectExists('top.txt'), other: await disk.objectExists('dir/a b.txt') };
});
await step('bad_key', async () => {
  const bad = new Archil({ apiKey: 'wrong', region: 'aws-us-east-1', baseUrl: process.env.ARCHIL_URL, s3BaseUrl: process.env.ARCHIL_URL });
  const badDisk = new Disk(disk.toJSON(), bad.disks._client, 'aws-us-east-1', process.env.ARCHIL_URL);
  return { control: await failure(() => bad.disks.get(disk.id)), objects: await failure(() => badDisk.getObject('dir/a b.txt')) };
});
await step('delete', async () => {
  await disk.delete();
  return { after: await failure(() => a.disks.get(disk.id)) };
});
console.log(JSON.stringify(out));
`

// failure is what the script reports of a call that threw.
type failure struct {
	Name   string
	Status int
	Code   *string
	API    bool
	S3     bool
}

// clientResult is what clientScript prints.
type clientResult struct {
	Errors map[string]string `json:"errors"`
	Create struct {
		ID, Name, Token, TokenIdentifier string
	} `json:"create"`
	CreateAgain struct {
		ID    string
		Token *string
	} `json:"create_again"`
	CreateConflict *failure `json:"create_conflict"`
	CreateBadName  *failure `json:"create_bad_name"`
	List           struct {
		ByName []string
		Other  int
		All    []string
	} `json:"list"`
	Get struct {
		ID, Name, Status, Region, Organization, Provider, CreatedAt string
	} `json:"get"`
	GetMissing *failure `json:"get_missing"`
	Exec       struct {
		ExitCode       int
		Stdout, Stderr string
		Timing         map[string]float64
	} `json:"exec"`
	Objects struct {
		ETag  *string
		Text  string
		Bytes []int
		Head  struct {
			Size         int
			ETag         *string
			LastModified *string
		}
		HeadMissing *struct{}
		Missing     *failure
	} `json:"objects"`
	ExecSeesObjects string `json:"exec_sees_objects"`
	ListObjects     struct {
		LevelKeys, LevelPrefixes []string
		LevelSize                []int
		AllKeys                  []string
		First                    struct {
			Keys      []string
			Truncated bool
			KeyCount  int
			Token     bool
		}
		Next struct {
			Keys      []string
			Truncated bool
		}
		After        []string
		LastModified bool
	} `json:"list_objects"`
	DeleteObject struct{ Exists, Other bool } `json:"delete_object"`
	BadKey       struct {
		Control, Objects *failure
	} `json:"bad_key"`
	Delete struct{ After *failure } `json:"delete"`
}

// TestVendorClient drives the fake with Archil's own JavaScript client,
// pointed at it by baseUrl and s3BaseUrl, through every call
// providers/archil makes that the client can say: create a disk (again,
// and in conflict), list by name, get, exec, PutObject, GetObject,
// HeadObject, DeleteObject, ListObjectsV2 (one level, recursive, by page,
// start-after), and the errors of each. It needs Node and npm (and the
// npm registry on its first run); without them it is skipped, or fails
// under BOXFS_REQUIRE_NPM=1.
func TestVendorClient(t *testing.T) {
	client := installClient(t)
	srv := archiltest.New(archiltest.Options{})
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	script := filepath.Join(dir, "drive.mjs")
	require.NoError(t, os.WriteFile(script, []byte(clientScript), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Env = append(os.Environ(), "ARCHIL_URL="+srv.URL(), "ARCHIL_API_KEY="+srv.APIKey(), "ARCHIL_CLIENT="+client,
		"ARCHIL_REGION=", "ARCHIL_S3_BASE_URL=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node: %s", stderr.String())
	var res clientResult
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), "the script printed %q", stdout.String())
	for step, e := range res.Errors {
		t.Errorf("client step %s failed: %s", step, e)
	}

	id := res.Create.ID
	assert.Regexp(t, `^dsk-[0-9a-f]{16}$`, id)
	assert.Equal(t, "client-disk", res.Create.Name)
	assert.NotEmpty(t, res.Create.Token, "the one-time token of a new disk")
	assert.NotEmpty(t, res.Create.TokenIdentifier)
	assert.Equal(t, id, res.CreateAgain.ID, "a create of an existing name and configuration is that disk")
	assert.Nil(t, res.CreateAgain.Token, "the token is shown once")
	assert.Equal(t, &failure{Name: "ArchilApiError", Status: 409, API: true}, res.CreateConflict)
	assert.Equal(t, &failure{Name: "ArchilApiError", Status: 400, API: true}, res.CreateBadName)
	assert.Equal(t, []string{id}, res.List.ByName)
	assert.Equal(t, 0, res.List.Other)
	assert.Equal(t, []string{id}, res.List.All)
	assert.Equal(t, id, res.Get.ID)
	assert.Equal(t, "available", res.Get.Status)
	assert.Equal(t, "aws-us-east-1", res.Get.Region)
	assert.NotEmpty(t, res.Get.Organization)
	assert.NotEmpty(t, res.Get.Provider)
	_, err := time.Parse(time.RFC3339Nano, res.Get.CreatedAt)
	assert.NoError(t, err, "createdAt")
	assert.Equal(t, &failure{Name: "ArchilApiError", Status: 404, API: true}, res.GetMissing)
	assert.Equal(t, 3, res.Exec.ExitCode)
	assert.Equal(t, "out", res.Exec.Stdout)
	assert.Equal(t, "err", res.Exec.Stderr)
	for _, k := range []string{"totalMs", "queueMs", "executeMs"} {
		assert.Contains(t, res.Exec.Timing, k)
	}
	assert.Equal(t, "first content", res.Objects.Text)
	assert.Equal(t, []int{0, 1, 2, 255}, res.Objects.Bytes)
	assert.Equal(t, 13, res.Objects.Head.Size)
	assert.NotNil(t, res.Objects.ETag, "PutObject answers an ETag")
	if assert.NotNil(t, res.Objects.Head.ETag) && res.Objects.ETag != nil {
		assert.Equal(t, *res.Objects.ETag, *res.Objects.Head.ETag, "HeadObject's ETag is PutObject's")
	}
	assert.NotNil(t, res.Objects.Head.LastModified)
	assert.Nil(t, res.Objects.HeadMissing, "HeadObject of a missing key")
	noSuchKey := "NoSuchKey"
	assert.Equal(t, &failure{Name: "ArchilS3Error", Status: 404, Code: &noSuchKey, S3: true}, res.Objects.Missing)
	assert.Equal(t, "first content\u00fc.bin\n", res.ExecSeesObjects, "a command sees the objects written, under their keys")
	assert.Equal(t, []string{"dir/a b.txt"}, res.ListObjects.LevelKeys)
	assert.Equal(t, []string{"dir/sub/"}, res.ListObjects.LevelPrefixes)
	assert.Equal(t, []int{13}, res.ListObjects.LevelSize)
	assert.Equal(t, []string{"dir/a b.txt", "dir/sub/ü.bin", "many/f0", "many/f1", "many/f2", "many/f3", "many/f4", "top.txt"}, res.ListObjects.AllKeys,
		"a recursive listing over pages of 3")
	assert.Equal(t, []string{"many/f0", "many/f1", "many/f2"}, res.ListObjects.First.Keys)
	assert.True(t, res.ListObjects.First.Truncated)
	assert.Equal(t, 3, res.ListObjects.First.KeyCount)
	assert.True(t, res.ListObjects.First.Token)
	assert.Equal(t, []string{"many/f3", "many/f4"}, res.ListObjects.Next.Keys)
	assert.False(t, res.ListObjects.Next.Truncated)
	assert.Equal(t, []string{"many/f3", "many/f4"}, res.ListObjects.After)
	assert.True(t, res.ListObjects.LastModified, "every object's LastModified is a date")
	assert.False(t, res.DeleteObject.Exists)
	assert.True(t, res.DeleteObject.Other)
	assert.Equal(t, &failure{Name: "ArchilApiError", Status: 401, API: true}, res.BadKey.Control)
	accessDenied := "AccessDenied"
	assert.Equal(t, &failure{Name: "ArchilS3Error", Status: 403, Code: &accessDenied, S3: true}, res.BadKey.Objects)
	assert.Equal(t, &failure{Name: "ArchilApiError", Status: 404, API: true}, res.Delete.After)
	assert.Empty(t, srv.DiskIDs())

	// What the client sent: every upload with its length.
	for _, r := range srv.Requests() {
		if r.Method == "PUT" {
			assert.GreaterOrEqual(t, r.Length, int64(0), "PUT %s has a Content-Length", r.Path)
		}
	}
}

// installClient installs the vendor's client once into the user's cache
// and returns the path of its ES module; without Node and npm it skips the
// test, or fails it under BOXFS_REQUIRE_NPM=1.
func installClient(t *testing.T) string {
	t.Helper()
	testbox.RequireNPM(t)
	name, version, _ := strings.Cut(archiltest.ClientPackage, "@")
	cache, err := os.UserCacheDir()
	require.NoError(t, err)
	dir := filepath.Join(cache, "boxfs", "npm-"+name+"-"+version)
	entry := filepath.Join(dir, "node_modules", name, "dist", "index.js")
	if _, err := os.Stat(entry); err == nil {
		return entry
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(dir), 0o755))
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	require.NoError(t, err)
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	msg, err := exec.CommandContext(ctx, "npm", "install", "--prefix", tmp, "--no-audit", "--no-fund", "--no-save", archiltest.ClientPackage).CombinedOutput()
	if err != nil {
		testbox.NPMUnavailable(t, "npm install %s: %v\n%s", archiltest.ClientPackage, err, msg)
	}
	if err := os.Rename(tmp, dir); err != nil {
		_, serr := os.Stat(entry) // another test process got there first
		require.NoError(t, serr, "installing the client: %v", err)
	}
	return entry
}
