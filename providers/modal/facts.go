package modal

import (
	"bytes"
	"context"
	"strings"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/internal/probe"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// measureTries is how often a box's own report is asked for before an
// attached box falls back on the hardware its tag recorded.
const measureTries = 3

// Facts reports what the box is. A box this provider made reports what it
// measured at create, with its network and ports as the spec set them
// (Modal enforces both). An attached box is measured again (three tries,
// else the hardware its tag recorded at create); its network, ports and
// ptrace scope are left unknown, never read from a tag.
func (b *Box) Facts(ctx context.Context) (providers.Facts, error) {
	const op = "modal.Facts"
	if err := b.gone(op); err != nil {
		return providers.Facts{}, err
	}
	b.mu.Lock()
	cached := b.facts
	b.mu.Unlock()
	var f providers.Facts
	switch {
	case cached != nil:
		f = *cached
	default:
		var err error
		for try := range measureTries {
			if f, err = b.measure(ctx, false); err == nil || providers.IsCode(err, providers.Gone) || ctx.Err() != nil {
				break
			}
			b.p.log.Debug("modal: measuring an attached box failed", "box", b.id, "try", try+1, "err", err)
		}
		if err != nil {
			if providers.IsCode(err, providers.Gone) || ctx.Err() != nil {
				return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
			}
			f = b.base()
			decodeHardware(b.Labels()[tagHardware], &f)
		}
	}
	if b.created != nil {
		f.Network = networkFact(b.created.network)
		f.Ports = make([]int, 0, len(b.created.ports))
		for _, p := range b.created.ports {
			f.Ports = append(f.Ports, int(p.GetPort()))
		}
	} else {
		f.Network, f.Ports, f.PtraceScope = "", nil, nil
	}
	if _, err := b.Status(ctx); err != nil {
		return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
	}
	return f, nil
}

// base are the facts the provider knows without asking the box.
func (b *Box) base() providers.Facts {
	return providers.Facts{
		Provider: Name, ID: b.id, Isolation: b.isolation, OS: "linux",
		Workspace: b.workspace, TmpDir: tmpDir, StartedAt: b.startedAt(),
		LiveProcesses: providers.Bool(true), Stdin: providers.Bool(true), SecretsVia: "fd",
		Suspend: providers.SuspendSnapshot,
	}
}

// measure runs probeScript in the box (making the workspace first when
// mkdir is set) and keeps the result.
func (b *Box) measure(ctx context.Context, mkdir bool) (providers.Facts, error) {
	const op = "modal.measure"
	out, errb := &cappedBuffer{max: 64 << 10}, &cappedBuffer{max: 4 << 10}
	pr, err := b.Exec(ctx, providers.ExecRequest{Argv: probe.Argv(b.workspace, mkdir), Dir: "/", Stdout: out, Stderr: errb})
	if err != nil {
		return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
	}
	code, err := pr.Wait()
	if err != nil {
		return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
	}
	if code != 0 {
		return providers.Facts{}, providers.Errorf(providers.Unknown, op, "probe exited %d: %s", code, strings.TrimSpace(errb.String())).WithBox(b.id).WithPath(b.workspace)
	}
	f := b.base()
	if err := probe.Read([]byte(out.String()), &f); err != nil {
		return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
	}
	b.mu.Lock()
	b.facts = &f
	b.mu.Unlock()
	return f, nil
}

// networkFact is the network Modal was asked to enforce.
func networkFact(n *pb.NetworkAccess) providers.NetworkMode {
	switch n.GetNetworkAccessType() {
	case pb.NetworkAccess_BLOCKED:
		return providers.NetworkNone
	case pb.NetworkAccess_ALLOWLIST:
		return providers.NetworkAllowlist
	}
	return providers.NetworkOpen
}

// cappedBuffer keeps the first max bytes written to it and drops the rest:
// what a box says about itself is read, never held without bound.
type cappedBuffer struct {
	b   bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *cappedBuffer) String() string { return c.b.String() }
