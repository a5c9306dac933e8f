package fs

import (
	"log/slog"
	"sync"
	"syscall"

	"github.com/boxfs/boxfs/providers"
)

// codeErrno is the one table from error codes to what the kernel is told.
// Every code has a row (TestEveryCodeHasAnErrno).
var codeErrno = map[providers.Code]syscall.Errno{
	providers.Invalid:        syscall.EINVAL,
	providers.Unsupported:    syscall.ENOTSUP,
	providers.NotFound:       syscall.ENOENT,
	providers.Exists:         syscall.EEXIST,
	providers.Permission:     syscall.EACCES,
	providers.Gone:           syscall.ENODEV,
	providers.Timeout:        syscall.ETIMEDOUT,
	providers.Liveness:       syscall.ETIMEDOUT,
	providers.Aborted:        syscall.EINTR,
	providers.Refused:        syscall.EPERM,
	providers.Unsafe:         syscall.EPERM,
	providers.TooLarge:       syscall.EFBIG,
	providers.TransportLost:  syscall.ENOTCONN,
	providers.OutcomeUnknown: syscall.EIO,
	providers.Auth:           syscall.EACCES,
	providers.Unavailable:    syscall.EAGAIN,
	providers.Unknown:        syscall.EIO,
}

// fileCodes are the codes a box-side errno can stand behind; for these the
// errno itself (ENOTEMPTY, EXDEV, EROFS ...) is the more exact answer. For
// the others (the box is gone, the channel broke, the deadline passed) the
// code is what happened, whatever errno came along.
var fileCodes = map[providers.Code]bool{
	providers.Invalid: true, providers.NotFound: true, providers.Exists: true,
	providers.Permission: true, providers.TooLarge: true, providers.Unsupported: true,
	providers.Unavailable: true, providers.Unknown: true,
}

var unknownLogged sync.Map // error text -> true: unknown errors are logged once

// toErrno turns an error into the errno the kernel is told.
func toErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	code := providers.CodeOf(err)
	if errno, ok := providers.ErrnoOf(err); ok && fileCodes[code] {
		return errno
	}
	if e, ok := codeErrno[code]; ok {
		if code == providers.Unknown {
			if _, seen := unknownLogged.LoadOrStore(err.Error(), true); !seen {
				slog.Error("unclassified error answered EIO", "err", err)
			}
		}
		return e
	}
	return syscall.EIO
}
