// Package delay adds a fixed one-way latency to a byte stream, the way a
// longer wire would: every chunk read from a source is written to the
// destination d after it was read, and chunks keep flowing while earlier
// ones wait, so the delay is added once per round trip and does not cap
// throughput. The benchmarks use it to stand a local Docker box in for a
// remote one: on the daemon's answers for boxfs (Proxy, a unix-socket
// proxy in front of the Docker API) and on sftp-server's answers for sshfs
// and rclone (Copy, in the sftp wrapper).
package delay

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// chunkSize is the largest piece read at once; maxQueued bounds the bytes
// in flight (chunks waiting out their delay) at maxQueued*chunkSize.
const (
	chunkSize = 64 << 10
	maxQueued = 1024
)

type chunk struct {
	b   []byte
	due time.Time
}

// Copy copies src to dst until EOF or an error, delivering each chunk d
// after it was read from src. It returns the bytes written and the first
// error other than io.EOF. With d <= 0 it is io.Copy.
func Copy(dst io.Writer, src io.Reader, d time.Duration) (int64, error) {
	if d <= 0 {
		return io.Copy(dst, src)
	}
	q := make(chan chunk, maxQueued)
	var readErr error
	done := make(chan struct{})
	stop := make(chan struct{}) // the writer failed: stop reading
	go func() {
		defer close(done)
		defer close(q)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case q <- chunk{b: buf[:n], due: time.Now().Add(d)}:
				case <-stop:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					readErr = err
				}
				return
			}
		}
	}()
	var written int64
	for c := range q {
		if wait := time.Until(c.due); wait > 0 {
			time.Sleep(wait)
		}
		n, err := dst.Write(c.b)
		written += int64(n)
		if err != nil {
			// The reader ends at its next chunk, or when the caller
			// closes src.
			close(stop)
			return written, err
		}
	}
	<-done
	return written, readErr
}

// Proxy accepts connections on a listener and joins each to a new
// connection to upstream; the bytes from upstream to the client are delayed
// by Delay (Copy), the client's bytes go up at once. A half close (a
// CloseWrite on a unix or TCP socket, which Docker's hijacked exec streams
// use for stdin EOF) is passed on in both directions.
type Proxy struct {
	Delay time.Duration
	// Dial opens a connection to the upstream server.
	Dial func(ctx context.Context) (net.Conn, error)

	wg sync.WaitGroup
	mu sync.Mutex
	cs map[net.Conn]struct{}
}

// Serve accepts on l until ctx ends or l fails, then closes l and every
// open connection and returns once their goroutines have ended.
func (p *Proxy) Serve(ctx context.Context, l net.Listener) error {
	p.mu.Lock()
	p.cs = map[net.Conn]struct{}{}
	p.mu.Unlock()
	stopped := context.AfterFunc(ctx, func() { l.Close() })
	defer stopped()
	var err error
	for {
		c, aerr := l.Accept()
		if aerr != nil {
			if ctx.Err() == nil {
				err = aerr
			}
			break
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.join(ctx, c)
		}()
	}
	l.Close()
	p.mu.Lock()
	for c := range p.cs {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.cs[c] = struct{}{}
	} else {
		delete(p.cs, c)
	}
}

type halfCloser interface{ CloseWrite() error }

func closeWrite(c net.Conn) {
	if h, ok := c.(halfCloser); ok {
		h.CloseWrite()
		return
	}
	c.Close()
}

// join copies between client and a new upstream connection until both
// directions have ended.
func (p *Proxy) join(ctx context.Context, client net.Conn) {
	p.track(client, true)
	defer p.track(client, false)
	defer client.Close()
	up, err := p.Dial(ctx)
	if err != nil {
		return
	}
	p.track(up, true)
	defer p.track(up, false)
	defer up.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if _, err := io.Copy(up, client); err != nil {
			up.Close()
			client.Close()
			return
		}
		closeWrite(up)
	}()
	go func() {
		defer wg.Done()
		if _, err := Copy(client, up, p.Delay); err != nil {
			up.Close()
			client.Close()
			return
		}
		closeWrite(client)
	}()
	wg.Wait()
}
