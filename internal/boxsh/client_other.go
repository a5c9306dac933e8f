//go:build !linux

package boxsh

import (
	"errors"
	"net"
	"os"
)

var errShLinux = errors.New("boxfs sh is implemented on Linux only")

func PeerUID(c *net.UnixConn) (int, error) { return -1, errShLinux }

func Mounts() ([]string, error) { return nil, errShLinux }

func Getwd() (string, error) { return os.Getwd() }

func IsTerminal(fd uintptr) bool { return false }

func UnescapeMountinfo(s string) string { return s }

func TermSize(fd uintptr) (Winsize, bool) { return Winsize{}, false }

func MakeRaw(fd uintptr) (func(), error) { return nil, errShLinux }
