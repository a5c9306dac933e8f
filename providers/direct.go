package providers

import (
	"context"
	"errors"
)

// DirectDialer is a box whose processes the host can reach without going
// through Exec: a container on a network the host is on (its address), or
// one whose file system the host sees (a unix socket under /proc/PID/root).
// The agent channel then carries its requests over a direct connection,
// keeping an exec as the agent's lifeline and as the fallback when the
// connection cannot be made. The route is a hint: a dial that fails within
// a short bound means the exec path, not an error.
type DirectDialer interface {
	// DirectRoutes returns the ways the host may reach a listener in the
	// box, best first; none (and a nil error) when there is no way. An
	// error wrapping ErrDirectOff says the box is not to be dialled at
	// all (the user turned the channel off, or the routes could lead to
	// another machine's listener); its text says why, for facts.json.
	DirectRoutes(ctx context.Context) ([]DirectRoute, error)
}

// ErrDirectOff is wrapped by a DirectRoutes error that means the box is
// deliberately not dialled: its requests stay on the exec.
var ErrDirectOff = errors.New("direct channel off")

// The networks of a DirectRoute.
const (
	DirectTCP  = "tcp"  // a TCP port of the box's address
	DirectUnix = "unix" // a unix socket in the box's file system
)

// DirectRoute is one way to reach a listener in a box.
type DirectRoute struct {
	// Network is DirectTCP or DirectUnix.
	Network string
	// Host is, for DirectTCP, the box's address as the host dials it (an
	// IP, no port): the box's listener binds to it, or to every address
	// when Host is not the box's own (a published address).
	Host string
	// Root is, for DirectUnix, the host path of the box's "/" (for
	// example /proc/PID/root); a socket the box names is looked up under
	// it without following any symlink.
	Root string
	// Why names the route in logs and facts ("bridge 172.17.0.2",
	// "/proc/4242/root").
	Why string
}
