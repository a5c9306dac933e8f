package e2btest

import (
	"os"
	"os/exec"
	"syscall"
)

// reaperScript waits on its stdin. "done" (the fake closed, its
// sandboxes ended) has it just remove the fake's root ($1); an end of
// input without it (the process running the fake died) has it first kill
// every process a sandbox of the fake started (their TMPDIR is under the
// root).
const reaperScript = `if read -r x && [ "$x" = done ]; then rm -rf "$1"; exit 0; fi
for i in 1 2 3 4 5; do
	for e in /proc/[0-9]*/environ; do
		p=${e#/proc/}
		p=${p%/environ}
		[ "$p" = $$ ] && continue
		grep -qzF "TMPDIR=$1/" "$e" 2>/dev/null && kill -9 "$p" 2>/dev/null
	done
	sleep 0.1
done
rm -rf "$1"
`

// startReaper starts the process that cleans up after the fake even when
// the test process dies without closing it; closing the returned pipe
// sets it off.
func startReaper(root string) (*os.File, *exec.Cmd) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil
	}
	cmd := exec.Command("/bin/sh", "-c", reaperScript, "e2btest-reaper", root)
	cmd.Stdin = r
	cmd.Env = []string{"PATH=" + basePath}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, nil
	}
	r.Close()
	return w, cmd
}
