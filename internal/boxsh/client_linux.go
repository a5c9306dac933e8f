package boxsh

import (
	"bufio"
	"net"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// PeerUID is the uid of the process at the other end of c.
func PeerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, cerr
	}
	return int(cred.Uid), nil
}

// Mounts lists the mount points of this process's boxfs mounts
// (type fuse.boxfs), as /proc/self/mountinfo has them.
func Mounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mnts []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, found := strings.Cut(sc.Text(), " - ")
		if !found {
			continue
		}
		fields, pf := strings.Fields(pre), strings.Fields(post)
		if len(fields) >= 5 && len(pf) > 0 && pf[0] == "fuse.boxfs" {
			mnts = append(mnts, UnescapeMountinfo(fields[4]))
		}
	}
	return mnts, sc.Err()
}

// Getwd is the kernel's name of the working directory (never $PWD, whose
// symbolic links mountinfo does not know).
func Getwd() (string, error) { return unix.Getwd() }

// UnescapeMountinfo undoes mountinfo's octal escapes (\040 for a blank).
func UnescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			v := 0
			okOct := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					okOct = false
					break
				}
				v = v*8 + int(c-'0')
			}
			if okOct {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// IsTerminal reports whether fd is a terminal.
func IsTerminal(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
	return err == nil
}

// TermSize is the size of the terminal at fd.
func TermSize(fd uintptr) (Winsize, bool) {
	ws, err := unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ)
	if err != nil || ws.Row == 0 || ws.Col == 0 {
		return Winsize{}, false
	}
	return Winsize{Rows: ws.Row, Cols: ws.Col}, true
}

// MakeRaw puts the terminal at fd in raw mode (as cfmakeraw(3) does) and
// returns what puts it back.
func MakeRaw(fd uintptr) (restore func(), err error) {
	old, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(int(fd), unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return func() { unix.IoctlSetTermios(int(fd), unix.TCSETS, old) }, nil
}
