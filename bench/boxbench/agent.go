package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// W9 and W10 are what an agent host costs with its cwd in the box's
// workspace and its shell the box's (docs/agents.md): a bare command
// through the shell, and one turn of read + edit + bash.

// shellCmd is the command line a peer's shell runs: `SHELL -c line` in
// the workspace directory rel ("" the workspace itself).
func (x *rep) shellCmd(rel, line string) *exec.Cmd {
	cmd := x.p.shell(x.ctx, x.r, rel, line)
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// runShell runs cmd and returns its stdout and its wall time (the
// shell's process start on the host included, as an agent host sees it).
func runShell(cmd *exec.Cmd) (string, time.Duration, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil || stderr.Len() > 0 {
		return stdout.String(), d, fmt.Errorf("%s: %v: stderr %q", clip(strings.Join(cmd.Args, " "), 120), err, clip(stderr.String(), 300))
	}
	return stdout.String(), d, nil
}

// w9 runs `true` through the peer's shell, with the cwd in the
// workspace's bench directory: the shell's own cost, to set beside W7
// (the same `true` on the peer's command channel, no shell).
func (x *rep) w9() {
	if x.p.shell == nil {
		return
	}
	for range x.sz.execs {
		out, d, err := runShell(x.shellCmd("bench", "true"))
		if err == nil && out != "" {
			err = fmt.Errorf("true printed %q", clip(out, 100))
		}
		if err != nil {
			x.fail(err, "w9.sh")
			return
		}
		x.record("w9.sh", d, "")
	}
}

// w10 runs agent turns: read a file, edit it (read, change, write back,
// as pi's edit tool does), then bash in its directory `LC_ALL=C ls && cat
// NAME`, whose output must show the edit: the shell's barrier puts it in
// the box first. On the mounts the read and edit go through the mount;
// on docker-exec each is a docker exec (cat; cat > file). Peers without
// a shell in the box (loopback, sshfs, rclone) do the read and the edit
// only, and get no bash or turn time. After each turn the box is checked,
// off the clock, to hold the edit.
func (x *rep) w10() {
	defer x.watch("w10")()
	rows := []string{"w10.read", "w10.edit"}
	if x.p.shell != nil {
		rows = append(rows, "w10.bash", "w10.turn")
	}
	for k, f := range x.ds.turnSet {
		rel := path.Join("bench", "tree", path.Dir(f))
		name := path.Base(f)
		boxFile := x.boxBench() + "/tree/" + f
		// What the box has, and the listing bash must print (off the
		// clock).
		want, err := x.boxOK("sha256sum " + q(boxFile) + " | cut -c1-64")
		var ls string
		if err == nil {
			ls, err = x.boxOK("cd " + q(path.Dir(boxFile)) + " && LC_ALL=C ls")
		}
		if err != nil {
			x.fail(err, rows...)
			return
		}
		tail := fmt.Sprintf("\n// boxbench agent turn %d, repetition %d\n", k, x.n)

		t0 := time.Now()
		b, err := x.turnRead(f)
		read := time.Since(t0)
		if err == nil && sha(b) != want {
			err = fmt.Errorf("read %s: %d bytes, not the box's", f, len(b))
		}
		if err != nil {
			x.fail(err, rows...)
			return
		}

		t0 = time.Now()
		content, err := x.turnEdit(f, tail)
		edit := time.Since(t0)
		if err != nil {
			x.fail(err, rows...)
			return
		}

		var bash time.Duration
		if x.p.shell != nil {
			var out string
			out, bash, err = runShell(x.shellCmd(rel, "LC_ALL=C ls && cat "+q(name)))
			if err == nil && out != ls+"\n"+string(content) {
				err = fmt.Errorf("bash `ls && cat %s` printed %d bytes, want the listing and the edit (%d bytes): %q", name, len(out), len(ls)+1+len(content), clip(out, 200))
			}
			if err != nil {
				x.fail(err, rows...)
				return
			}
		}
		if _, err := x.waitBox(time.Now(), hasEdit(boxFile, content), "ok", landTimeout, 50*time.Millisecond); err != nil {
			x.fail(err, rows...)
			return
		}
		x.record("w10.read", read, "")
		x.record("w10.edit", edit, "")
		if x.p.shell != nil {
			x.record("w10.bash", bash, "")
			x.record("w10.turn", read+edit+bash, "")
		}
	}
}

// turnRead reads tree file f as the agent's read tool does.
func (x *rep) turnRead(f string) ([]byte, error) {
	if !x.p.noMount {
		return os.ReadFile(filepath.Join(x.bench(), "tree", f))
	}
	return x.r.docker(x.ctx, true, nil, "exec", x.r.ctr, "cat", x.boxBench()+"/tree/"+f)
}

// turnEdit appends tail to tree file f as an edit tool does: read it,
// change it, write it back in place. It returns the new content.
func (x *rep) turnEdit(f, tail string) ([]byte, error) {
	b, err := x.turnRead(f)
	if err != nil {
		return nil, err
	}
	content := append(b, tail...)
	if !x.p.noMount {
		return content, os.WriteFile(filepath.Join(x.bench(), "tree", f), content, 0o644)
	}
	_, err = x.r.docker(x.ctx, true, content, "exec", "-i", x.r.ctr, "sh", "-c", `cat > "$1"`, "sh", x.boxBench()+"/tree/"+f)
	return content, err
}
