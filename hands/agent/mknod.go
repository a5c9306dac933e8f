package agent

import (
	"context"
	"net/url"
	"strconv"

	"github.com/boxfs/boxfs/providers"
)

var _ providers.Mknoder = (*Client)(nil)

// Mknod makes name a named pipe, socket or device (see providers.Mknoder),
// its permission bits under the agent's umask: one round trip. The box's
// kernel answers: EPERM for a device node where the agent lacks
// CAP_MKNOD.
func (c *Client) Mknod(ctx context.Context, name string, mode providers.FileMode, dev uint64) error {
	const op = "agent.Mknod"
	p, err := clean(op, name)
	if err != nil {
		return c.withBox(op, name, err)
	}
	if !providers.IsSpecial(mode) {
		return providers.Errorf(providers.Invalid, op, "mode %v is not a special file's", mode).WithBox(c.box).WithPath(p)
	}
	q := url.Values{
		"path": {p},
		"mode": {strconv.FormatUint(uint64(providers.UnixMode(mode)), 8)},
		"dev":  {strconv.FormatUint(dev, 10)},
	}
	return do(ctx, c, op, p, true, func() error { return c.setExt(opMknod, q) })
}
