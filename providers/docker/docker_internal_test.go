package docker

import (
	"context"
	"fmt"
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
