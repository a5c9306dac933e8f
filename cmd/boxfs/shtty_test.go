//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/internal/boxfsbin"
)

// TestShTerminal runs boxfs-sh with no arguments on a terminal, as a user
// at a prompt does (cd MOUNT/NAME/work && boxfs sh): the shell in the box
// gets a terminal of the caller's size, and the keys typed reach it.
func TestShTerminal(t *testing.T) {
	needMount(t)
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("no script(1) on this host: a local box could not make a terminal")
	}
	h := newHarness(t)
	mnt := filepath.Join(t.TempDir(), "mnt")
	h.cleanup(mnt)
	h.mountBackground(mnt)
	h.ok("new", "tty", "lifetime=10m")
	cwd := filepath.Join(mnt, "tty", "work")

	ptm, pts := openPty(t, 24, 80)
	cmd := exec.Command(boxfsbin.ShPath(t))
	cmd.Dir = cwd
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close()
	var mu sync.Mutex
	var out bytes.Buffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptm.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	// The line is typed; what it prints is told from its echo by the
	// arithmetic, which only the box's shell does.
	ptm.Write([]byte("echo MARK$((40+2)); tty; stty size; exit\r"))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("boxfs-sh on a terminal did not end after exit")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		s := out.String()
		mu.Unlock()
		if strings.Contains(s, "24 80") || time.Now().After(deadline) {
			for _, want := range []string{"MARK42", "/dev/pts/", "24 80"} {
				if !strings.Contains(s, want) {
					t.Errorf("the terminal session lacks %q:\n%s", want, s)
				}
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openPty opens a pseudo-terminal pair of rows×cols: the master, and the
// terminal a program is given.
func openPty(t *testing.T, rows, cols uint16) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		t.Fatal(err)
	}
	return ptm, pts
}
