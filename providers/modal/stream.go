package modal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// read copies one output stream of the command into q. The stream is read
// from an offset: when it drops (a transient failure, an expired JWT) it is
// opened again from the last byte received, retrying with backoff (10
// times from 10 ms; a byte received resets the count). On stdout the
// wrapper's marker byte is taken off the front.
func (pr *process) read(fd pb.TaskExecStdioFileDescriptor, q *providers.OutQueue, done chan struct{}) {
	defer close(done)
	defer q.Close()
	stdout := fd == pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT
	var offset uint64
	seen := !stdout
	delay, retries, authRetried := routerRetryBase, routerRetries, false
	for {
		api, cctx, jwt, err := pr.rt.access(pr.bg)
		if err == nil {
			var st pb.TaskCommandRouter_TaskExecStdioReadClient
			st, err = api.TaskExecStdioRead(cctx, &pb.TaskExecStdioReadRequest{TaskId: pr.taskID, ExecId: pr.execID, Offset: offset, FileDescriptor: fd})
			for err == nil {
				var item *pb.TaskExecStdioReadResponse
				if item, err = st.Recv(); err != nil {
					break
				}
				data := item.GetData()
				offset += uint64(len(data))
				delay, retries, authRetried = routerRetryBase, routerRetries, false
				if !seen && len(data) > 0 {
					seen = true
					pr.marker = data[0]
					close(pr.markerSeen)
					data = data[1:]
				}
				if len(data) > 0 {
					q.Put(data)
				}
			}
			if err == io.EOF {
				return
			}
		}
		switch {
		case pr.bg.Err() != nil:
			return
		case status.Code(err) == codes.Unauthenticated && !authRetried:
			authRetried = true
			if rerr := pr.rt.renew(pr.bg, jwt); rerr == nil {
				continue
			}
		case retryable(err) && retries > 0:
			retries--
			if sleep(pr.bg, delay) != nil {
				return
			}
			delay *= 2
			continue
		}
		pr.mu.Lock()
		if pr.streamErr == nil {
			pr.streamErr = fmt.Errorf("reading the command's output: %w", err)
		}
		pr.mu.Unlock()
		return
	}
}

// feed writes stdin to the command in chunks of at most stdinChunk bytes,
// each stamped with its offset (a retried write is not applied twice), then
// an explicit EOF. A nil stdin is an EOF at once. A command that has ended
// makes the writes fail; that is not an error of the command.
func (pr *process) feed(stdin io.Reader) {
	var offset uint64
	write := func(data []byte, eof bool) error {
		req := &pb.TaskExecStdinWriteRequest{TaskId: pr.taskID, ExecId: pr.execID, Offset: offset, Data: data, Eof: eof}
		return pr.rt.call(pr.bg, func(cctx context.Context, api pb.TaskCommandRouterClient) error {
			_, err := api.TaskExecStdinWrite(cctx, req)
			return err
		})
	}
	if stdin != nil {
		buf := make([]byte, stdinChunk)
		for {
			n, rerr := stdin.Read(buf)
			if n > 0 {
				if err := write(buf[:n], false); err != nil {
					return
				}
				offset += uint64(n)
			}
			if rerr != nil {
				break
			}
		}
	}
	_ = write(nil, true)
}

// wait asks the router for the command's exit, one call of at most a minute
// at a time, for as long as it runs. A failure that outlasts the router
// call's own retries ends the wait when the box has ended, when the failure
// is not a transient one, or when nothing but failures came for deadBound.
func (pr *process) wait() {
	defer close(pr.exited)
	var failingSince time.Time
	for {
		var resp *pb.TaskExecWaitResponse
		err := pr.rt.call(pr.bg, func(cctx context.Context, api pb.TaskCommandRouterClient) error {
			cctx, cancel := context.WithTimeout(cctx, waitCallDeadline)
			defer cancel()
			var err error
			resp, err = api.TaskExecWait(cctx, &pb.TaskExecWaitRequest{TaskId: pr.taskID, ExecId: pr.execID})
			return err
		})
		pr.mu.Lock()
		switch {
		case err == nil && resp.ExitStatus != nil:
			if sig, ok := resp.ExitStatus.(*pb.TaskExecWaitResponse_Signal); ok {
				pr.exitCode = 128 + int(sig.Signal)
			} else {
				pr.exitCode = int(resp.GetCode())
			}
			pr.mu.Unlock()
			return
		case err == nil:
			err = errors.New("TaskExecWait answered no exit status")
			fallthrough
		case pr.bg.Err() != nil || !retryable(err) || pr.b.ended(pr.bg):
			pr.waitErr = err
			pr.mu.Unlock()
			return
		case status.Code(err) != codes.DeadlineExceeded:
			// A wait that timed out is the router answering; anything else
			// is the router or Modal not answering.
			if failingSince.IsZero() {
				failingSince = time.Now()
			} else if time.Since(failingSince) > pr.b.p.deadBound {
				pr.waitErr = fmt.Errorf("no answer from the command router for %v: %w", pr.b.p.deadBound, err)
				pr.mu.Unlock()
				return
			}
		default:
			failingSince = time.Time{}
		}
		pr.mu.Unlock()
		if sleep(pr.bg, 100*time.Millisecond) != nil {
			return
		}
	}
}

// watch kills the command's group when ctx ends before the command does.
func (pr *process) watch(ctx context.Context) {
	defer close(pr.watchDone)
	select {
	case <-pr.exited:
		return
	case <-ctx.Done():
	}
	pr.mu.Lock()
	pr.cause = ctx.Err()
	pr.mu.Unlock()
	// The group is recorded before the marker is written.
	select {
	case <-pr.markerSeen:
	case <-pr.exited:
		return
	case <-time.After(startGrace):
	}
	kctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	err := pr.kill(kctx)
	cancel()
	pr.mu.Lock()
	pr.killErr = err
	pr.mu.Unlock()
	pr.killOnce.Do(func() { close(pr.killedCh) })
}

// finish waits for the exit and the output (bounded once the group is
// killed: a process outside it may hold the output open), then settles the
// result.
func (pr *process) finish() {
	defer close(pr.done)
	select {
	case <-pr.exited:
	case <-pr.killedCh:
		select {
		case <-pr.exited:
		case <-time.After(drainGrace):
		}
	}
	streams := func() {
		<-pr.outDone
		<-pr.errDone
	}
	ended := make(chan struct{})
	go func() { streams(); close(ended) }()
	select {
	case <-ended:
	case <-pr.killedCh:
		select {
		case <-ended:
		case <-time.After(drainGrace):
		}
	}
	<-pr.watchDone
	pr.stop()
	<-ended
	pr.stdout.Wait()
	pr.stderr.Wait()
	pr.code, pr.err = pr.result()
}

func (pr *process) result() (int, error) {
	const op = "modal.Exec"
	pr.mu.Lock()
	cause, killErr, waitErr, streamErr, code := pr.cause, pr.killErr, pr.waitErr, pr.streamErr, pr.exitCode
	pr.mu.Unlock()
	killed := false
	select {
	case <-pr.killedCh:
		killed = true
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case cause != nil:
		e := providers.E(providers.CodeOf(cause), op, cause).WithBox(pr.b.id)
		if killErr != nil {
			e.Err = fmt.Errorf("%w; and the kill: %v", cause, killErr)
		}
		return -1, e
	case waitErr != nil:
		return -1, pr.lost(ctx, op, waitErr)
	case streamErr != nil && !killed:
		return -1, pr.lost(ctx, op, streamErr)
	case code == 124 && !pr.deadline.IsZero() && time.Until(pr.deadline) < time.Second:
		// Modal ended the command at the timeout it was given.
		return -1, providers.Errorf(providers.Timeout, op, "the command's deadline passed").WithBox(pr.b.id)
	case code >= 128 && !killed && pr.b.ended(ctx):
		return -1, providers.Errorf(providers.Gone, op, "box ended while the command ran (exit %d)", code).WithBox(pr.b.id)
	}
	for _, q := range []*providers.OutQueue{pr.stdout, pr.stderr} {
		if err := q.Wait(); err != nil {
			return code, providers.E(0, op, err).WithBox(pr.b.id)
		}
	}
	return code, nil
}

// lost classifies a command whose exit could not be had: Gone when the box
// ended, else TransportLost.
func (pr *process) lost(ctx context.Context, op string, err error) error {
	if pr.b.ended(ctx) {
		return providers.E(providers.Gone, op, err).WithBox(pr.b.id)
	}
	return providers.E(providers.TransportLost, op, err).WithBox(pr.b.id)
}

// startError is Exec's error when the wrapper did not start the command.
func (pr *process) startError(op string) error {
	select {
	case <-pr.markerSeen:
		switch pr.marker {
		case markerNoDir:
			return providers.PathError(op, pr.b.id, pr.dir, 2) // ENOENT
		case markerNotDir:
			return providers.PathError(op, pr.b.id, pr.dir, 20) // ENOTDIR
		case markerDirDenied:
			return providers.PathError(op, pr.b.id, pr.dir, 13) // EACCES
		case markerNoSetsid:
			return providers.Errorf(providers.Unsupported, op, "the box has no setsid: boxfs runs each command as a process group of its own").WithBox(pr.b.id)
		}
		return providers.Errorf(providers.Unknown, op, "wrapper marker %d", pr.marker).WithBox(pr.b.id)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if pr.b.ended(ctx) {
		return providers.Errorf(providers.Gone, op, "box has ended").WithBox(pr.b.id)
	}
	return providers.Errorf(providers.Unsupported, op, "the box could not start a command (exit %d): it needs /bin/sh", pr.code).WithBox(pr.b.id)
}

// Wait waits for the command to end and its output to be written.
func (pr *process) Wait() (int, error) {
	<-pr.done
	return pr.code, pr.err
}

// Kill kills the command's process group and confirms it gone.
func (pr *process) Kill(ctx context.Context) error {
	select {
	case <-pr.exited:
		return nil
	default:
	}
	err := pr.kill(ctx)
	pr.killOnce.Do(func() { close(pr.killedCh) })
	return err
}

// kill runs killScript in the box.
func (pr *process) kill(ctx context.Context) error {
	const op = "modal.Kill"
	out := &cappedBuffer{max: 4 << 10}
	p, err := pr.b.Exec(ctx, providers.ExecRequest{Argv: []string{"/bin/sh", "-c", killScript, "boxfs-kill", pr.pidfile}, Dir: "/", Stdout: out, Stderr: out})
	code := -1
	if err == nil {
		code, err = p.Wait()
	}
	return shell.KillExit(op, pr.b.id, code, []byte(out.String()), err)
}
