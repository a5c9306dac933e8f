package delay

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// A chunk arrives no sooner than the delay after it was sent.
func TestCopyDelaysEachChunk(t *testing.T) {
	const d = 40 * time.Millisecond
	src, w := io.Pipe()
	r, dst := io.Pipe()
	go Copy(dst, src, d)
	defer w.Close()
	buf := make([]byte, 16)
	for i := range 3 {
		t0 := time.Now()
		if _, err := w.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		n, err := r.Read(buf)
		if err != nil || string(buf[:n]) != "ping" {
			t.Fatalf("round %d: read %q, %v", i, buf[:n], err)
		}
		if got := time.Since(t0); got < d {
			t.Errorf("round %d: arrived after %v, want at least %v", i, got, d)
		}
	}
}

// Chunks in flight wait out their delays together: 100 chunks sent back to
// back take about one delay, not a hundred.
func TestCopyDoesNotSerializeDelays(t *testing.T) {
	const d = 30 * time.Millisecond
	src, w := io.Pipe()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := Copy(&out, src, d)
		done <- err
	}()
	t0 := time.Now()
	for i := range 100 {
		if _, err := w.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Serial delays would take 3 s; allow a slow machine plenty.
	if got := time.Since(t0); got > 1500*time.Millisecond {
		t.Errorf("100 chunks took %v: delays are being added up", got)
	}
	if out.Len() != 100 {
		t.Fatalf("got %d bytes, want 100", out.Len())
	}
	for i, b := range out.Bytes() {
		if int(b) != i {
			t.Fatalf("byte %d is %d: order lost", i, b)
		}
	}
}

func TestCopyKeepsBytes(t *testing.T) {
	data := make([]byte, 5<<20+123)
	rand.Read(data)
	var out bytes.Buffer
	n, err := Copy(&out, bytes.NewReader(data), time.Millisecond)
	if err != nil || n != int64(len(data)) || !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("Copy = %d, %v; bytes equal %v", n, err, bytes.Equal(out.Bytes(), data))
	}
}

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// A failed write ends Copy with that error while the source stays open.
func TestCopyWriteErrorReturns(t *testing.T) {
	src, w := io.Pipe()
	defer w.Close()
	done := make(chan error, 1)
	go func() {
		_, err := Copy(failWriter{}, src, time.Millisecond)
		done <- err
	}()
	w.Write([]byte("x"))
	select {
	case err := <-done:
		if err != io.ErrClosedPipe {
			t.Fatalf("Copy = %v, want %v", err, io.ErrClosedPipe)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Copy did not return after its writer failed")
	}
}

// Through the proxy a request/answer round trip costs the delay once, and a
// client's half close reaches the server, whose answer and close come back.
func TestProxyRoundTripAndHalfClose(t *testing.T) {
	dir := t.TempDir()
	upPath := filepath.Join(dir, "up.sock")
	up, err := net.Listen("unix", upPath)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	// The server echoes each read and, at EOF, writes "bye" and closes.
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						c.Write(buf[:n])
					}
					if err != nil {
						c.Write([]byte("bye"))
						return
					}
				}
			}()
		}
	}()

	const d = 25 * time.Millisecond
	p := &Proxy{Delay: d, Dial: func(ctx context.Context) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", upPath)
	}}
	l, err := net.Listen("unix", filepath.Join(dir, "proxy.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, l) }()

	c, err := net.Dial("unix", filepath.Join(dir, "proxy.sock"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	for i := range 3 {
		t0 := time.Now()
		c.Write([]byte("hi"))
		n, err := io.ReadFull(c, buf[:2])
		if err != nil || string(buf[:n]) != "hi" {
			t.Fatalf("round %d: %q, %v", i, buf[:n], err)
		}
		if got := time.Since(t0); got < d {
			t.Errorf("round %d took %v, want at least %v", i, got, d)
		}
	}
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	rest, err := io.ReadAll(c)
	if err != nil || string(rest) != "bye" {
		t.Fatalf("after half close read %q, %v; want \"bye\" then EOF", rest, err)
	}
	c.Close()

	// A connection left open is closed when Serve ends.
	c2, err := net.Dial("unix", filepath.Join(dir, "proxy.sock"))
	if err != nil {
		t.Fatal(err)
	}
	c2.Write([]byte("x"))
	io.ReadFull(c2, buf[:1])
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c2); err != nil {
		t.Errorf("open connection after Serve ended: %v, want EOF", err)
	}
}
