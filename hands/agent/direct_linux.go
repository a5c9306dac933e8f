package agent

import (
	"context"
	"fmt"
	"net"
	"strings"

	"golang.org/x/sys/unix"
)

// dialUnixIn connects to the unix socket at sock (absolute, in the box)
// under root, the host path of the box's "/". The socket is opened with
// openat2 confined to root and refusing every symlink, checked to be a
// socket, and connected through its own descriptor (/proc/self/fd/N): the
// box cannot point the host at a socket outside it, nor swap the file
// between the check and the connect.
func dialUnixIn(ctx context.Context, root, sock string) (net.Conn, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the box's root: %w", err)
	}
	defer unix.Close(rfd)
	fd, err := unix.Openat2(rfd, strings.TrimPrefix(sock, "/"), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("opening the agent's socket: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("checking the agent's socket: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s in the box is not a socket", sock)
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}
