package main

// The CLI as a newcomer and an admin meet it: the README's first command,
// an fstab line mounted by mount(8), exec's stdin, signals and missing
// boxes, the errors a user makes, help and completion as docs/cli.md says.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoFile reads a file of the repository (the tests run in cmd/boxfs).
func repoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// shell runs script with bash in dir with env, bounded by cmdTimeout.
func shell(t *testing.T, dir string, env []string, script string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	cmd.WaitDelay = 10 * time.Second
	cmd.Dir, cmd.Env = dir, env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("bash: %v", err)
	}
	return out.String(), errb.String(), code
}

// TestReadmeFirstCommand runs the README's first command block as a
// newcomer pastes it, in a clean environment: the build line becomes a
// link to the test's binary (built the same way), the mount point a
// temporary one. Its output is what the README shows, and the cleanup the
// README gives removes the box and the mount.
func TestReadmeFirstCommand(t *testing.T) {
	needMount(t)
	readme := repoFile(t, "README.md")
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no sh block")
	}
	block := blocks[0][1]
	const build = "CGO_ENABLED=0 go build ./cmd/boxfs"
	if !strings.Contains(block, build) {
		t.Fatalf("README's first block does not build with %q:\n%s", build, block)
	}
	h := newHarness(t)
	dir := t.TempDir()
	mnt := filepath.Join(t.TempDir(), "boxes")
	h.cleanup(mnt)
	var script []string
	var want []string
	for _, l := range strings.Split(block, "\n") {
		if strings.HasPrefix(l, "# ") { // the README's shown output
			want = append(want, strings.TrimPrefix(l, "# "))
			continue
		}
		script = append(script, l)
	}
	text := strings.Join(script, "\n")
	text = strings.ReplaceAll(text, build, "ln -s "+h.bin+" boxfs")
	text = strings.ReplaceAll(text, "/tmp/boxes", mnt)
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + t.TempDir(), "BOXFS_STATE=" + h.state}
	stdout, stderr, code := shell(t, dir, env, "set -e\n"+text)
	if code != 0 {
		t.Fatalf("README block: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if len(want) == 0 {
		t.Fatal("README's first block shows no output (# lines)")
	}
	got := strings.Split(strings.TrimRight(stdout+stderr, "\n"), "\n")
	for _, w := range want {
		// The shown output names /tmp/boxes, the default state directory
		// and an id; the id and the kernel vary.
		re := regexp.QuoteMeta(strings.ReplaceAll(w, "/tmp/boxes", mnt))
		re = strings.ReplaceAll(re, "/var/lib/boxfs", regexp.QuoteMeta(h.state))
		re = strings.ReplaceAll(re, `\.\.\.`, ".*")
		re = regexp.MustCompile(`\d+`).ReplaceAllString(re, `\d+`)
		found := false
		for _, g := range got {
			if regexp.MustCompile("^" + re + "$").MatchString(g) {
				found = true
			}
		}
		if !found {
			t.Errorf("README shows %q; the run printed:\n%s%s", w, stdout, stderr)
		}
	}
	if isMountpoint(mnt) {
		t.Errorf("the README's block leaves %s mounted", mnt)
	}
	if rows := h.boxes(); len(rows) != 0 {
		t.Errorf("the README's block leaves boxes: %+v", rows)
	}
}

// TestFstab mounts an fstab line through mount(8), which runs mount.fuse
// (package fuse3), which runs `boxfs mount MOUNTPOINT -o OPTIONS` with an
// empty environment, so boxfs must be in sh's default PATH: the test runs
// in a private mount namespace with its binary bound over /usr/local/bin.
// The line is docs/cli.md's, with this test's paths. umount(8) ends it.
func TestFstab(t *testing.T) {
	needMount(t)
	if os.Geteuid() != 0 {
		t.Skip("mount -T needs root")
	}
	for _, bin := range []string{"unshare", "mount", "umount", "findmnt"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("no %s", bin)
		}
	}
	helper := ""
	for _, p := range []string{"/sbin/mount.fuse", "/usr/sbin/mount.fuse", "/sbin/mount.fuse3", "/usr/sbin/mount.fuse3"} {
		if _, err := os.Stat(p); err == nil {
			helper = p
			break
		}
	}
	if helper == "" {
		t.Skip("no mount.fuse (Debian package fuse3)")
	}
	doc := repoFile(t, "docs/cli.md")
	line := regexp.MustCompile(`(?m)^mount\s+/boxes\s+fuse\.boxfs\s+(\S+)\s+0\s+0$`).FindStringSubmatch(doc)
	if line == nil {
		t.Fatal("docs/cli.md has no fstab line `mount /boxes fuse.boxfs OPTIONS 0 0`")
	}
	h := newHarness(t)
	opts := strings.Replace(line[1], "state=/var/lib/boxfs", "state="+h.state, 1)
	if opts == line[1] {
		t.Fatalf("the documented options %q name no state=/var/lib/boxfs", line[1])
	}
	mnt := filepath.Join(t.TempDir(), "boxes")
	must(t, os.Mkdir(mnt, 0o755))
	h.cleanup(mnt) // the daemon lives in the namespace; umount signals it
	bindir := t.TempDir()
	must(t, os.Symlink(h.bin, filepath.Join(bindir, "boxfs")))
	fstab := filepath.Join(t.TempDir(), "fstab")
	must(t, os.WriteFile(fstab, []byte(fmt.Sprintf("mount  %s  fuse.boxfs  %s  0  0\n", mnt, opts)), 0o644))

	script := fmt.Sprintf(`set -e
mount --bind %[1]s /usr/local/bin
mount -T %[2]s %[3]s
echo "type $(findmnt -n -o FSTYPE %[3]s)"
test -f %[3]s/ctl
mkdir %[3]s/fb
echo 'echo hello from fstab; exit 3' > %[3]s/fb/exec
cat %[3]s/fb/exec
echo "status $(cat %[3]s/fb/cmds/last/status)"
pid=$(sed 's/.*"pid": *\([0-9]*\).*/\1/' %[4]s/mount.json)
echo "$pid" > %[5]s
umount %[3]s
for i in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then echo "daemon $pid still runs"; exit 1; fi
if findmnt %[3]s >/dev/null; then echo "still mounted"; exit 1; fi
echo unmounted
`, bindir, fstab, mnt, h.state, filepath.Join(bindir, "pid"))
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	stdout, stderr, code := shell(t, "/", env, "exec unshare -m --propagation private bash -c '"+strings.ReplaceAll(script, "'", `'\''`)+"'")
	want := "type fuse.boxfs\nhello from fstab\nstatus exit 3\nunmounted\n"
	if code != 0 || stdout != want {
		t.Fatalf("fstab mount: exit %d\nstdout: %q\nwant:   %q\nstderr: %s\nlog: %s", code, stdout, want, stderr, tailOf(filepath.Join(h.state, mountLog)))
	}
	if !strings.Contains(stderr, "mounted at "+mnt) {
		t.Errorf("mount(8) printed %q, want boxfs's 'mounted at %s'", stderr, mnt)
	}
	if isMountpoint(mnt) {
		t.Errorf("the namespace's mount leaked into the test's")
	}
}

func tailOf(name string) string {
	b, _ := os.ReadFile(name)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// TestExecUX: stdin is not passed (a reader of it ends at once, never
// hangs); a box that does not exist is one line and exit 1, naming exec
// and the box; SIGTERM kills the command and exits 143 as a shell would;
// in both modes.
func TestExecUX(t *testing.T) {
	needMount(t)
	h := newHarness(t)
	mnt := filepath.Join(t.TempDir(), "mnt")
	h.cleanup(mnt)
	h.ok("new", "ux", "lifetime=10m")
	for _, mode := range []string{"direct", "mounted"} {
		t.Run("mode="+mode, func(t *testing.T) {
			if mode == "mounted" {
				h.mountBackground(mnt)
			}
			ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
			defer cancel()
			cmd := h.cmd(ctx, "exec", "ux", "--", "cat")
			cmd.Stdin = strings.NewReader("typed by the user\n")
			out, err := cmd.Output()
			if err != nil || len(out) != 0 {
				t.Errorf("echo ... | exec ux -- cat: %v, stdout %q; want exit 0 and nothing (stdin is not passed)", err, out)
			}

			r := h.run("exec", "nosuchbox", "--", "true")
			if r.code != exitError || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, `boxfs: exec`) || !strings.Contains(r.stderr, `no box named "nosuchbox"`) {
				t.Errorf("exec of a missing box: exit %d, stderr %q; want 1 and one line `boxfs: exec ... no box named \"nosuchbox\"`", r.code, r.stderr)
			}

			cmd = h.cmd(ctx, "exec", "ux", "--", "sh", "-c", "echo started; sleep 6011")
			stdout, err := cmd.StdoutPipe()
			must(t, err)
			must(t, cmd.Start())
			buf := make([]byte, len("started\n"))
			if _, err := stdout.Read(buf); err != nil || string(buf) != "started\n" {
				t.Fatalf("first output %q, %v", buf, err)
			}
			must(t, cmd.Process.Signal(syscall.SIGTERM))
			err = cmd.Wait()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 128+int(syscall.SIGTERM) {
				t.Errorf("exec after SIGTERM: %v, want exit 143", err)
			}
			if pids := processesLeft(10*time.Second, "sleep", "6011"); len(pids) > 0 {
				t.Errorf("sleep still runs in the box: pids %v", pids)
			}
		})
	}
}

// TestUserErrors: the mistakes a user makes, each one line on stderr with
// the documented status, no usage dump, no Go trace.
func TestUserErrors(t *testing.T) {
	needMount(t)
	h := newHarness(t)
	dir := t.TempDir()
	yamlSyntax := filepath.Join(dir, "syntax.yaml")
	must(t, os.WriteFile(yamlSyntax, []byte("provider: local\nboxes: [\n  x: y\n"), 0o600))
	yamlKey := filepath.Join(dir, "key.yml")
	must(t, os.WriteFile(yamlKey, []byte("environments:\n  dev:\n    memry: 2g\n"), 0o600))
	file := filepath.Join(dir, "a-file")
	must(t, os.WriteFile(file, nil, 0o600))
	empty := filepath.Join(dir, "empty")
	must(t, os.Mkdir(empty, 0o755))
	mnt := filepath.Join(dir, "mnt")
	h.cleanup(mnt)
	h.mountBackground(mnt)
	other := &harness{t: t, bin: h.bin, state: t.TempDir()}

	cases := []struct {
		name string
		h    *harness
		args []string
		code int
		want string
	}{
		{"yaml syntax", h, []string{"--config", yamlSyntax, "ls"}, exitUsage, "syntax.yaml: yaml: line"},
		{"yaml unknown key", h, []string{"--config", yamlKey, "ls"}, exitUsage, `line 3: unknown key "memry"`},
		{"mount on a file", other, []string{"mount", file}, exitError, "not a directory"},
		{"mount on a file in the background", other, []string{"mount", file, "--background"}, exitError, "not a directory"},
		{"mount over another state's mount", other, []string{"mount", mnt, "--background"}, exitError, "boxfs umount " + mnt},
		{"umount of a directory not mounted", other, []string{"umount", empty}, exitError, "nothing is mounted there"},
		{"umount of nothing", other, []string{"umount", filepath.Join(dir, "missing")}, exitError, "no such file"},
		{"help of an unknown command", h, []string{"help", "frob"}, exitUsage, "frob"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			r := c.h.run(c.args...)
			if r.code != c.code {
				t.Errorf("exit %d, want %d; stderr %q", r.code, c.code, r.stderr)
			}
			if strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "boxfs: ") {
				t.Errorf("stderr is not one `boxfs: ` line: %q", r.stderr)
			}
			if !strings.Contains(r.stderr, c.want) {
				t.Errorf("stderr %q does not say %q", r.stderr, c.want)
			}
			if strings.Contains(r.stderr, "goroutine") || strings.Contains(r.stderr, "main.") {
				t.Errorf("stderr shows Go internals: %q", r.stderr)
			}
		})
	}
	if fi, err := os.Stat(file); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the refused mount changed %s: %v %v", file, fi, err)
	}
	if _, err := readMountRecord(other.state); err == nil {
		t.Errorf("a refused mount left a mount record")
	}
}

// TestHelpMatchesDocs: --help lists every command docs/cli.md documents
// (and no other), mount --help every -o option it documents; the bash
// completion script is valid bash and completes box names.
func TestHelpMatchesDocs(t *testing.T) {
	h := newHarness(t)
	h.cleanup(filepath.Join(t.TempDir(), "unused"))
	doc := repoFile(t, "docs/cli.md")
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^### `boxfs (\\w+)").FindAllStringSubmatch(doc, -1) {
		documented[m[1]] = true
	}
	help := h.ok("--help")
	listed := map[string]bool{}
	inCommands := false
	for _, l := range strings.Split(help, "\n") {
		switch {
		case l == "COMMANDS:":
			inCommands = true
		case inCommands && strings.HasPrefix(l, "   "):
			name := strings.TrimSuffix(strings.Fields(l)[0], ",")
			if name != "help" {
				listed[name] = true
			}
		case inCommands:
			inCommands = false
		}
	}
	for c := range documented {
		if !listed[c] {
			t.Errorf("docs/cli.md documents `boxfs %s`; --help does not list it", c)
		}
	}
	for c := range listed {
		if !documented[c] {
			t.Errorf("--help lists %s; docs/cli.md does not document it", c)
		}
	}
	if len(strings.Split(help, "\n")) > 60 {
		t.Errorf("--help is %d lines", len(strings.Split(help, "\n")))
	}

	mountHelp := h.ok("mount", "--help")
	row := regexp.MustCompile("(?m)^\\| `-o OPTS` \\|(.*)\\|$").FindStringSubmatch(doc)
	if row == nil {
		t.Fatal("docs/cli.md has no -o row")
	}
	for _, m := range regexp.MustCompile("`([a-z_]+)[=`]").FindAllStringSubmatch(row[1], -1) {
		if !strings.Contains(mountHelp, m[1]) {
			t.Errorf("docs/cli.md documents -o %s; mount --help does not", m[1])
		}
	}
	if strings.Contains(mountHelp, "(default: 0s)") {
		t.Errorf("mount --help shows a default of 0s: %q", mountHelp)
	}

	h.ok("new", "compbox", "lifetime=5m")
	script := h.ok("completion", "bash")
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	probe := script + fmt.Sprintf("\nCOMP_WORDS=(%s --state %s --config '' exec c); COMP_CWORD=6; _boxfs_complete; echo \"${COMPREPLY[@]}\"\n", h.bin, h.state)
	stdout, stderr, code := shell(t, "/", env, probe)
	if code != 0 || strings.TrimSpace(stdout) != "compbox" {
		t.Errorf("bash completion of `exec c`: exit %d, %q (stderr %q); want compbox", code, stdout, stderr)
	}
	for _, sh := range []string{"zsh", "fish"} {
		if out := h.ok("completion", sh); !strings.Contains(out, "boxfs") {
			t.Errorf("completion %s: %q", sh, out)
		}
	}
}

// umount never signals a process a stale mount.json names (a reused pid):
// only the boxfs daemon that holds the state directory's lock and serves
// that mount point.
func TestUmountStaleRecord(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	sleeper := exec.Command("sleep", "60")
	require.NoError(t, sleeper.Start())
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	require.NoError(t, os.MkdirAll(h.state, 0o700))
	rec := fmt.Sprintf(`{"mountpoint": %q, "pid": %d, "started": "2026-01-01T00:00:00Z", "version": "x"}`, dir, sleeper.Process.Pid)
	require.NoError(t, os.WriteFile(filepath.Join(h.state, "mount.json"), []byte(rec), 0o600))

	r := h.run("umount", dir)
	assert.Equal(t, exitError, r.code, r.stderr)
	assert.Contains(t, r.stderr, "nothing is mounted there")
	assert.NoError(t, sleeper.Process.Signal(syscall.Signal(0)), "the process the stale record names is alive")
	var st syscall.WaitStatus
	wpid, _ := syscall.Wait4(sleeper.Process.Pid, &st, syscall.WNOHANG, nil)
	assert.Zero(t, wpid, "the process the stale record names was not signalled (%v)", st)
}
