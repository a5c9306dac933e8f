package hands

import (
	"context"
	"io"

	"github.com/boxfs/boxfs/providers"
)

// Signaler is a command that can be sent a signal other than the kill:
// the processes Run starts on a box with command records are.
type Signaler interface {
	// Signal sends sig (a name kill(1) takes: INT, TERM, HUP) to the
	// command's whole process group in the box. It does not wait for the
	// group to end. A command that has ended, or whose record is not
	// written yet, is NotFound.
	Signal(ctx context.Context, sig string) error
}

var _ Signaler = (*process)(nil)

// signalScript sends a signal to the group named by the record DIR/ID
// ("pgid pid starttime owner", as recordScript and the agent write it);
// exit 3 when there is no such record. It runs after the scripts'
// prelude, which decodes its arguments.
const signalScript = `dir=$1
id=$2
sig=$3
pg=
read -r pg _ < "$dir/$id" 2>/dev/null
case $pg in '' | *[!0-9]* | 0 | 1) exit 3 ;; esac
kill -s "$sig" -- "-$pg"
`

// Signal sends sig to the command's process group through its record in
// the box: one more command, so it costs a round trip.
func (rp *process) Signal(ctx context.Context, sig string) error {
	const op = "hands.Signal"
	switch sig {
	case "INT", "TERM", "HUP", "QUIT", "USR1", "USR2", "KILL", "WINCH":
	default:
		return providers.Errorf(providers.Invalid, op, "signal %q not forwarded", sig).WithBox(rp.h.box.ID())
	}
	if rp.id == "" {
		return providers.Errorf(providers.Unsupported, op, "the box keeps no command records (no shell or temporary directory)").WithBox(rp.h.box.ID())
	}
	select {
	case <-rp.done:
		return providers.Errorf(providers.NotFound, op, "the command has ended").WithBox(rp.h.box.ID())
	default:
	}
	_, err := rp.h.sh.run(ctx, op, "", signalScript, nil, io.Discard, rp.h.cmdDir(), rp.id, sig)
	if err != nil {
		return providers.E(0, op, err).WithBox(rp.h.box.ID())
	}
	return nil
}
