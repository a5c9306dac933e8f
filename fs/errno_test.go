package fs

import (
	"context"
	"fmt"
	"syscall"
	"testing"

	"github.com/boxfs/boxfs/providers"
)

func TestEveryCodeHasAnErrno(t *testing.T) {
	for _, c := range providers.Codes() {
		if _, ok := codeErrno[c]; !ok {
			t.Errorf("code %v has no errno", c)
		}
	}
}

func TestToErrno(t *testing.T) {
	tests := []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{providers.PathError("hands.Rmdir", "b", "/w/d", syscall.ENOTEMPTY), syscall.ENOTEMPTY},
		{providers.PathError("hands.Rename", "b", "/w/d", syscall.EXDEV), syscall.EXDEV},
		{providers.PathError("hands.Create", "b", "/w/d", syscall.EROFS), syscall.EROFS},
		{fmt.Errorf("wrapped: %w", providers.PathError("op", "b", "/p", syscall.ENAMETOOLONG)), syscall.ENAMETOOLONG},
		{providers.Errorf(providers.Gone, "op", "destroyed"), syscall.ENODEV},
		{providers.E(providers.Gone, "op", syscall.ENOENT), syscall.ENODEV},
		{providers.Errorf(providers.TransportLost, "op", "eof"), syscall.ENOTCONN},
		{providers.Errorf(providers.Liveness, "op", "hung"), syscall.ETIMEDOUT},
		{context.DeadlineExceeded, syscall.ETIMEDOUT},
		{context.Canceled, syscall.EINTR},
		{providers.Errorf(providers.Unsupported, "ctl", "gpu"), syscall.ENOTSUP},
		{fmt.Errorf("plain"), syscall.EIO},
	}
	for _, tt := range tests {
		if got := toErrno(tt.err); got != tt.want {
			t.Errorf("toErrno(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
