package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/internal/wrapper"
)

// killTimeout bounds the kill of an exec the host lost hold of, its
// confirmation included.
const killTimeout = 30 * time.Second

// Exec runs req.Argv in the box as its own process group, through the exec
// API and wrapper.Script. It returns once the command has started (its working directory
// entered); a missing Dir is NotFound. Argv, env and Dir must not hold NUL;
// env and Dir must be UTF-8 (argv may be any bytes).
func (b *Box) Exec(ctx context.Context, req providers.ExecRequest) (providers.Process, error) {
	const op = "docker.Exec"
	if err := b.gone(op); err != nil {
		return nil, err
	}
	cmd, env, dir, err := b.execArgs(op, req)
	if err != nil {
		return nil, err
	}
	created, err := b.p.cli.ContainerExecCreate(ctx, b.id, container.ExecOptions{
		Cmd:          cmd.Argv,
		Env:          env,
		AttachStdin:  req.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		WorkingDir:   "/",
	})
	if err != nil {
		return nil, b.execError(op, err)
	}
	hj, err := b.p.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		// Attaching is what starts the exec: one whose attach broke (ctx
		// ended mid-way) may run unseen. End it, best effort and bounded.
		b.reap(context.WithoutCancel(ctx), created.ID, cmd.Name)
		return nil, b.execError(op, err)
	}
	pr := &process{b: b, execID: created.ID, conn: hj}
	pr.GroupProcess = providers.NewGroupProcess(providers.GroupHooks{
		Op: op, Box: b.id, Dir: dir,
		KillGroup:   func(ctx context.Context) error { return b.killGroup(ctx, cmd.Name) },
		CloseStream: func() { hj.Close() },
		Outcome:     pr.outcome,
		Ending:      b.ending,
		NoStart: func(code int) error {
			return providers.Errorf(providers.Unsupported, op, "the box could not start a command (exit %d): it needs /bin/sh, and setsid unless docker exec makes a session leader", code).WithBox(b.id)
		},
		Marker: wrapper.Marker(op, b.id),
	}, req.Stdout, req.Stderr)
	pr.out = wrapper.NewOutput(pr.GroupProcess, cmd.Name)
	go pr.demux()
	if err := pr.Start(ctx); err != nil {
		return nil, err
	}
	if req.Stdin != nil {
		go pr.feed(req.Stdin)
	}
	return pr, nil
}

// execArgs checks req and returns the exec API's command (wrapper.Script
// around req.Argv), its environment and the command's directory.
func (b *Box) execArgs(op string, req providers.ExecRequest) (cmd wrapper.Command, env []string, dir string, err error) {
	if err := req.ValidateUTF8(); err != nil {
		return wrapper.Command{}, nil, "", providers.E(0, op, err).WithBox(b.id)
	}
	dir = req.WorkDir(b.workspace)
	env = make([]string, 0, len(req.Env))
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		env = append(env, k+"="+req.Env[k])
	}
	// The environment travels in the exec API's own field rather than as
	// the wrapper's pairs: its values stay out of the box's process list.
	noEnv := req
	noEnv.Env = nil
	return wrapper.NewCommand(noEnv, dir), env, dir, nil
}

// reap kills the group of an exec the host lost hold of, if it runs. The
// wrapper may not have recorded its group yet: then look again, a few times.
func (b *Box) reap(ctx context.Context, execID, name string) {
	ctx, cancel := context.WithTimeout(ctx, killTimeout)
	defer cancel()
	for range 5 {
		ins, err := b.p.cli.ContainerExecInspect(ctx, execID)
		if err != nil || !ins.Running {
			return // the box is gone, or the exec never started or has ended
		}
		if err := b.killGroup(ctx, name); err != nil {
			b.p.log.Warn("docker: killing an exec whose attach failed", "box", b.id, "err", err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// execError classifies a failure to create or attach an exec: a container
// that is missing or not running means the box has ended or gone, unless it
// is suspended (Refused: it runs again once resumed).
func (b *Box) execError(op string, err error) error {
	e := wrap(op, b.id, err)
	if e.Code == providers.Refused {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, ierr := b.p.cli.ContainerInspect(ctx, b.id); ierr == nil && suspended(c.State) {
			return providers.Errorf(providers.Refused, op, "box is suspended").WithBox(b.id)
		}
	}
	if e.Code == providers.NotFound || e.Code == providers.Refused {
		e.Code = providers.Gone
	}
	return e
}

// process is one running command: the Engine API's exec around the
// shared group lifecycle.
type process struct {
	*providers.GroupProcess
	b         *Box
	execID    string
	conn      types.HijackedResponse
	out       *wrapper.Output // the command's output, marker and trailer taken out
	streamErr error           // why the stream ended, when not at EOF (demux's)
}

var _ providers.Process = (*process)(nil)

// demux splits Docker's multiplexed stream (8-byte frame headers: stream
// 1 stdout, 2 stderr, 3 the engine's own error) into the wrapper's
// Output.
func (pr *process) demux() {
	defer pr.StreamEnded()
	defer pr.out.End()
	r := pr.conn.Reader
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err != io.EOF {
				pr.streamErr = err
			}
			break
		}
		n := binary.BigEndian.Uint32(hdr[4:])
		if n > 1<<26 {
			pr.streamErr = fmt.Errorf("exec stream frame of %d bytes", n)
			break
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			pr.streamErr = err
			break
		}
		switch hdr[0] {
		case 1:
			pr.out.Stdout.Write(buf)
		case 2:
			pr.out.Stderr.Write(buf)
		case 3:
			pr.streamErr = fmt.Errorf("docker engine: %s", bytes.TrimSpace(buf))
		}
	}
}

// feed copies stdin into the command, then closes the write side so the
// command reads EOF. A command that ends first makes the copy fail; that is
// not an error of the command.
func (pr *process) feed(stdin io.Reader) {
	_, _ = io.Copy(pr.conn.Conn, stdin)
	_ = pr.conn.CloseWrite()
}

// outcome reads the exec's exit code once its stream ended; a stream that
// broke (and was not cut by a kill) is lost.
func (pr *process) outcome(ctx context.Context, killed bool) (int, error) {
	const op = "docker.Exec"
	code, err := pr.b.execExitCode(ctx, pr.execID)
	switch {
	case err != nil:
		return -1, pr.lost(ctx, op, err)
	case pr.streamErr != nil && !killed:
		return -1, pr.lost(ctx, op, pr.streamErr)
	}
	return code, nil
}

// lost classifies a broken exec: Gone when the box went away, else
// TransportLost.
func (pr *process) lost(ctx context.Context, op string, err error) error {
	if st, serr := pr.b.Status(ctx); serr != nil && providers.IsCode(serr, providers.Gone) || serr == nil && st.State == providers.StateEnded {
		return providers.E(providers.Gone, op, err).WithBox(pr.b.id)
	}
	if c := errorCode(err); c != providers.Unknown {
		return wrap(op, pr.b.id, err)
	}
	return providers.E(providers.TransportLost, op, err).WithBox(pr.b.id)
}

// execExitCode reads an exec's exit code, waiting while Docker still
// reports it running (the stream can end just before the engine records the
// exit).
func (b *Box) execExitCode(ctx context.Context, execID string) (int, error) {
	d := 2 * time.Millisecond
	for {
		ins, err := b.p.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return -1, err
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(d):
		}
		d = min(2*d, 200*time.Millisecond)
	}
}

// killGroup runs the wrapper's kill script in the box on the group
// recorded under name.
func (b *Box) killGroup(ctx context.Context, name string) error {
	code, out, err := b.run(ctx, wrapper.KillArgv(name))
	return shell.KillExit("docker.Kill", b.id, code, out, err)
}

// run runs a fixed command of the provider's own (no wrapper, no stdin) and
// returns its exit code and combined output.
func (b *Box) run(ctx context.Context, argv []string) (int, []byte, error) {
	const op = "docker.run"
	created, err := b.p.cli.ContainerExecCreate(ctx, b.id, container.ExecOptions{Cmd: argv, AttachStdout: true, AttachStderr: true, WorkingDir: "/"})
	if err != nil {
		return -1, nil, b.execError(op, err)
	}
	hj, err := b.p.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return -1, nil, b.execError(op, err)
	}
	defer hj.Close()
	stop := context.AfterFunc(ctx, hj.Close)
	defer stop()
	var out bytes.Buffer
	if err := copyFrames(&out, hj.Reader); err != nil {
		if ctx.Err() != nil {
			return -1, out.Bytes(), providers.E(0, op, ctx.Err()).WithBox(b.id)
		}
		return -1, out.Bytes(), providers.E(providers.TransportLost, op, err).WithBox(b.id)
	}
	code, err := b.execExitCode(ctx, created.ID)
	if err != nil {
		return -1, out.Bytes(), b.execError(op, err)
	}
	return code, out.Bytes(), nil
}

// copyFrames copies the payload of every stdout and stderr frame to w.
func copyFrames(w io.Writer, r *bufio.Reader) error {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		n := int64(binary.BigEndian.Uint32(hdr[4:]))
		if _, err := io.CopyN(w, r, n); err != nil {
			return err
		}
	}
}
