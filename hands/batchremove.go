package hands

import (
	"context"

	"github.com/boxfs/boxfs/providers"
)

// RemoveFiles removes each of rms in order, a directory with Rmdir and
// anything else with Remove, and returns one error per entry: in one
// round trip over the agent channel (see agent.Client.RemoveFiles), one
// call each where the path has no BatchRemover (a local box, a cloud
// provider's files, the script path) or its agent lacks the operation.
// Either way an entry sees the entries before it done: an rmdir after the
// unlinks of its children succeeds.
func (h *Hands) RemoveFiles(ctx context.Context, rms []providers.FileRemove) ([]error, error) {
	if br, ok := h.files.(providers.BatchRemover); ok && !h.noRemoves.Load() {
		errs, err := br.RemoveFiles(ctx, rms)
		if !providers.IsCode(err, providers.Unsupported) {
			return errs, err
		}
		h.log.Debug("hands: the box removes one name a call", "via", h.via, "err", err)
		h.noRemoves.Store(true)
	}
	errs := make([]error, len(rms))
	for i, rm := range rms {
		if rm.Dir {
			errs[i] = h.Rmdir(ctx, rm.Name)
		} else {
			errs[i] = h.Remove(ctx, rm.Name)
		}
	}
	return errs, nil
}
