package e2b

import (
	"context"
	"errors"
	"io"
	"path"
	"strconv"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/e2b/internal/envd/filesystem"
)

var _ providers.Watcher = (*Box)(nil)

// maxBatch bounds the paths one call of Watch's changed carries, however
// fast the box makes changes.
const maxBatch = 1024

// Watch reports the changes made under root in the box as envd's WatchDir
// sees them (recursively; inotify in the sandbox), whoever made them, in
// the shape of the agent channel's watch: changed gets each batch of
// changed paths, relative to root ("" for root itself), on one goroutine,
// in order; ready is called once the tree is watched. It returns nil when
// ctx ends, and an error when the watch stops (envd lost events, the
// stream broke, the box went): whatever changed from then on is not
// reported, so the caller takes everything under root as changed before
// it watches again.
func (b *Box) Watch(ctx context.Context, root string, ready func(), changed func(changes []providers.Change, all bool)) error {
	const op = "e2b.Watch"
	if err := b.gone(op); err != nil {
		return err
	}
	if !path.IsAbs(root) {
		return providers.Errorf(providers.Invalid, op, "root %q is not absolute", root).WithBox(b.id)
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := b.watchStream(ctx, root)
	if err != nil {
		if parent.Err() != nil {
			return nil
		}
		return providers.E(0, op, err).WithPath(root)
	}
	defer stream.Close()
	if ready != nil {
		ready()
	}
	names := make(chan string, 256)
	var streamErr error
	var silent atomic.Bool
	go func() {
		defer close(names)
		live := time.AfterFunc(3*b.p.keepalive, func() { silent.Store(true); cancel() })
		defer live.Stop()
		for stream.Receive() {
			live.Reset(3 * b.p.keepalive)
			if fe := stream.Msg().GetFilesystem(); fe != nil {
				select {
				case names <- fe.GetName():
				case <-ctx.Done():
					return
				}
			}
		}
		streamErr = stream.Err()
	}()
	for name := range names {
		batch := []string{rel(name)}
	more:
		for len(batch) < maxBatch {
			select {
			case n, ok := <-names:
				if !ok {
					break more
				}
				batch = append(batch, rel(n))
			default:
				break more
			}
		}
		changed(providers.PathChanges(batch), false) // envd says no attributes
	}
	switch {
	case parent.Err() != nil:
		return nil
	case silent.Load():
		return providers.Errorf(providers.TransportLost, op, "no sign of life from envd's watch for %v", 3*b.p.keepalive).WithBox(b.id).WithPath(root)
	case streamErr == nil:
		streamErr = io.ErrUnexpectedEOF
	}
	return b.envdError(context.Background(), op, streamErr).WithPath(root)
}

// rel is an event's name relative to the watched root: "" for the root.
func rel(name string) string {
	if name == "." {
		return ""
	}
	return name
}

// watchStream calls WatchDir and reads its start event, again while E2B
// answers busy.
func (b *Box) watchStream(ctx context.Context, root string) (*connect.ServerStreamForClient[filesystem.WatchDirResponse], error) {
	const op = "e2b.Watch"
	for n := 0; ; n++ {
		r := connect.NewRequest(&filesystem.WatchDirRequest{Path: root, Recursive: true})
		r.Header().Set("Keepalive-Ping-Interval", strconv.Itoa(int(b.p.keepalive/time.Second)))
		stream, err := b.envd.fs.WatchDir(ctx, r)
		if err == nil {
			if stream.Receive() && stream.Msg().GetStart() != nil {
				return stream, nil
			}
			err = stream.Err()
			stream.Close()
			if err == nil {
				err = errors.New("envd's first watch event was not the start event")
			}
		}
		if !retryable(err) || n+1 >= maxAttempts || b.away(ctx) {
			return nil, b.envdError(ctx, op, err)
		}
		if berr := backoff(ctx, n, err); berr != nil {
			return nil, berr
		}
	}
}
