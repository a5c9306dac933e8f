//go:build !linux

package agent

import (
	"errors"
	"io"
)

var errNotLinux = errors.New("agent: the agent serves Linux boxes only")

// Serve serves the agent protocol; the agent runs on Linux only.
func Serve(in io.Reader, out io.WriteCloser) error { return errNotLinux }

func protocolStreams() (io.Reader, io.WriteCloser, error) { return nil, nil, errNotLinux }

func verifySelf(want string) error { return errNotLinux }

// ServeCommands runs commands for the host; the agent runs on Linux only.
func ServeCommands(in io.Reader, out io.Writer) error { return errNotLinux }

// WatchTree reports changes under root; the agent runs on Linux only.
func WatchTree(root string, limit int, out io.Writer) error { return errNotLinux }
