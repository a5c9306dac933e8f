package providers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// Code classifies an error. The list is closed and append-only: the numbers
// never change, and every layer maps codes (not error text) to its own
// answers. The zero Code means "no error".
type Code int

// The codes, in DESIGN.md §3 order.
const (
	Invalid        Code = iota + 1 // the caller's request is malformed
	Unsupported                    // the provider cannot honour a field or an operation
	NotFound                       // no such box, path or command
	Exists                         // the name or path is taken
	Permission                     // the box refused the caller
	Gone                           // the box has been destroyed or has ended
	Timeout                        // the caller's deadline passed
	Liveness                       // no sign of life within the liveness bound
	Aborted                        // the caller cancelled
	Refused                        // the provider refused (quota, policy, state)
	Unsafe                         // input would escape its place (paths, archives)
	TooLarge                       // over a size or count limit
	TransportLost                  // the channel to the box broke
	OutcomeUnknown                 // a mutation was sent but its result never came back
	Auth                           // credentials missing or rejected
	Unavailable                    // the provider is down or overloaded; try again later
	Unknown                        // none of the above
)

var codeNames = [...]string{
	Invalid:        "invalid",
	Unsupported:    "unsupported",
	NotFound:       "not_found",
	Exists:         "exists",
	Permission:     "permission",
	Gone:           "gone",
	Timeout:        "timeout",
	Liveness:       "liveness",
	Aborted:        "aborted",
	Refused:        "refused",
	Unsafe:         "unsafe",
	TooLarge:       "too_large",
	TransportLost:  "transport_lost",
	OutcomeUnknown: "outcome_unknown",
	Auth:           "auth",
	Unavailable:    "unavailable",
	Unknown:        "unknown",
}

// Codes returns every defined code, in order.
func Codes() []Code {
	cs := make([]Code, 0, len(codeNames)-1)
	for c := Invalid; c <= Unknown; c++ {
		cs = append(cs, c)
	}
	return cs
}

// String returns the code's wire name, e.g. "not_found".
func (c Code) String() string {
	if c > 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	if c == 0 {
		return "ok"
	}
	return fmt.Sprintf("code(%d)", int(c))
}

// ParseCode returns the code named s ("not_found"), or false.
func ParseCode(s string) (Code, bool) {
	for c := Invalid; c <= Unknown; c++ {
		if codeNames[c] == s {
			return c, true
		}
	}
	return 0, false
}

// MarshalText writes the code's name, so codes read well in JSON.
func (c Code) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads a code's name.
func (c *Code) UnmarshalText(b []byte) error {
	v, ok := ParseCode(string(b))
	if !ok {
		return fmt.Errorf("providers: unknown error code %q", b)
	}
	*c = v
	return nil
}

// codeError is the sentinel for one code; errors.Is(err, ErrNotFound) is
// true for any *Error with that code.
type codeError Code

func (e codeError) Error() string { return "boxfs: " + Code(e).String() }

// Sentinels, one per code, for errors.Is.
var (
	ErrInvalid        error = codeError(Invalid)
	ErrUnsupported    error = codeError(Unsupported)
	ErrNotFound       error = codeError(NotFound)
	ErrExists         error = codeError(Exists)
	ErrPermission     error = codeError(Permission)
	ErrGone           error = codeError(Gone)
	ErrTimeout        error = codeError(Timeout)
	ErrLiveness       error = codeError(Liveness)
	ErrAborted        error = codeError(Aborted)
	ErrRefused        error = codeError(Refused)
	ErrUnsafe         error = codeError(Unsafe)
	ErrTooLarge       error = codeError(TooLarge)
	ErrTransportLost  error = codeError(TransportLost)
	ErrOutcomeUnknown error = codeError(OutcomeUnknown)
	ErrAuth           error = codeError(Auth)
	ErrUnavailable    error = codeError(Unavailable)
	ErrUnknown        error = codeError(Unknown)
)

// Error is the one error type of boxfs. Op names the operation that failed
// ("docker.Exec", "hands.Rename"); Box is the box id or name; Path is the
// box-side path, where there is one; Err is the cause, which may be a
// syscall.Errno reported by the box.
type Error struct {
	Code Code
	Op   string
	Box  string
	Path string
	Err  error
}

// E builds an *Error. When err is itself an *Error, the new error inherits
// its code when code is 0, and fields equal to the inner error's are dropped
// from the inner one's text so nothing is said twice.
func E(code Code, op string, err error) *Error {
	if code == 0 {
		code = CodeOf(err)
		if code == 0 {
			code = Unknown
		}
	}
	return &Error{Code: code, Op: op, Err: err}
}

// Errorf builds an *Error whose cause is a formatted message.
func Errorf(code Code, op string, format string, args ...any) *Error {
	return &Error{Code: code, Op: op, Err: fmt.Errorf(format, args...)}
}

// Classify makes err an *Error of op on box: an err that already is one
// keeps its code, any other gets code(err), the provider's one function
// from its vendor's failures to codes.
func Classify(op, box string, err error, code func(error) Code) *Error {
	var pe *Error
	if errors.As(err, &pe) {
		return E(0, op, err).WithBox(box)
	}
	return (&Error{Code: code(err), Op: op, Err: err}).WithBox(box)
}

// WithBox sets the error's box and returns it.
func (e *Error) WithBox(box string) *Error { e.Box = box; return e }

// WithPath sets the error's path and returns it.
func (e *Error) WithPath(path string) *Error { e.Path = path; return e }

// Error renders "op box path: code: cause", leaving out what is empty and
// what the cause already says.
func (e *Error) Error() string {
	var b strings.Builder
	write := func(s string) {
		if s == "" {
			return
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s)
	}
	write(e.Op)
	var inner *Error
	errors.As(e.Err, &inner)
	if inner == nil || inner.Box != e.Box {
		write(e.Box)
	}
	if inner == nil || inner.Path != e.Path {
		write(quotePath(e.Path))
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if inner != nil && inner.Code == e.Code {
		b.WriteString(e.Err.Error())
		return b.String()
	}
	b.WriteString(e.Code.String())
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func quotePath(p string) string {
	if p == "" {
		return ""
	}
	for _, r := range p {
		if r < 0x20 || r == ' ' || r == '"' || r == 0x7f || r == 0xfffd {
			return fmt.Sprintf("%q", p)
		}
	}
	return p
}

// Unwrap returns the cause and the code's sentinel, so that errors.Is works
// both for the cause (syscall.ENOENT, context.Canceled) and for the code.
func (e *Error) Unwrap() []error {
	s := codeError(e.Code)
	if e.Err == nil {
		return []error{s}
	}
	return []error{e.Err, s}
}

// CodeOf returns the code of err: the Code of the outermost *Error in its
// chain, else a code derived from well-known causes (context errors, errnos,
// io.ErrUnexpectedEOF), else Unknown. CodeOf(nil) is 0.
func CodeOf(err error) Code {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var ce codeError
	if errors.As(err, &ce) {
		return Code(ce)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return Timeout
	case errors.Is(err, context.Canceled):
		return Aborted
	}
	if errno, ok := ErrnoOf(err); ok {
		return CodeOfErrno(errno)
	}
	return Unknown
}

// ErrnoOf returns the box-side errno carried in err's chain, if any.
func ErrnoOf(err error) (syscall.Errno, bool) {
	var errno syscall.Errno
	if errors.As(err, &errno) && errno != 0 {
		return errno, true
	}
	return 0, false
}

// CodeOfErrno classifies an errno. The errno itself stays the more exact
// answer; the code is what layers that do not speak errno decide by.
func CodeOfErrno(errno syscall.Errno) Code {
	switch errno {
	case syscall.ENOENT, syscall.ESRCH:
		return NotFound
	case syscall.EEXIST, syscall.ENOTEMPTY:
		return Exists
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return Permission
	case syscall.EINVAL, syscall.ENOTDIR, syscall.EISDIR, syscall.EXDEV,
		syscall.ENAMETOOLONG, syscall.ELOOP, syscall.EBADF:
		return Invalid
	case syscall.ENOTSUP, syscall.ENOSYS:
		return Unsupported
	case syscall.ETIMEDOUT:
		return Timeout
	case syscall.EINTR:
		return Aborted
	case syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG, syscall.E2BIG, syscall.EMFILE, syscall.ENFILE:
		return TooLarge
	case syscall.EAGAIN, syscall.EBUSY:
		return Unavailable
	case syscall.ENOTCONN, syscall.EPIPE, syscall.ECONNRESET:
		return TransportLost
	case syscall.ENODEV:
		return Gone
	}
	return Unknown
}

// IsCode reports whether err has the given code.
func IsCode(err error, code Code) bool { return err != nil && CodeOf(err) == code }
