package daytona

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseMode(t *testing.T) {
	for _, c := range []struct {
		in   string
		want fs.FileMode
		bad  bool
	}{
		{"-rw-r--r--", 0o644, false},
		{"drwxr-xr-x", fs.ModeDir | 0o755, false},
		{"urwxr-xr-x", fs.ModeSetuid | 0o755, false},
		{"dtrwxrwxrwx", fs.ModeDir | fs.ModeSticky | 0o777, false},
		{"Lrwxrwxrwx", fs.ModeSymlink | 0o777, false},
		{"Dcrw-rw-rw-", fs.ModeDevice | fs.ModeCharDevice | 0o666, false},
		{"prw-------", fs.ModeNamedPipe | 0o600, false},
		{"ugrwxr-sr-x", 0, true}, // 'g' is set, but an s is no permission character
		{"rw-r--r--", 0, true},
		{"Zrw-r--r--", 0, true},
	} {
		got, err := parseMode(c.in)
		if c.bad != (err != nil) || !c.bad && got != c.want {
			t.Errorf("parseMode(%q) = %v, %v; want %v (error: %v)", c.in, got, err, c.want, c.bad)
		}
		if !c.bad && got.String() != c.in {
			t.Errorf("parseMode(%q) renders back as %q", c.in, got.String())
		}
	}
}

func TestParseModTime(t *testing.T) {
	want := time.Date(2026, 12, 2, 13, 4, 5, 123456789, time.UTC)
	for _, c := range []struct{ modifiedAt, modTime string }{
		{want.Format(time.RFC3339Nano), ""},
		{"", want.Format(time.RFC3339Nano)},
		{"", want.String()}, // older daemons: Go's Time.String
		{"not a time", want.In(time.FixedZone("CET", 3600)).String()},
	} {
		if got := parseModTime(c.modifiedAt, c.modTime); !got.Equal(want) {
			t.Errorf("parseModTime(%q, %q) = %v, want %v", c.modifiedAt, c.modTime, got, want)
		}
	}
	if got := parseModTime("", ""); !got.IsZero() {
		t.Errorf("no time: %v", got)
	}
}

func TestParseFindTime(t *testing.T) {
	for in, want := range map[string]time.Time{
		"1700000000.0000000050": time.Unix(1700000000, 5),
		"-2.5000000000":         time.Unix(-2, 500000000), // find floors the seconds
		"12":                    time.Unix(12, 0),
	} {
		if got, err := parseFindTime(in); err != nil || !got.Equal(want) {
			t.Errorf("parseFindTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func TestParseListing(t *testing.T) {
	rec := "4755\x00f\x003\x001.5\x002.25\x003.0\x0042\x001\x000\x000\x0066\x00\x00a b\xff\x00" +
		"777\x00l\x001\x000\x000\x000\x0043\x001\x001000\x001000\x0066\x00t\x00lnk\x00"
	fis, err := parseListing([]byte(rec))
	if err != nil || len(fis) != 2 {
		t.Fatalf("parseListing = %v, %v", fis, err)
	}
	f, l := fis[0], fis[1]
	if f.Name != "a b\xff" || f.Mode != fs.ModeSetuid|0o755 || f.Size != 3 || f.Ino != 42 || !f.Mtime.Equal(time.Unix(2, 250000000)) {
		t.Errorf("file: %+v", f)
	}
	if !l.IsSymlink() || l.Target != "t" || l.UID != 1000 {
		t.Errorf("link: %+v", l)
	}
	if _, err := parseListing([]byte("1\x00f\x00")); err == nil {
		t.Error("a short record parsed")
	}
}

func TestRetryAfterHeader(t *testing.T) {
	for in, want := range map[string]time.Duration{"0": 0, "2": 2 * time.Second, "3600": retryAfterMax} {
		if got, ok := retryAfter(in); !ok || got != want {
			t.Errorf("retryAfter(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	if got, ok := retryAfter(time.Now().Add(5 * time.Second).UTC().Format(http.TimeFormat)); !ok || got < 3*time.Second || got > 6*time.Second {
		t.Errorf("retryAfter(date in 5s) = %v, %v", got, ok)
	}
	for _, in := range []string{"", "-1", "soon"} {
		if _, ok := retryAfter(in); ok {
			t.Errorf("retryAfter(%q) was taken", in)
		}
	}
}

func TestErrorCode(t *testing.T) {
	for _, c := range []struct {
		status int
		err    error
		want   providers.Code
	}{
		{0, context.Canceled, providers.Aborted},
		{0, context.DeadlineExceeded, providers.Timeout},
		{0, syscall.ECONNREFUSED, providers.Unavailable},
		{0, syscall.ECONNRESET, providers.TransportLost},
		{400, nil, providers.Invalid},
		{401, nil, providers.Auth},
		{403, nil, providers.Permission},
		{404, nil, providers.NotFound},
		{408, nil, providers.Timeout},
		{409, nil, providers.Exists},
		{410, nil, providers.Gone},
		{413, nil, providers.TooLarge},
		{422, nil, providers.Invalid},
		{429, nil, providers.Unavailable},
		{500, nil, providers.Unavailable},
		{501, nil, providers.Unsupported},
		{502, nil, providers.Unavailable},
		{418, nil, providers.Unknown},
	} {
		if got := errorCode(c.status, c.err); got != c.want {
			t.Errorf("errorCode(%d, %v) = %v, want %v", c.status, c.err, got, c.want)
		}
	}
	e := wrap("op", "box", &apiError{Method: "GET", Path: "/x", Status: 404, Message: "gone"})
	if e.Code != providers.NotFound || !errors.Is(e, providers.ErrNotFound) {
		t.Errorf("wrap(404) = %v", e)
	}
}

func TestCommandLineDecodes(t *testing.T) {
	for _, a := range []string{"", "'", `"`, `\`, "\n", "\xff", "plain"} {
		esc := shell.Escape(a)
		for i := 0; i < len(esc); i++ {
			if c := esc[i]; c < 0x20 || c >= 0x7f || c == '\'' || c == '"' {
				t.Errorf("shell.Escape(%q) = %q holds %q", a, esc, c)
			}
		}
	}
}

// TestParseListPage: the current shape pages by cursor; the older shapes
// are taken when they hold the whole listing, and a page of the older
// page shape with more after it says so.
func TestParseListPage(t *testing.T) {
	for _, c := range []struct {
		in         string
		ids        []string
		next       string
		more, fail bool
	}{
		{in: `{"items":[{"id":"a"},{"id":"b"}],"nextCursor":"c2"}`, ids: []string{"a", "b"}, next: "c2"},
		{in: `{"items":[{"id":"a"}],"nextCursor":null}`, ids: []string{"a"}},
		{in: `[{"id":"a"},{"id":"b"}]`, ids: []string{"a", "b"}},
		{in: `{"items":[{"id":"a"}],"total":1,"page":1,"totalPages":1}`, ids: []string{"a"}},
		{in: `{"items":[{"id":"a"}],"total":3,"page":1,"totalPages":3}`, ids: []string{"a"}, more: true},
		{in: `"not a listing"`, fail: true},
	} {
		pg, err := parseListPage([]byte(c.in))
		if c.fail {
			assert.Error(t, err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		var ids []string
		for _, it := range pg.items {
			ids = append(ids, it.ID)
		}
		assert.Equal(t, c.ids, ids, c.in)
		assert.Equal(t, c.next, pg.nextCursor, c.in)
		assert.Equal(t, c.more, pg.morePages, c.in)
	}
}

// TestDeletedAndSettled: desiredState destroyed is deleted whatever the
// state says; a state that is not where it is meant to be is changing.
func TestDeletedAndSettled(t *testing.T) {
	for _, c := range []struct {
		state, desired   string
		deleted, settled bool
	}{
		{"started", "started", false, true},
		{"started", "destroyed", true, false},
		{"destroying", "destroyed", true, false},
		{"destroyed", "destroyed", true, true},
		{"stopping", "stopped", false, false},
		{"creating", "started", false, false},
		{"error", "started", false, true},
		{"paused", "paused", false, true},
	} {
		d := sandboxDTO{State: c.state, DesiredState: c.desired}
		assert.Equal(t, c.deleted, d.deleted(), "%s/%s deleted", c.state, c.desired)
		assert.Equal(t, c.settled, d.settled(), "%s/%s settled", c.state, c.desired)
	}
	assert.Equal(t, providers.StateEnded, boxState(sandboxDTO{State: "started", DesiredState: "destroyed"}).State)
}
