package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxsh"
	"github.com/boxfs/boxfs/providers"
)

// Exit statuses boxfs sh gives besides its command's, as sh does.
const (
	exitCannotRun = boxsh.ExitCannotRun
)

// shStartBound bounds what comes before a shell command starts: finding
// the box, connecting to it, the barrier.
const shStartBound = 5 * time.Minute

// shStdinQueue is how many stdin chunks the daemon holds for a command
// that is not reading them; past it the caller's frames wait, signals too.
const shStdinQueue = 64

// startShellServer serves boxfs sh for the mount at mnt (see shSocket) and
// returns what stops it. A socket that cannot be made is logged: the
// mount serves everything else.
func startShellServer(log *slog.Logger, mnt string, m *boxes.Manager) (stop func()) {
	l, err := net.Listen("unix", boxsh.Socket(mnt))
	if err != nil {
		log.Error("boxfs sh not served: its socket could not be made", "socket", boxsh.Socket(mnt), "err", err)
		return func() {}
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveShell(log, m, c.(*net.UnixConn))
		}
	}()
	return func() { l.Close() }
}

// serveShell runs one boxfs sh command: its request, the command with its
// streams, its signals, and its kill when the caller goes away.
func serveShell(log *slog.Logger, m *boxes.Manager, conn *net.UnixConn) {
	defer conn.Close()
	fw := &boxsh.FrameWriter{W: conn}
	fail := func(code int, err error) {
		b, _ := json.Marshal(boxsh.Exit{Code: code, Err: err.Error()})
		fw.Send(boxsh.FrameExit, b)
	}
	// Like the control files, commands are the mounting user's (root's
	// too); the socket has no file mode to say so.
	uid, err := boxsh.PeerUID(conn)
	if err != nil {
		fail(exitCannotRun, err)
		return
	}
	if uid != os.Getuid() && uid != 0 {
		fail(exitCannotRun, fmt.Errorf("the mount's commands are its owner's (uid %d); you are uid %d", os.Getuid(), uid))
		return
	}
	br := bufio.NewReader(conn)
	typ, p, err := boxsh.ReadFrame(br)
	if err != nil || typ != boxsh.FrameRequest {
		return
	}
	var req boxsh.Request
	if err := json.Unmarshal(p, &req); err != nil {
		fail(exitCannotRun, fmt.Errorf("bad request: %v", err))
		return
	}
	b, err := m.Box(req.Box)
	if err != nil {
		fail(exitCannotRun, err)
		return
	}
	args := req.Args
	if req.TTY != nil {
		args = ttyArgs(*req.TTY)
	}
	inR, inW := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), shStartBound)
	run, err := b.Shell(ctx, req.Dir, args, hands.Command{
		Env:    req.Env,
		Stdin:  inR,
		Stdout: boxsh.StreamWriter{FW: fw, Typ: boxsh.FrameStdout},
		Stderr: boxsh.StreamWriter{FW: fw, Typ: boxsh.FrameStderr},
	})
	cancel()
	if err != nil {
		b.SetErr(err)
		fail(exitCannotRun, err)
		return
	}
	ended := make(chan struct{})
	go readShellFrames(log, br, run, inW, ended, req.Box)
	code, err := run.Wait()
	close(ended)
	// A command that ended without reading all of its stdin: the feeder
	// drops the rest.
	inR.CloseWithError(io.ErrClosedPipe)
	var exit boxsh.Exit
	switch {
	case err == nil:
		exit.Code = code
	case providers.CodeOf(err) == providers.Aborted:
		exit.Code = exitKilled
	default:
		exit.Code, exit.Err = exitLost, fmt.Sprintf("the command's end is not known: %v", err)
		b.SetErr(fmt.Errorf("boxfs sh: %w", err))
	}
	eb, _ := json.Marshal(exit)
	fw.Send(boxsh.FrameExit, eb)
}

// readShellFrames passes the caller's stdin and signals to run until the
// connection ends. A connection that ends before the command (the caller
// was killed) kills the command's whole group, confirmed.
func readShellFrames(log *slog.Logger, br *bufio.Reader, run *boxes.ShellRun, inW *io.PipeWriter, ended <-chan struct{}, box string) {
	in := make(chan []byte, shStdinQueue)
	inClosed := false
	closeIn := func() {
		if !inClosed {
			inClosed = true
			close(in)
		}
	}
	go func() {
		var werr error
		for p := range in {
			if werr == nil {
				_, werr = inW.Write(p)
			}
		}
		inW.Close()
	}()
	defer closeIn()
	for {
		typ, p, err := boxsh.ReadFrame(br)
		if err != nil {
			select {
			case <-ended:
			default:
				log.Info("boxfs sh: the caller went away; killing its command", "box", box)
				ctx, cancel := context.WithTimeout(context.Background(), killConfirm)
				if err := run.Kill(ctx); err != nil {
					log.Warn("boxfs sh: kill failed", "box", box, "err", err)
				}
				cancel()
			}
			return
		}
		switch typ {
		case boxsh.FrameStdin:
			if inClosed {
				continue
			}
			select {
			case in <- p:
			case <-ended:
			}
		case boxsh.FrameStdinEOF:
			closeIn()
		case boxsh.FrameSignal:
			go func(sig string) {
				ctx, cancel := context.WithTimeout(context.Background(), killConfirm)
				defer cancel()
				if err := run.Signal(ctx, sig); err != nil && !providers.IsCode(err, providers.NotFound) {
					log.Warn("boxfs sh: signal not delivered", "box", box, "signal", sig, "err", err)
				}
			}(string(p))
		}
	}
}

// ttyArgs are the box shell's arguments for an interactive shell on a
// terminal of size ws: no provider gives a command a terminal, so the
// box's script(1) (util-linux's, or BusyBox's) makes one and runs the
// shell (bash, else sh) on it, interactive, after setting the terminal's
// size. A box without script gets the shell over pipes, and a line on
// stderr says so.
func ttyArgs(ws boxsh.Winsize) []string {
	return []string{"-c", fmt.Sprintf(`s=$(command -v bash 2>/dev/null || command -v sh)
if command -v script >/dev/null 2>&1; then
	SHELL=$s exec script -qfc 'stty rows %d cols %d 2>/dev/null; exec "$SHELL" -i' /dev/null
fi
echo "boxfs sh: the box has no script(1) to make a terminal: the shell runs without one" >&2
exec "$s" -i`, ws.Rows, ws.Cols)}
}
