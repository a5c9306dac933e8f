package docker

import (
	"context"
	"errors"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/boxfs/boxfs/providers"
)

// errorCode classifies an error of the Docker client or engine. It is the
// one place vendor errors become codes; it never looks at error text.
func errorCode(err error) providers.Code {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, context.Canceled):
		return providers.Aborted
	case errors.Is(err, context.DeadlineExceeded):
		return providers.Timeout
	case client.IsErrConnectionFailed(err):
		return providers.Unavailable
	case cerrdefs.IsNotFound(err):
		return providers.NotFound
	case cerrdefs.IsInvalidArgument(err):
		return providers.Invalid
	case cerrdefs.IsAlreadyExists(err):
		return providers.Exists
	case cerrdefs.IsConflict(err), cerrdefs.IsFailedPrecondition(err):
		// The engine refuses because of an object's state ("container is
		// not running", "removal already in progress").
		return providers.Refused
	case cerrdefs.IsPermissionDenied(err):
		return providers.Permission
	case cerrdefs.IsUnauthorized(err):
		return providers.Auth
	case cerrdefs.IsUnavailable(err):
		return providers.Unavailable
	case cerrdefs.IsNotImplemented(err):
		return providers.Unsupported
	case cerrdefs.IsResourceExhausted(err):
		return providers.TooLarge
	case cerrdefs.IsCanceled(err):
		return providers.Aborted
	case cerrdefs.IsDeadlineExceeded(err):
		return providers.Timeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return providers.Unavailable
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return providers.TransportLost
	}
	return providers.Unknown
}

// wrap makes err a *providers.Error of op, classified by errorCode. An
// error that already is one keeps its code.
func wrap(op, box string, err error) *providers.Error {
	return providers.Classify(op, box, err, errorCode)
}
