package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// repTimeout bounds one peer's repetition; past it the peer's daemon is
// killed and its mount detached, so a hung file system cannot hang the run.
const repTimeout = 15 * time.Minute

// landTimeout bounds waiting for written files to reach the box.
const landTimeout = 3 * time.Minute

// rep is one repetition of the workloads on one peer.
type rep struct {
	r     *run
	p     *peer
	ds    *dataset
	sz    sizes
	n     int
	delay time.Duration

	ctx     context.Context
	mounted bool
	fails   []string
	oks     int
}

func (x *rep) summary() string {
	s := fmt.Sprintf("%d samples", x.oks)
	if len(x.fails) > 0 {
		s += fmt.Sprintf(", FAIL: %s", strings.Join(x.fails, "; "))
	}
	return s
}

func (x *rep) record(row string, d time.Duration, note string) {
	x.oks++
	x.r.rec.add(sample{Delay: x.delay, Profile: x.sz.name, Rep: x.n, Peer: x.p.name, Row: row, Value: seconds(d, rowUnit(row)), OK: true, Note: note})
}

func (x *rep) censored(row string, d time.Duration, note string) {
	x.r.rec.add(sample{Delay: x.delay, Profile: x.sz.name, Rep: x.n, Peer: x.p.name, Row: row, Value: seconds(d, rowUnit(row)), OK: true, Censored: true, Note: note})
}

// count records a count (unit "n") for row.
func (x *rep) count(row string, n uint64, note string) {
	x.oks++
	x.r.rec.add(sample{Delay: x.delay, Profile: x.sz.name, Rep: x.n, Peer: x.p.name, Row: row, Value: float64(n), OK: true, Note: note})
}

// fail records FAIL for rows: their check did not pass (or they could not
// run), so they get no time.
func (x *rep) fail(err error, rows ...string) {
	note := strings.ReplaceAll(err.Error(), "\n", " ")
	x.fails = append(x.fails, fmt.Sprintf("%s: %s", strings.Join(rows, ","), clip(note, 200)))
	for _, row := range rows {
		x.r.rec.add(sample{Delay: x.delay, Profile: x.sz.name, Rep: x.n, Peer: x.p.name, Row: row, OK: false, Note: clip(note, 500)})
	}
}

func seconds(d time.Duration, unit string) float64 {
	if unit == "ms" {
		return float64(d) / float64(time.Millisecond)
	}
	return d.Seconds()
}

// bench is the workloads' directory on the host side and in the box.
func (x *rep) bench() string    { return filepath.Join(x.p.root, "bench") }
func (x *rep) boxBench() string { return x.p.boxRoot + "/bench" }

// sh runs a bash script in dir and returns its stdout and how long it took
// (fork and exec included, as a user would see it).
func (x *rep) sh(dir, script string) (string, time.Duration, error) {
	cmd := exec.CommandContext(x.ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = toolEnv(dir)
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil {
		return stdout.String(), d, fmt.Errorf("%s: %v: %s", clip(script, 80), err, clip(strings.TrimSpace(stderr.String()), 300))
	}
	return stdout.String(), d, nil
}

// waitBox polls script in the box until its output is want, for at most
// bound from now (the command it follows may itself have taken longer); it
// returns the time from t0 until then.
func (x *rep) waitBox(t0 time.Time, script, want string, bound time.Duration, pause time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(bound)
	var last string
	for {
		ctx, cancel := context.WithTimeout(x.ctx, time.Minute)
		out, _, err := x.p.probe.run(ctx, script)
		cancel()
		at := time.Since(t0)
		if err != nil {
			return 0, err
		}
		if strings.TrimSpace(out) == want {
			return at, nil
		}
		last = out
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("not in the box after %v: %q gives %q, want %q", bound, clip(script, 80), clip(last, 100), want)
		}
		if pause > 0 {
			time.Sleep(pause)
		}
	}
}

func (x *rep) boxOK(script string) (string, error) {
	ctx, cancel := context.WithTimeout(x.ctx, 5*time.Minute)
	defer cancel()
	out, err := x.p.probe.ok(ctx, script)
	return strings.TrimSpace(out), err
}

// run runs every workload on the peer, in an order that lets each reuse
// the last one's files: W4 (writes the tree), W2 (commits it), W3 and W1
// (read it), W5, W6, W7.
func (x *rep) run(parent context.Context) {
	ctx, cancel := context.WithTimeout(parent, repTimeout)
	defer cancel()
	x.ctx = ctx
	watchdog := context.AfterFunc(ctx, func() {
		if parent.Err() == nil {
			log.Printf("%s rep %d: over %v; killing its daemon", x.p.name, x.n, repTimeout)
		}
		x.p.kill()
	})
	defer watchdog()
	defer x.cleanup()

	if x.p.noMount {
		x.execPeer()
		return
	}
	if x.p.boxRoot != "" {
		if _, err := x.boxOK("rm -rf " + q(x.boxBench())); err != nil {
			x.fail(err, "mount")
			return
		}
	}
	if x.sz.seeded {
		// A local box's workspace is known once it is mounted.
		if x.p.boxRoot == "" && !x.remount() {
			return
		}
		if err := x.seed(); err != nil {
			x.fail(fmt.Errorf("seeding the box: %v", err), "mount")
			return
		}
	}
	if !x.remount() {
		return
	}
	if err := os.MkdirAll(x.bench(), 0o755); err != nil {
		x.fail(err, "mount")
		return
	}
	switch x.sz.suite {
	case suiteTree:
		x.runTree()
		return
	case suiteWAN:
		x.runWAN()
		return
	case suiteAgent:
		x.w7()
		x.w9()
		x.w10()
		x.end()
		return
	case suiteBig:
		x.w5write()
		if x.remount() {
			x.w5read()
			x.end()
		}
		return
	}
	if x.sz.seeded {
		x.w4small()
	} else {
		x.w4untar()
		x.w4small()
		x.w2commit()
	}
	if !x.remount() {
		return
	}
	x.w2status()
	if !x.remount() {
		return
	}
	x.w3("lslR", "ls -lR tree | wc -l")
	if !x.remount() {
		return
	}
	x.w3("find", "find tree | wc -l")
	x.w1()
	x.w5write()
	if !x.remount() {
		return
	}
	x.w5read()
	x.w6()
	x.w7()
	x.w9()
	x.w10()
	x.end()
}

// runTree runs the tree workloads of a real-size repository: untar, git
// add + commit, git status, find, grep -r, the large file, rm -rf.
func (x *rep) runTree() {
	x.w4untar()
	x.w2commit()
	if !x.remount() {
		return
	}
	x.w2status()
	if !x.remount() {
		return
	}
	x.w3("find", "find tree | wc -l")
	if !x.remount() {
		return
	}
	x.w3("grep", "grep -rl "+symbol+" tree | wc -l")
	x.w5write()
	if !x.remount() {
		return
	}
	x.w5read()
	x.rmrf()
	x.end()
}

// runWAN runs what a round trip costs most: untar, serial and parallel
// creates, the large file written and read cold.
func (x *rep) runWAN() {
	x.w4untar()
	x.w4small()
	x.w5write()
	if !x.remount() {
		return
	}
	x.w5read()
	x.end()
}

// end unmounts, timed.
func (x *rep) end() {
	t0 := time.Now()
	err := x.p.unmount(x.ctx, x.r)
	x.mounted = false
	if err != nil {
		x.fail(err, "umount")
	} else {
		x.record("umount", time.Since(t0), "")
	}
}

// rmrf removes the tree; it counts once the box has none of it.
func (x *rep) rmrf() {
	defer x.watch("w8.rmrf")()
	_, d, err := x.sh(x.bench(), "rm -rf tree")
	if err == nil {
		_, err = x.waitBox(time.Now(), "test -e "+q(x.boxBench()+"/tree")+" || echo gone", "gone", landTimeout, 50*time.Millisecond)
	}
	if err != nil {
		x.fail(err, "w8.rmrf")
		return
	}
	x.record("w8.rmrf", d, "")
}

func (x *rep) cleanup() {
	if x.mounted {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		if err := x.p.unmount(ctx, x.r); err != nil {
			log.Printf("%s: unmount: %v", x.p.name, err)
		}
		cancel()
		x.mounted = false
	}
	if x.p.boxRoot != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		x.p.probe.ok(ctx, "rm -rf "+q(x.boxBench()))
		cancel()
	}
}

// remount makes the next mount cold: unmount, drop the peer's on-disk
// cache, sync and drop the kernel's caches, mount; the time to mount and
// list the workspace once is recorded.
func (x *rep) remount() bool {
	if x.mounted {
		if err := x.p.unmount(x.ctx, x.r); err != nil {
			x.mounted = false
			x.fail(err, "umount")
			return false
		}
		x.mounted = false
	}
	if x.p.coldPrep != nil {
		if err := x.p.coldPrep(x.r); err != nil {
			x.fail(err, "mount")
			return false
		}
	}
	if err := dropCaches(); err != nil {
		x.fail(fmt.Errorf("drop caches: %v", err), "mount")
		return false
	}
	t0 := time.Now()
	if err := x.p.mount(x.ctx, x.r); err != nil {
		x.fail(err, "mount")
		return false
	}
	x.mounted = true
	if _, err := os.ReadDir(x.p.root); err != nil {
		x.fail(err, "mount")
		return false
	}
	x.record("mount", time.Since(t0), "")
	return true
}

// seed puts the tree, committed, into the box straight (off the clock):
// the latency runs measure reading and editing it, not writing it.
func (x *rep) seed() error {
	bench := x.boxBench()
	if _, err := x.boxOK("rm -rf " + q(bench) + " && mkdir -p " + q(bench)); err != nil {
		return err
	}
	if x.p.seedTar != nil {
		tarData, err := os.ReadFile(x.ds.tarPath)
		if err != nil {
			return err
		}
		if err := x.p.seedTar(x.ctx, tarData, bench); err != nil {
			return err
		}
	} else if x.p.inBox {
		tarData, err := os.ReadFile(x.ds.tarPath)
		if err != nil {
			return err
		}
		if _, err := x.r.docker(x.ctx, false, tarData, "exec", "-i", x.r.ctr, "tar", "-x", "-C", bench); err != nil {
			return err
		}
	} else if _, err := x.boxOK("tar -xf " + q(x.ds.tarPath) + " -C " + q(bench)); err != nil {
		return err
	}
	var env []string
	for _, kv := range toolEnv("/") {
		if strings.HasPrefix(kv, "GIT_") {
			env = append(env, q(kv))
		}
	}
	_, err := x.boxOK("cd " + q(bench+"/tree") + " && env " + strings.Join(env, " ") + " sh -c 'git init -q && git add -A && git commit -q -m boxbench'")
	return err
}

// --- W4 small files ---

func (x *rep) w4untar() {
	defer x.watch("w4.untar")()
	t0 := time.Now()
	_, d, err := x.sh(x.bench(), "tar -xf "+q(x.ds.tarPath))
	if err != nil {
		x.fail(err, "w4.untar", "w4.untar.landed")
	} else {
		boxTree := x.boxBench() + "/tree"
		landed, err := x.waitBox(t0, "find "+q(boxTree)+" -type f | wc -l", strconv.Itoa(len(x.ds.files)), landTimeout, 100*time.Millisecond)
		if err == nil {
			var mf string
			mf, err = x.boxOK("set -- " + q(boxTree) + "; " + manifestScript)
			if err == nil && mf != x.ds.manifest {
				err = fmt.Errorf("the tree in the box differs from the tar (manifest %s, want %s)", mf, x.ds.manifest)
			}
		}
		if err != nil {
			x.fail(err, "w4.untar", "w4.untar.landed")
		} else {
			x.record("w4.untar", d, "")
			x.record("w4.untar.landed", landed, "")
		}
	}

}

// w4small creates the small files, serial then with 4 writers.
func (x *rep) w4small() {
	x.w4create(1, "w4.serial", "small-serial")
	x.w4create(4, "w4.parallel", "small-parallel")
}

// w4create creates the small files in the directory dir of the bench
// with par writers, as row.
func (x *rep) w4create(par int, row, dir string) {
	defer x.watch(row)()
	dir = filepath.Join(x.bench(), dir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		x.fail(err, row, row+".landed")
		return
	}
	t0 := time.Now()
	err := parallel(par, len(x.ds.small), func(i int) error {
		return os.WriteFile(filepath.Join(dir, smallName(i)), x.ds.small[i], 0o644)
	})
	d := time.Since(t0)
	if err != nil {
		x.fail(err, row, row+".landed")
		return
	}
	boxDir := x.boxBench() + "/" + filepath.Base(dir)
	landed, err := x.waitBox(t0, "find "+q(boxDir)+" -type f -size 4096c | wc -l", strconv.Itoa(len(x.ds.small)), landTimeout, 50*time.Millisecond)
	if err == nil {
		var mf string
		mf, err = x.boxOK("set -- " + q(boxDir) + "; " + manifestScript)
		if err == nil && mf != x.ds.smallMF {
			err = fmt.Errorf("small files in the box differ (manifest %s, want %s)", mf, x.ds.smallMF)
		}
	}
	if err != nil {
		x.fail(err, row, row+".landed")
		return
	}
	x.record(row, d, "")
	x.record(row+".landed", landed, "")
}

// parallel runs fn(0..n-1) on k goroutines, i%k on goroutine k.
func parallel(k, n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, k)
	for g := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += k {
				if err := fn(i); err != nil {
					errs[g] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// --- W2 git ---

const gitBox = "git -c safe.directory='*' -C "

func (x *rep) w2commit() {
	defer x.watch("w2.commit")()
	tree := filepath.Join(x.bench(), "tree")
	t0 := time.Now()
	_, d, err := x.sh(tree, "git init -q && git add -A && git commit -q -m boxbench")
	if err != nil {
		x.fail(err, "w2.commit", "w2.landed")
		return
	}
	head, _, err := x.sh(tree, "git rev-parse HEAD")
	if err != nil {
		x.fail(err, "w2.commit", "w2.landed")
		return
	}
	head = strings.TrimSpace(head)
	boxTree := q(x.boxBench() + "/tree")
	// Landed: the box has the commit and every object (fsck passes).
	landed, err := x.waitBox(t0, "test \"$("+gitBox+boxTree+" rev-parse HEAD 2>/dev/null)\" = "+head+" && "+gitBox+boxTree+" fsck --no-progress >/dev/null 2>&1 && echo ok", "ok", landTimeout, 300*time.Millisecond)
	if err == nil {
		var n string
		n, err = x.boxOK(gitBox + boxTree + " ls-files | wc -l")
		if err == nil && n != strconv.Itoa(len(x.ds.files)) {
			err = fmt.Errorf("git ls-files in the box lists %s files, want %d", n, len(x.ds.files))
		}
	}
	if err != nil {
		x.fail(err, "w2.commit", "w2.landed")
		return
	}
	x.record("w2.commit", d, "HEAD "+head[:12])
	x.record("w2.landed", landed, "")
}

func (x *rep) w2status() {
	tree := filepath.Join(x.bench(), "tree")
	for _, row := range []string{"w2.status.cold", "w2.status.warm"} {
		out, d, err := x.sh(tree, "git status --porcelain")
		if err == nil && strings.TrimSpace(out) != "" {
			err = fmt.Errorf("git status is not clean: %s", clip(out, 200))
		}
		if err != nil {
			x.fail(err, row)
			continue
		}
		x.record(row, d, "")
	}
}

// --- W3 metadata ---

func (x *rep) w3(name, script string) {
	want, err := x.boxOK("cd " + q(x.boxBench()) + " && " + script)
	for _, temp := range []string{"cold", "warm"} {
		row := "w3." + name + "." + temp
		if err != nil {
			x.fail(err, row)
			continue
		}
		out, d, serr := x.sh(x.bench(), "set -o pipefail; "+script)
		if serr == nil && strings.TrimSpace(out) != want {
			serr = fmt.Errorf("%q printed %s on the host, %s in the box", script, strings.TrimSpace(out), want)
		}
		if serr != nil {
			x.fail(serr, row)
			continue
		}
		x.record(row, d, "")
	}
}

// --- W1 agent edit loop ---

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (x *rep) editedContent(orig []byte, k int) []byte {
	return append(slices.Clip(orig), fmt.Sprintf("\n// boxbench edit %d, repetition %d\n", k, x.n)...)
}

func (x *rep) w1() {
	defer x.watch("w1")()
	rows := []string{"w1.total", "w1.list", "w1.grep", "w1.files", "w1.visible", "probe"}
	tree := filepath.Join(x.bench(), "tree")
	boxTree := x.boxBench() + "/tree"

	// List the repository (skipping .git, as agents' tools do).
	t0 := time.Now()
	n := 0
	err := filepath.WalkDir(tree, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && e.Name() == ".git" {
			return filepath.SkipDir
		}
		if e.Type().IsRegular() {
			n++
		}
		return nil
	})
	list := time.Since(t0)
	if err == nil && n != len(x.ds.files) {
		err = fmt.Errorf("listed %d files, want %d", n, len(x.ds.files))
	}
	if err != nil {
		x.fail(err, rows...)
		return
	}

	// Grep a symbol.
	out, grep, err := x.sh(tree, "grep -rl --exclude-dir=.git "+symbol+" . || test $? = 1")
	if err == nil {
		err = sameFiles(out, x.ds.grepHits)
	}
	if err != nil {
		x.fail(err, rows...)
		return
	}

	// Read 20 files, make 5 edits (write a temporary file, rename it over
	// the original), read the edited files back. After each rename, wait
	// (off the clock) until the box has the new bytes.
	var files time.Duration
	var visible []time.Duration
	var floor time.Duration
	t0 = time.Now()
	orig := map[string][]byte{}
	for _, f := range x.ds.readSet {
		b, err := os.ReadFile(filepath.Join(tree, f))
		if err == nil && sha(b) != x.ds.sums[f] {
			err = fmt.Errorf("%s read back wrong (%d bytes)", f, len(b))
		}
		if err != nil {
			x.fail(err, rows...)
			return
		}
		orig[f] = b
	}
	var edited []string
	for k := range x.sz.edits {
		f := x.ds.readSet[k*len(x.ds.readSet)/x.sz.edits]
		content := x.editedContent(orig[f], k)
		path := filepath.Join(tree, f)
		tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".boxbench-tmp")
		if err := os.WriteFile(tmp, content, 0o644); err != nil {
			x.fail(err, rows...)
			return
		}
		if err := os.Rename(tmp, path); err != nil {
			x.fail(err, rows...)
			return
		}
		closed := time.Now()
		files += closed.Sub(t0)
		check := hasEdit(boxTree+"/"+f, content)
		vis, err := x.waitBox(closed, check, "ok", time.Minute, 0)
		if err == nil {
			var sum string
			sum, err = x.boxOK("sha256sum " + q(boxTree+"/"+f) + " | cut -c1-64")
			if err == nil && sum != sha(content) {
				err = fmt.Errorf("%s in the box is not the edit (sha256 %s)", f, sum)
			}
		}
		if err != nil {
			x.fail(err, rows...)
			return
		}
		visible = append(visible, vis)
		// The probe's own round trip: the floor under "visible".
		p0 := time.Now()
		x.boxOK(check)
		floor = time.Since(p0)
		edited = append(edited, f)
		t0 = time.Now()
	}
	for k, f := range edited {
		b, err := os.ReadFile(filepath.Join(tree, f))
		if err == nil && !bytes.Equal(b, x.editedContent(orig[f], k)) {
			err = fmt.Errorf("%s: read back %d bytes, not the edit", f, len(b))
		}
		if err != nil {
			x.fail(err, rows...)
			return
		}
	}
	files += time.Since(t0)
	x.record("w1.list", list, "")
	x.record("w1.grep", grep, "")
	x.record("w1.files", files, "")
	x.record("w1.total", list+grep+files, "")
	for _, v := range visible {
		x.record("w1.visible", v, "")
	}
	x.record("probe", floor, "")
}

// hasEdit is a check, in bash builtins only (no process start, so the poll
// is as fast as the probe's stream), that path holds content: its length
// and its last line, which names the edit and the repetition.
func hasEdit(path string, content []byte) string {
	tail := strings.TrimSpace(string(content[bytes.LastIndexByte(bytes.TrimRight(content, "\n"), '\n')+1:]))
	return fmt.Sprintf("IFS= read -r -d '' __x < %s; [[ ${#__x} == %d && $__x == *%s* ]] && echo ok", q(path), len(content), q(tail))
}

// sameFiles compares grep -l output (./path lines) with want.
func sameFiles(out string, want []string) error {
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" {
			got = append(got, strings.TrimPrefix(l, "./"))
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		return fmt.Errorf("grep found %d files, want %d", len(got), len(want))
	}
	return nil
}

// --- W5 large file ---

func (x *rep) w5write() {
	defer x.watch("w5.write")()
	path := filepath.Join(x.bench(), "big.bin")
	t0 := time.Now()
	err := writeChunks(path, x.ds.big, 1<<20)
	d := time.Since(t0)
	if err != nil {
		x.fail(err, "w5.write", "w5.landed")
		return
	}
	box := q(x.boxBench() + "/big.bin")
	landed, err := x.waitBox(t0, "stat -c %s "+box+" 2>/dev/null", strconv.Itoa(len(x.ds.big)), landTimeout, 50*time.Millisecond)
	if err == nil {
		var sum string
		sum, err = x.boxOK("sha256sum " + box + " | cut -c1-64")
		if err == nil && sum != x.ds.bigSum {
			err = fmt.Errorf("the large file in the box has sha256 %s, want %s", sum, x.ds.bigSum)
		}
	}
	if err != nil {
		x.fail(err, "w5.write", "w5.landed")
		return
	}
	x.record("w5.write", d, "")
	x.record("w5.landed", landed, "")
}

func writeChunks(path string, data []byte, chunk int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		if _, err := f.Write(data[off:end]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func (x *rep) w5read() {
	path := filepath.Join(x.bench(), "big.bin")
	buf := make([]byte, len(x.ds.big))
	for _, row := range []string{"w5.read.cold", "w5.read.warm"} {
		clear(buf)
		t0 := time.Now()
		err := readAll(path, buf)
		d := time.Since(t0)
		if err == nil && sha(buf) != x.ds.bigSum {
			err = errors.New("the large file read back differs")
		}
		if err != nil {
			x.fail(err, row)
			continue
		}
		x.record(row, d, "")
	}
}

// readAll reads the file into buf, which must be its exact size.
func readAll(path string, buf []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.ReadFull(f, buf); err != nil {
		return err
	}
	var one [1]byte
	if n, _ := f.Read(one[:]); n != 0 {
		return errors.New("the file is longer than written")
	}
	return nil
}

// --- W6 freshness ---

func (x *rep) w6() {
	path := filepath.Join(x.bench(), "fresh.txt")
	if err := os.WriteFile(path, []byte("v0"), 0o644); err != nil {
		x.fail(err, "w6.stat", "w6.cat")
		return
	}
	if _, err := os.ReadFile(path); err != nil {
		x.fail(err, "w6.stat", "w6.cat")
		return
	}
	box := q(x.boxBench() + "/fresh.txt")
	if _, err := x.waitBox(time.Now(), "cat "+box, "v0", landTimeout, 50*time.Millisecond); err != nil {
		x.fail(err, "w6.stat", "w6.cat")
		return
	}
	type way struct {
		suffix string
		change func(content string) error
	}
	ways := []way{{"", func(content string) error {
		_, err := x.boxOK("printf %s " + q(content) + " > " + box)
		return err
	}}}
	if x.p.exec != nil {
		ways = append(ways, way{".exec", func(content string) error {
			ctx, cancel := context.WithTimeout(x.ctx, time.Minute)
			defer cancel()
			_, err := x.p.exec(ctx, "printf %s "+q(content)+" > bench/fresh.txt")
			return err
		}})
	}
	k := 0
	for _, w := range ways {
		for range x.sz.fresh {
			k++
			content := fmt.Sprintf("v%d-%s", k, strings.Repeat("x", 7*k))
			if err := w.change(content); err != nil {
				x.fail(err, "w6.stat"+w.suffix, "w6.cat"+w.suffix)
				return
			}
			changed := time.Now()
			st, stOK := pollHost(changed, x.r.freshTimeout, func() bool {
				fi, err := os.Stat(path)
				return err == nil && fi.Size() == int64(len(content))
			})
			ct, ctOK := pollHost(changed, x.r.freshTimeout, func() bool {
				b, err := os.ReadFile(path)
				return err == nil && string(b) == content
			})
			for _, m := range []struct {
				row string
				d   time.Duration
				ok  bool
			}{{"w6.stat" + w.suffix, st, stOK}, {"w6.cat" + w.suffix, ct, ctOK}} {
				if m.ok {
					x.record(m.row, m.d, "")
				} else {
					x.censored(m.row, m.d, fmt.Sprintf("still stale after %v", x.r.freshTimeout))
				}
			}
			// Let the next change start from a host view that has
			// caught up, or from the stale one if it never did.
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// pollHost polls ok every millisecond until it holds or bound passes.
func pollHost(t0 time.Time, bound time.Duration, ok func() bool) (time.Duration, bool) {
	for {
		if ok() {
			return time.Since(t0), true
		}
		if time.Since(t0) > bound {
			return time.Since(t0), false
		}
		time.Sleep(time.Millisecond)
	}
}

// --- W7 control plane ---

func (x *rep) w7() {
	if x.p.exec == nil {
		return
	}
	for range x.sz.execs {
		ctx, cancel := context.WithTimeout(x.ctx, time.Minute)
		t0 := time.Now()
		out, err := x.p.exec(ctx, "true")
		d := time.Since(t0)
		cancel()
		if err == nil && out != "" {
			err = fmt.Errorf("exec true printed %q", clip(out, 100))
		}
		if err != nil {
			x.fail(err, "w7.exec")
			return
		}
		x.record("w7.exec", d, "")
	}
}

// --- the watch's reports (boxfs peers) ---

// After a write workload, its reports are counted until the counts have
// not moved for watchQuiet, or for watchSettle at most: the workload's
// checks waited for its writes to reach the box, and the watch reports
// them after that.
const (
	watchQuiet  = 500 * time.Millisecond
	watchSettle = 10 * time.Second
)

// watchCounts is facts.json's watchReports: the watch's reports of
// single paths since the mount started, taken (they made their path
// stale) and dropped as echoes of the host's own changes (F-echo).
type watchCounts struct {
	Taken  uint64 `json:"taken"`
	Echoes uint64 `json:"echoes"`
}

// readWatchCounts reads the counts from a box's facts.json; ok is false
// when it has none (the box has no cache).
func readWatchCounts(path string) (c watchCounts, ok bool, err error) {
	var f struct {
		WatchReports *watchCounts `json:"watchReports"`
	}
	if err := readFacts(path, &f); err != nil {
		return c, false, err
	}
	if f.WatchReports == nil {
		return c, false, nil
	}
	return *f.WatchReports, true, nil
}

// readFacts reads a box's facts.json at path into v.
func readFacts(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	return nil
}

// watch counts the watch's reports during a write workload on a boxfs
// peer: it reads the counts now, and the func it returns, called when
// the workload is done, waits for them to settle and records how many
// reports were dropped as echoes and how many taken, as rows
// watch.ROW.echoes and watch.ROW.taken. On the other peers, or when the
// counts cannot be read, the func records nothing: those cells stay
// empty.
func (x *rep) watch(row string) func() {
	if x.p.facts == "" {
		return func() {}
	}
	before, ok, err := readWatchCounts(x.p.facts)
	if err != nil || !ok {
		log.Printf("%s: no watch counts before %s: %v", x.p.name, row, err)
		return func() {}
	}
	return func() {
		read := func() (watchCounts, error) {
			c, ok, err := readWatchCounts(x.p.facts)
			if err == nil && !ok {
				err = errors.New("facts.json has no watchReports")
			}
			return c, err
		}
		after, quiet, err := settle(x.ctx, read, watchQuiet, watchSettle)
		if err == nil && (after.Taken < before.Taken || after.Echoes < before.Echoes) {
			// The counts are the daemon's: fewer means another one.
			err = fmt.Errorf("the counts went back from %+v to %+v", before, after)
		}
		if err != nil {
			log.Printf("%s: no watch counts after %s: %v", x.p.name, row, err)
			return
		}
		note := ""
		if !quiet {
			note = fmt.Sprintf("reports still coming %v after the workload", watchSettle)
		}
		x.count("watch."+row+".echoes", after.Echoes-before.Echoes, note)
		x.count("watch."+row+".taken", after.Taken-before.Taken, note)
	}
}

// settle polls read, ten times per quiet, until its value has not
// changed for quiet (then quiet is true) or bound has passed, and
// returns the last value.
func settle(ctx context.Context, read func() (watchCounts, error), quiet, bound time.Duration) (c watchCounts, ok bool, err error) {
	deadline := time.Now().Add(bound)
	if c, err = read(); err != nil {
		return c, false, err
	}
	since := time.Now()
	for time.Since(since) < quiet {
		if time.Now().After(deadline) {
			return c, false, nil
		}
		select {
		case <-ctx.Done():
			return c, false, ctx.Err()
		case <-time.After(quiet / 10):
		}
		now, err := read()
		if err != nil {
			return now, false, err
		}
		if now != c {
			c, since = now, time.Now()
		}
	}
	return c, true, nil
}

// --- the raw docker exec peer: W1, W7, W9, W10, one exec per operation ---

func (x *rep) execPeer() {
	r := x.r
	bench := x.boxBench()
	tree := bench + "/tree"
	rows := []string{"w1.total", "w1.list", "w1.grep", "w1.files", "w1.visible"}
	// Seed the tree (off the clock) straight into the box.
	tarData, err := os.ReadFile(x.ds.tarPath)
	if err == nil {
		_, err = x.boxOK("rm -rf " + q(bench) + " && mkdir -p " + q(bench))
	}
	if err == nil {
		_, err = r.docker(x.ctx, true, tarData, "exec", "-i", r.ctr, "tar", "-x", "-C", bench)
	}
	if err != nil {
		x.fail(err, rows...)
		return
	}
	if x.sz.suite != suiteAgent {
		x.execW1(tree)
	}
	for range x.sz.execs {
		t0 := time.Now()
		_, err := r.docker(x.ctx, true, nil, "exec", r.ctr, "true")
		d := time.Since(t0)
		if err != nil {
			x.fail(err, "w7.exec")
			return
		}
		x.record("w7.exec", d, "")
	}
	x.w9()
	x.w10()
}

func (x *rep) execW1(tree string) {
	r := x.r
	rows := []string{"w1.total", "w1.list", "w1.grep", "w1.files", "w1.visible"}
	t0 := time.Now()
	out, err := r.docker(x.ctx, true, nil, "exec", r.ctr, "find", tree, "-path", "*/.git", "-prune", "-o", "-type", "f", "-print")
	list := time.Since(t0)
	if err == nil {
		if n := strings.Count(string(out), "\n"); n != len(x.ds.files) {
			err = fmt.Errorf("listed %d files, want %d", n, len(x.ds.files))
		}
	}
	if err != nil {
		x.fail(err, rows...)
		return
	}
	t0 = time.Now()
	out, err = r.docker(x.ctx, true, nil, "exec", "-w", tree, r.ctr, "sh", "-c", "grep -rl --exclude-dir=.git "+symbol+" . || test $? = 1")
	grep := time.Since(t0)
	if err == nil {
		err = sameFiles(string(out), x.ds.grepHits)
	}
	if err != nil {
		x.fail(err, rows...)
		return
	}
	t0 = time.Now()
	orig := map[string][]byte{}
	for _, f := range x.ds.readSet {
		b, err := r.docker(x.ctx, true, nil, "exec", r.ctr, "cat", tree+"/"+f)
		if err == nil && sha(b) != x.ds.sums[f] {
			err = fmt.Errorf("%s read back wrong", f)
		}
		if err != nil {
			x.fail(err, rows...)
			return
		}
		orig[f] = b
	}
	var edited []string
	for k := range x.sz.edits {
		f := x.ds.readSet[k*len(x.ds.readSet)/x.sz.edits]
		content := x.editedContent(orig[f], k)
		if _, err := r.docker(x.ctx, true, content, "exec", "-i", r.ctr, "sh", "-c", `cat > "$1.boxbench-tmp" && mv "$1.boxbench-tmp" "$1"`, "sh", tree+"/"+f); err != nil {
			x.fail(err, rows...)
			return
		}
		edited = append(edited, f)
	}
	for k, f := range edited {
		b, err := r.docker(x.ctx, true, nil, "exec", r.ctr, "cat", tree+"/"+f)
		if err == nil && !bytes.Equal(b, x.editedContent(orig[f], k)) {
			err = fmt.Errorf("%s: read back is not the edit", f)
		}
		if err != nil {
			x.fail(err, rows...)
			return
		}
	}
	files := time.Since(t0)
	x.record("w1.list", list, "")
	x.record("w1.grep", grep, "")
	x.record("w1.files", files, "")
	x.record("w1.total", list+grep+files, "")
	// An edit is in the box when its exec returns.
	for range edited {
		x.record("w1.visible", 0, "in the box when docker exec returns")
	}
}
