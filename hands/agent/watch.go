package agent

import (
	"bufio"
	"context"
	"encoding/hex"
	"io"
	"path"
	"strconv"
	"strings"

	"github.com/boxfs/boxfs/providers"
)

// Records WatchTree writes, each ended by a NUL byte.
const (
	watchPath     = 'p' // 'p' REL: REL (relative to the root; "" is the root) or what is in it changed
	watchStat     = 'q' // 'q' HEX REL: REL changed, and HEX (hex of a statNS) is its lstat after
	watchGone     = 'g' // 'g' REL: REL changed, and is gone
	watchOverflow = '!' // changes were lost: anything may have changed
	watchReady    = 'r' // the watches are set: changes from here on are reported
)

// Watch runs the agent's watch of root in the box ("boxfs agent -watch
// ROOT" on the command stream) and calls changed with each batch of
// changed paths (relative to root, "" for root itself; all is true when
// changes were lost and anything under root may have changed), on one
// goroutine, in order. ready is called once the tree is watched; limit
// bounds the directories watched (0: the agent's default), past which an
// overflow is reported. Watch returns when ctx ends (nil) or the watch
// stops (its error); Unavailable when the command stream is not up.
func (ch *Channel) Watch(ctx context.Context, root string, limit int, ready func(), changed func(changes []providers.Change, all bool)) error {
	const op = "agent.Watch"
	dest, err := ch.binaryPath(ctx, op)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	stderr := &tailBuffer{max: 2048}
	p, err := ch.execCmd(ctx, providers.ExecRequest{
		Argv:   []string{dest, "agent", "-watch", root, "-watch-limit", strconv.Itoa(limit)},
		Dir:    "/",
		Stdout: pw,
		Stderr: stderr,
	}, nil, true)
	if err != nil {
		return err
	}
	ended := make(chan struct{})
	var code int
	var werr error
	go func() {
		code, werr = p.Wait()
		pw.Close()
		close(ended)
	}()
	br := bufio.NewReaderSize(pr, 64<<10)
	var batch []providers.Change
	all := false
	for {
		rec, err := br.ReadString(0)
		if err != nil {
			break
		}
		rec = strings.TrimSuffix(rec, "\x00")
		if rec == "" {
			continue
		}
		switch rec[0] {
		case watchReady:
			// What came before (the tree outgrew the watch as it was
			// set) is reported first.
			if all || len(batch) > 0 {
				changed(batch, all)
				batch, all = nil, false
			}
			if ready != nil {
				ready()
			}
		case watchOverflow:
			all = true
		case watchPath:
			batch = append(batch, providers.Change{Path: rec[1:]})
		case watchGone:
			batch = append(batch, providers.Change{Path: rec[1:], Gone: true})
		case watchStat:
			if c, ok := parseWatchStat(rec[1:]); ok {
				batch = append(batch, c)
			}
		}
		if br.Buffered() == 0 && (all || len(batch) > 0) {
			changed(batch, all)
			batch, all = nil, false
		}
	}
	pr.Close()
	<-ended
	switch {
	case ctx.Err() != nil:
		return nil
	case werr != nil:
		return providers.E(0, op, werr).WithBox(ch.box.ID()).WithPath(root)
	default:
		return providers.Errorf(providers.Unknown, op, "the agent's watch exited %d: %s", code, strings.TrimSpace(stderr.String())).WithBox(ch.box.ID()).WithPath(root)
	}
}

// parseWatchStat parses the rest of a watchStat record.
func parseWatchStat(rec string) (providers.Change, bool) {
	const n = 2 * statNSLen
	if len(rec) < n {
		return providers.Change{}, false
	}
	raw, err := hex.DecodeString(rec[:n])
	if err != nil {
		return providers.Change{}, false
	}
	st, err := unmarshalStatNS(string(raw))
	if err != nil {
		return providers.Change{}, false
	}
	rel := rec[n:]
	_, name := path.Split(rel)
	fi := st.info(name)
	return providers.Change{Path: rel, Info: &fi}, true
}

// binaryPath returns where the agent binary is in the box, opening the
// file channel (which brings it there) when it is not known yet;
// Unavailable when it cannot be.
func (ch *Channel) binaryPath(ctx context.Context, op string) (string, error) {
	ch.mu.Lock()
	dest := ch.dest
	ch.mu.Unlock()
	if dest != "" {
		return dest, nil
	}
	if _, err := ch.client(ctx, op); err != nil {
		return "", &providers.Error{Code: providers.Unavailable, Op: op, Box: ch.box.ID(), Err: err}
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.dest, nil
}
