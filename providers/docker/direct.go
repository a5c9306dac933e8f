package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/boxfs/boxfs/providers"
)

var _ providers.DirectDialer = (*Box)(nil)

// DirectRoutes returns how the host may reach a listener in the container,
// best first:
//
//   - its root under /proc/PID/root, when this process may look into the
//     container's root (root, or the container's own user) and /proc/PID
//     is that container's process (its cgroup names the container): a
//     unix socket there needs no network, so it works with network=none
//     too;
//   - its address on each network Docker attached it to (the default
//     bridge, a user network), except the host's own network.
//
// Only a daemon on this machine (a unix socket, TCP to loopback) is asked:
// a remote daemon's PIDs are not this machine's, and its containers'
// private addresses, dialled from here, could reach another machine's
// listener. That, and the option direct=off, return an error wrapping
// providers.ErrDirectOff: the agent's requests stay on the exec. A user
// in the docker group on Linux has the bridge address; Docker Desktop's VM
// or a rootless daemon has neither, or routes that do not answer: the
// agent channel then keeps the exec's stdio, after a bounded dial.
func (b *Box) DirectRoutes(ctx context.Context) ([]providers.DirectRoute, error) {
	const op = "docker.DirectRoutes"
	if err := b.gone(op); err != nil {
		return nil, err
	}
	if b.p.noDirect {
		return nil, fmt.Errorf("%w: provider option direct=off", providers.ErrDirectOff)
	}
	if !b.p.local {
		return nil, fmt.Errorf("%w: the daemon (%s) is not on this machine", providers.ErrDirectOff, b.p.cli.DaemonHost())
	}
	c, err := b.p.cli.ContainerInspect(ctx, b.id)
	if err != nil {
		return nil, wrap(op, b.id, err)
	}
	var routes []providers.DirectRoute
	if c.State != nil && c.State.Running && c.State.Pid > 0 {
		if root, ok := containerRoot(c.State.Pid, c.ID); ok {
			routes = append(routes, providers.DirectRoute{Network: providers.DirectUnix, Root: root, Why: root})
		}
	}
	if c.HostConfig != nil && c.HostConfig.NetworkMode.IsHost() {
		return routes, nil
	}
	if c.NetworkSettings != nil {
		for name, n := range c.NetworkSettings.Networks {
			if n == nil {
				continue
			}
			if ip := net.ParseIP(n.IPAddress); ip != nil && !ip.IsLoopback() && !ip.IsUnspecified() {
				routes = append(routes, providers.DirectRoute{Network: providers.DirectTCP, Host: ip.String(), Why: name + " " + ip.String()})
			}
		}
	}
	return routes, nil
}

// containerRoot returns /proc/pid/root when this process may open it and
// pid's cgroup names the container id (pid is the container's, not a
// process that took the number since, nor one of another pid namespace).
func containerRoot(pid int, id string) (string, bool) {
	if len(id) < 12 {
		return "", false
	}
	proc := "/proc/" + strconv.Itoa(pid)
	f, err := os.Open(proc + "/cgroup")
	if err != nil {
		return "", false
	}
	cg, err := io.ReadAll(io.LimitReader(f, 64<<10))
	f.Close()
	if err != nil || !bytes.Contains(cg, []byte(id)) {
		return "", false
	}
	root := proc + "/root"
	d, err := os.Open(root)
	if err != nil {
		return "", false
	}
	d.Close()
	return root, true
}
