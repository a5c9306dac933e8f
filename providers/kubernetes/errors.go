package kubernetes

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/httpstream"
	streamhttp "k8s.io/streaming/pkg/httpstream"

	"github.com/boxfs/boxfs/providers"
)

// errorCode classifies an error of the API server, of the streams to a pod
// or of the connection to the cluster. It is the one place Kubernetes
// failures become codes; it reads API status reasons and HTTP codes, never
// error text.
func errorCode(err error) providers.Code {
	if cause, ok := upgradeFailure(err); ok && cause != nil {
		return errorCode(cause)
	}
	var pe *podError
	if errors.As(err, &pe) {
		return podCode(pe.Reason)
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, context.Canceled):
		return providers.Aborted
	case errors.Is(err, context.DeadlineExceeded):
		return providers.Timeout
	case apierrors.IsNotFound(err):
		return providers.NotFound
	case apierrors.IsAlreadyExists(err):
		return providers.Exists
	case apierrors.IsConflict(err):
		// A write lost a race with another writer of the object.
		return providers.Refused
	case apierrors.IsUnauthorized(err):
		return providers.Auth
	case apierrors.IsForbidden(err):
		// RBAC, an admission policy or a quota said no.
		return providers.Permission
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return providers.Invalid
	case apierrors.IsMethodNotSupported(err), apierrors.IsNotAcceptable(err), apierrors.IsUnsupportedMediaType(err):
		return providers.Unsupported
	case apierrors.IsRequestEntityTooLargeError(err):
		return providers.TooLarge
	case apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err),
		apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsUnexpectedServerError(err):
		// 429 and 5xx: the cluster is busy or failing; try again later.
		return providers.Unavailable
	case apierrors.IsGone(err), apierrors.IsResourceExpired(err):
		return providers.Unavailable
	case errors.Is(err, syscall.ECONNREFUSED), isDialError(err):
		return providers.Unavailable
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return providers.TransportLost
	}
	return providers.Unknown
}

// podCode classifies the reasons a pod gives for not running: a waiting
// container's, or the pod's own once it ended.
func podCode(reason string) providers.Code {
	switch reason {
	case "ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff":
		return providers.NotFound
	case "InvalidImageName":
		return providers.Invalid
	case "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "StartError", "Unschedulable":
		// The node or the runtime will not run this spec.
		return providers.Refused
	case "OOMKilled":
		return providers.TooLarge
	case reasonDeadline, "Evicted", "Shutdown", "NodeLost", "Terminated", "Preempting":
		return providers.Gone
	}
	return providers.Unknown
}

// podError is a pod's own account of why it does not run: a reason of the
// kubelet's or the scheduler's and its message.
type podError struct {
	Reason, Message string
}

func (e *podError) Error() string {
	if e.Reason == "" {
		return e.Message
	}
	return e.Reason + ": " + e.Message
}

// upgradeFailure reports whether err is a failed upgrade of a streaming
// request (exec, port-forward) and returns its cause. client-go has two
// such error types, apimachinery's (SPDY) and k8s.io/streaming's
// (WebSocket, remotecommand).
func upgradeFailure(err error) (error, bool) {
	var a *httpstream.UpgradeFailureError
	if errors.As(err, &a) {
		return a.Cause, true
	}
	var s *streamhttp.UpgradeFailureError
	if errors.As(err, &s) {
		return s.Cause, true
	}
	return nil, false
}

// isDialError reports whether err is a failure to reach the API server at
// all (no route, DNS, refused), as opposed to a connection that broke.
func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// wrap makes err a *providers.Error of op, classified by errorCode. An
// error that already is one keeps its code.
func wrap(op, box string, err error) *providers.Error {
	return providers.Classify(op, box, err, errorCode)
}
