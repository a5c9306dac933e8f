package providers_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/boxfs/boxfs/providers"
)

func TestCodeNamesRoundTrip(t *testing.T) {
	want := []string{"invalid", "unsupported", "not_found", "exists", "permission", "gone",
		"timeout", "liveness", "aborted", "refused", "unsafe", "too_large", "transport_lost",
		"outcome_unknown", "auth", "unavailable", "unknown"}
	codes := providers.Codes()
	if len(codes) != len(want) {
		t.Fatalf("Codes() has %d codes, DESIGN.md lists %d", len(codes), len(want))
	}
	for i, c := range codes {
		if c.String() != want[i] {
			t.Errorf("code %d is %q, want %q", int(c), c, want[i])
		}
		got, ok := providers.ParseCode(want[i])
		if !ok || got != c {
			t.Errorf("ParseCode(%q) = %v, %v", want[i], got, ok)
		}
		text, _ := c.MarshalText()
		var back providers.Code
		if err := back.UnmarshalText(text); err != nil || back != c {
			t.Errorf("text round trip of %v: %v, %v", c, back, err)
		}
	}
	if _, ok := providers.ParseCode("nope"); ok {
		t.Error("ParseCode accepted an unknown name")
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want providers.Code
	}{
		{"nil", nil, 0},
		{"typed", providers.Errorf(providers.Gone, "op", "x"), providers.Gone},
		{"wrapped typed", fmt.Errorf("ctx: %w", providers.E(providers.Auth, "op", nil)), providers.Auth},
		{"outer wins", providers.E(providers.Timeout, "outer", providers.E(providers.NotFound, "inner", nil)), providers.Timeout},
		{"inherit", providers.E(0, "outer", providers.E(providers.NotFound, "inner", nil)), providers.NotFound},
		{"deadline", context.DeadlineExceeded, providers.Timeout},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), providers.Aborted},
		{"errno", syscall.ENOENT, providers.NotFound},
		{"errno eexist", syscall.EEXIST, providers.Exists},
		{"errno eacces", syscall.EACCES, providers.Permission},
		{"errno enospc", syscall.ENOSPC, providers.TooLarge},
		{"plain", io.ErrUnexpectedEOF, providers.Unknown},
		{"sentinel", providers.ErrUnsafe, providers.Unsafe},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := providers.CodeOf(tt.err); got != tt.want {
				t.Errorf("CodeOf(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestErrorIsAndErrno(t *testing.T) {
	err := fmt.Errorf("layer: %w", providers.PathError("hands.Rmdir", "box-1", "/w/d", syscall.ENOTEMPTY))
	if !errors.Is(err, syscall.ENOTEMPTY) {
		t.Error("errors.Is(err, ENOTEMPTY) is false")
	}
	if !errors.Is(err, providers.ErrExists) {
		t.Error("errors.Is(err, ErrExists) is false")
	}
	if errors.Is(err, providers.ErrNotFound) {
		t.Error("errors.Is(err, ErrNotFound) is true")
	}
	errno, ok := providers.ErrnoOf(err)
	if !ok || errno != syscall.ENOTEMPTY {
		t.Errorf("ErrnoOf = %v, %v", errno, ok)
	}
	if _, ok := providers.ErrnoOf(providers.Errorf(providers.Gone, "op", "x")); ok {
		t.Error("ErrnoOf found an errno where there is none")
	}
	var e *providers.Error
	if !errors.As(err, &e) || e.Op != "hands.Rmdir" || e.Box != "box-1" || e.Path != "/w/d" {
		t.Errorf("errors.As gave %+v", e)
	}
	if !errors.Is(providers.E(providers.Aborted, "op", context.Canceled), context.Canceled) {
		t.Error("the cause is not reachable through errors.Is")
	}
}

func TestErrorText(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{providers.PathError("hands.Stat", "b1", "/w/a b", syscall.ENOENT), `hands.Stat b1 "/w/a b": not_found: no such file or directory`},
		{providers.Errorf(providers.Invalid, "ctl", "bad verb %q", "frob"), `ctl: invalid: bad verb "frob"`},
		{providers.E(providers.NotFound, "fs.Lookup", providers.PathError("hands.Stat", "b1", "/w/x", syscall.ENOENT)).WithBox("b1").WithPath("/w/x"),
			`fs.Lookup: hands.Stat b1 /w/x: not_found: no such file or directory`},
		{providers.E(providers.Timeout, "fs.Read", providers.Errorf(providers.Liveness, "hands", "no answer")),
			`fs.Read: timeout: hands: liveness: no answer`},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got  %s\nwant %s", got, tt.want)
		}
	}
}

func TestClassify(t *testing.T) {
	code := func(error) providers.Code { return providers.Unavailable }
	e := providers.Classify("p.Op", "b1", errors.New("vendor says no"), code)
	assert.Equal(t, providers.Unavailable, e.Code)
	assert.Equal(t, "b1", e.Box)
	inner := providers.Errorf(providers.NotFound, "p.inner", "missing")
	e = providers.Classify("p.Op", "b1", inner, code)
	assert.Equal(t, providers.NotFound, e.Code, "an *Error keeps its code")
	assert.ErrorIs(t, e, inner)
}
