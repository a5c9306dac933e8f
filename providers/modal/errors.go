package modal

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// imageNotFound begins the message of the FailedPrecondition with which
// Modal answers an image id it does not have (ImageFromId of an unknown or
// deleted image).
const imageNotFound = "Could not find image with ID"

// errorCode classifies an error of Modal's API (a gRPC status) or of the
// call itself. It is the one place Modal's failures become codes; it reads
// error text only where Modal's own clients do.
func errorCode(err error) providers.Code {
	var pe *providers.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &pe):
		return pe.Code
	case errors.Is(err, context.Canceled):
		return providers.Aborted
	case errors.Is(err, context.DeadlineExceeded):
		return providers.Timeout
	}
	st, ok := status.FromError(err)
	if !ok {
		return providers.Unknown
	}
	switch st.Code() {
	case codes.NotFound:
		return providers.NotFound
	case codes.AlreadyExists:
		return providers.Exists
	case codes.InvalidArgument, codes.OutOfRange:
		return providers.Invalid
	case codes.ResourceExhausted:
		if _, ok := serverDelay(err); ok {
			// Throttled, with a time to come back: it passes.
			return providers.Unavailable
		}
		// Refused for a quota or capacity.
		return providers.Refused
	case codes.FailedPrecondition:
		if strings.Contains(st.Message(), imageNotFound) {
			// An unknown image: modal-js's images.fromId and
			// images.delete read this answer as NotFoundError.
			return providers.NotFound
		}
		// Modal refuses for a state of its own.
		return providers.Refused
	case codes.PermissionDenied:
		return providers.Permission
	case codes.Unauthenticated:
		return providers.Auth
	case codes.Unavailable, codes.Aborted:
		return providers.Unavailable
	case codes.DeadlineExceeded:
		return providers.Timeout
	case codes.Canceled:
		return providers.Aborted
	case codes.Unimplemented:
		return providers.Unsupported
	}
	return providers.Unknown
}

// retryable reports whether a failed call may be sent again: the codes
// Modal's own clients retry (the server dedups a retried call by its
// idempotency key).
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// minServerDelay is the shortest wait a throttled call gets, whatever the
// server asked: Modal's Go client waits at least its first backoff.
const minServerDelay = retryBase

// serverDelay returns the delay after which a failed call may be sent
// again, when the server asked for one: Modal's RPCRetryPolicy detail
// (modal.client.RPCRetryPolicy.retry_after_secs) in the error's status, the
// signal Modal's own clients read (modal-go's getServerRetryPolicy),
// whatever the status code. The delay is at least minServerDelay.
func serverDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if rp, ok := d.(*pb.RPCRetryPolicy); ok {
			return max(time.Duration(float64(rp.GetRetryAfterSecs())*float64(time.Second)), minServerDelay), true
		}
	}
	return 0, false
}

// wrap makes err a *providers.Error of op, classified by errorCode.
func wrap(op, box string, err error) *providers.Error {
	return providers.Classify(op, box, err, errorCode)
}
