package cache_test

import (
	"bytes"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/syncengine/cache"
)

// The host's close wins over what the box wrote to the file meanwhile
// (whole file at close), and the log says so when the cache had seen the
// box's change; a push over the box's own last version says nothing.
func TestPushOverBoxChangeIsLogged(t *testing.T) {
	_, _, r := fakeBox(t)
	var log bytes.Buffer
	var told []string
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", AttrTimeout: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&log, nil)), Overwrote: func(rel string) { told = append(told, rel) }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	boxWrite(t, r, "f", "box 1\n")
	edit := func(data string) {
		t.Helper()
		h, _, err := c.OpenFile(ctx, "f", syscall.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.WriteAt([]byte(data), 0); err != nil {
			t.Fatal(err)
		}
		if data == "host 2" {
			boxWrite(t, r, "f", "box 2, longer\n") // a command in the box, then the listing renewed
			c.Invalidate()
			if _, err := c.ReadDir(ctx, ""); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		h.Release(ctx)
	}
	edit("host 1")
	if strings.Contains(log.String(), "push replaces") || len(told) > 0 {
		t.Errorf("a push over the box's own version was logged (%q):\n%s", told, log.String())
	}
	edit("host 2")
	if got := boxRead(t, r, "f"); got != "host 2" {
		t.Errorf("the box has %q, want the host's close", got)
	}
	if !strings.Contains(log.String(), "push replaces a change the box made") || !strings.Contains(log.String(), "path=f") {
		t.Errorf("the replaced box change was not logged:\n%s", log.String())
	}
	if len(told) != 1 || told[0] != "f" {
		t.Errorf("Overwrote told %q, want [f]", told)
	}
}
