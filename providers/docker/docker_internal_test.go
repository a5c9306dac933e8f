package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/boxfs/boxfs/providers"
)

func TestIsLocalHost(t *testing.T) {
	for host, want := range map[string]bool{
		"unix:///var/run/docker.sock": true,
		"npipe:////./pipe/docker":     true,
		"tcp://127.0.0.1:2375":        true,
		"tcp://[::1]:2375":            true,
		"tcp://localhost:2375":        true,
		"tcp://10.0.0.5:2376":         false,
		"tcp://docker.example:2376":   false,
		"ssh://me@host":               false,
	} {
		if got := isLocalHost(host); got != want {
			t.Errorf("isLocalHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestErrorCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want providers.Code
	}{
		{fmt.Errorf("x: %w", cerrdefs.ErrNotFound), providers.NotFound},
		{cerrdefs.ErrInvalidArgument, providers.Invalid},
		{cerrdefs.ErrConflict, providers.Refused},
		{cerrdefs.ErrAlreadyExists, providers.Exists},
		{cerrdefs.ErrPermissionDenied, providers.Permission},
		{cerrdefs.ErrUnauthenticated, providers.Auth},
		{cerrdefs.ErrUnavailable, providers.Unavailable},
		{cerrdefs.ErrNotImplemented, providers.Unsupported},
		{context.Canceled, providers.Aborted},
		{fmt.Errorf("w: %w", context.DeadlineExceeded), providers.Timeout},
		{fmt.Errorf("plain"), providers.Unknown},
	} {
		if got := errorCode(c.err); got != c.want {
			t.Errorf("errorCode(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestDirectOff: the option direct=off, and a daemon not on this machine,
// make DirectRoutes refuse with providers.ErrDirectOff (the agent's
// requests stay on the exec) before the daemon is asked; a bad value is
// invalid.
func TestDirectOff(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		opts map[string]string
		want string // in the error's text; "" for no ErrDirectOff
	}{
		{map[string]string{"host": "unix:///nonexistent/docker.sock", "direct": "off"}, "direct=off"},
		{map[string]string{"host": "tcp://10.0.0.5:2376"}, "not on this machine"},
		{map[string]string{"host": "tcp://10.0.0.5:2376", "direct": "auto"}, "not on this machine"},
		{map[string]string{"host": "unix:///nonexistent/docker.sock"}, ""},
	} {
		p, err := New(providers.Config{Options: c.opts})
		if err != nil {
			t.Fatalf("New(%v): %v", c.opts, err)
		}
		_, err = p.newBox("0123456789abcdef", nil).DirectRoutes(ctx)
		p.Close()
		if c.want == "" {
			// The daemon is asked, and does not answer.
			if err == nil || errors.Is(err, providers.ErrDirectOff) {
				t.Errorf("%v: DirectRoutes: %v, want the daemon's error", c.opts, err)
			}
			continue
		}
		if !errors.Is(err, providers.ErrDirectOff) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: DirectRoutes: %v, want ErrDirectOff saying %q", c.opts, err, c.want)
		}
	}
	if _, err := New(providers.Config{Options: map[string]string{"direct": "no"}}); !providers.IsCode(err, providers.Invalid) {
		t.Errorf("New with direct=no: %v, want invalid", err)
	}
}
