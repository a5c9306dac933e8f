//go:build linux

package agent

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pkg/sftp"
)

// TestStockClient: the agent is an ordinary SFTP server to a stock
// pkg/sftp client (what a person debugging a box would use): open flags,
// plain SFTP requests and the openssh extensions behave as on a POSIX
// SFTP server.
func TestStockClient(t *testing.T) {
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Serve(sr, sw); sw.Close() }()
	c, err := sftp.NewClientPipe(cr, cw)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "f")

	f, err := c.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("hello"))
	f.Close()
	if _, err := c.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL); err == nil {
		t.Error("O_EXCL on an existing file succeeded")
	}
	f, err = c.OpenFile(p, os.O_WRONLY|os.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte(" world"))
	f.Close()
	if b, _ := os.ReadFile(p); string(b) != "hello world" {
		t.Errorf("after O_APPEND: %q", b)
	}
	f, err = c.OpenFile(p, os.O_RDWR|os.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("abc"))
	buf := make([]byte, 8)
	n, _ := f.ReadAt(buf, 0)
	f.Close()
	if string(buf[:n]) != "abc" {
		t.Errorf("O_RDWR|O_TRUNC then read: %q", buf[:n])
	}

	fi, err := c.Stat(p)
	if err != nil || fi.Size() != 3 || fi.Mode().Perm() != 0o644 {
		t.Errorf("stat: %v %v", fi, err)
	}
	if st := fi.Sys().(*sftp.FileStat); len(st.Extended) == 0 || st.Extended[0].ExtType != extStatNS {
		t.Errorf("no %s on a stat: %+v", extStatNS, st.Extended)
	}
	mt := time.Unix(1700000000, 0)
	if err := c.Chtimes(p, mt, mt); err != nil {
		t.Error(err)
	}
	if err := c.Chmod(p, 0o600); err != nil {
		t.Error(err)
	}
	if osfi, _ := os.Stat(p); !osfi.ModTime().Equal(mt) || osfi.Mode().Perm() != 0o600 {
		t.Errorf("after chtimes and chmod: %v %v", osfi.ModTime(), osfi.Mode())
	}
	if err := c.Mkdir(filepath.Join(dir, "d")); err != nil {
		t.Error(err)
	}
	if err := c.Symlink("f", filepath.Join(dir, "l")); err != nil {
		t.Error(err)
	}
	if tg, err := c.ReadLink(filepath.Join(dir, "l")); err != nil || tg != "f" {
		t.Errorf("readlink: %q %v", tg, err)
	}
	if err := c.Link(p, filepath.Join(dir, "h")); err != nil {
		t.Error(err)
	}
	// SFTP's RENAME does not replace; POSIX-RENAME does.
	if err := c.Rename(filepath.Join(dir, "h"), p); err == nil {
		t.Error("RENAME replaced an existing file")
	}
	if err := c.PosixRename(filepath.Join(dir, "h"), filepath.Join(dir, "g")); err != nil {
		t.Error(err)
	}
	ents, err := c.ReadDir(dir)
	if err != nil || len(ents) != 4 {
		t.Errorf("readdir: %d entries, %v", len(ents), err)
	}
	if _, err := c.StatVFS(dir); err != nil {
		t.Errorf("statvfs: %v", err)
	}
	if err := c.RemoveDirectory(filepath.Join(dir, "d")); err != nil {
		t.Error(err)
	}
	if _, err := c.Stat(filepath.Join(dir, "nope")); !os.IsNotExist(err) {
		// The agent's errno status is not a standard code: a stock client
		// sees a failure, boxfs's client the errno.
		var se *sftp.StatusError
		if !errors.As(err, &se) {
			t.Errorf("stat of a missing file: %v", err)
		}
	}
	if wd, err := c.Getwd(); err != nil || wd != "/" {
		t.Errorf("getwd: %q %v", wd, err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Errorf("Serve after the client closed: %v", err)
	}
}
