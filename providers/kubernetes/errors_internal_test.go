package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apihttpstream "k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/boxfs/boxfs/providers"
)

func TestErrorCode(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name string
		err  error
		want providers.Code
	}{
		{"not found", apierrors.NewNotFound(pods, "x"), providers.NotFound},
		{"exists", apierrors.NewAlreadyExists(pods, "x"), providers.Exists},
		{"conflict", apierrors.NewConflict(pods, "x", errors.New("changed")), providers.Refused},
		{"unauthorized", apierrors.NewUnauthorized("token"), providers.Auth},
		{"forbidden", apierrors.NewForbidden(pods, "x", errors.New("rbac")), providers.Permission},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "x", nil), providers.Invalid},
		{"bad request", apierrors.NewBadRequest("no"), providers.Invalid},
		{"429", apierrors.NewTooManyRequests("slow down", 1), providers.Unavailable},
		{"503", apierrors.NewServiceUnavailable("down"), providers.Unavailable},
		{"500", apierrors.NewInternalError(errors.New("boom")), providers.Unavailable},
		{"504", apierrors.NewTimeoutError("slow", 1), providers.Unavailable},
		{"413", apierrors.NewRequestEntityTooLargeError("big"), providers.TooLarge},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), providers.Aborted},
		{"deadline", context.DeadlineExceeded, providers.Timeout},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, providers.Unavailable},
		{"dns", &net.DNSError{Name: "cluster"}, providers.Unavailable},
		{"reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, providers.TransportLost},
		{"eof", io.ErrUnexpectedEOF, providers.TransportLost},
		{"ws upgrade 404", &httpstream.UpgradeFailureError{Cause: apierrors.NewNotFound(pods, "x")}, providers.NotFound},
		{"spdy upgrade 403", &apihttpstream.UpgradeFailureError{Cause: apierrors.NewForbidden(pods, "x", nil)}, providers.Permission},
		{"image never pulled", &podError{Reason: "ErrImageNeverPull"}, providers.NotFound},
		{"image name", &podError{Reason: "InvalidImageName"}, providers.Invalid},
		{"config error", &podError{Reason: "CreateContainerConfigError"}, providers.Refused},
		{"deadline passed", &podError{Reason: reasonDeadline}, providers.Gone},
		{"evicted", &podError{Reason: "Evicted"}, providers.Gone},
		{"other", errors.New("something"), providers.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, errorCode(tc.err), "%v", tc.err)
			assert.Equal(t, tc.want, wrap("op", "box", tc.err).Code)
		})
	}
}

func TestShouldFallback(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	assert.True(t, shouldFallback(&httpstream.UpgradeFailureError{Cause: errors.New("bad handshake (400 Bad Request)")}), "an old server refusing v5")
	assert.True(t, shouldFallback(&apihttpstream.UpgradeFailureError{Cause: errors.New("bad handshake")}))
	assert.False(t, shouldFallback(&httpstream.UpgradeFailureError{Cause: apierrors.NewNotFound(pods, "x")}), "a missing pod is missing over SPDY too")
	assert.False(t, shouldFallback(errors.New("connection reset")))
}

func TestLocalName(t *testing.T) {
	for name, want := range map[string]bool{
		"a": true, "a/b/": true, "./a": true, "a..b": true,
		"": false, "/etc/passwd": false, "../x": false, "a/../../x": false, "a/..": false,
	} {
		assert.Equal(t, want, localName(name), name)
	}
}

func TestEscapeExpansion(t *testing.T) {
	assert.Equal(t, []string{"$$(HOME) $$$$ $$1"}, escapeExpansion([]string{"$(HOME) $$ $1"}))
}
