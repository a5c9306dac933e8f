package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/boxfs/boxfs/internal/boxsh"
	"github.com/boxfs/boxfs/providers"
)

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	return boxsh.IsTerminal(f.Fd())
}

// newLogger logs to w: human text on a terminal (format auto), logfmt text
// otherwise or with text, JSON with json.
func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	switch {
	case format == "json":
		return slog.New(slog.NewJSONHandler(w, opts))
	case format == "auto" && isTerminal(w):
		return slog.New(&humanHandler{w: w, level: level, mu: new(sync.Mutex)})
	default:
		return slog.New(slog.NewTextHandler(w, opts))
	}
}

// humanHandler writes one short line per record: "boxfs: warn: msg k=v".
type humanHandler struct {
	w      io.Writer
	level  slog.Level
	mu     *sync.Mutex
	attrs  []slog.Attr
	prefix string // group prefix of later attributes
}

func (h *humanHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *humanHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("boxfs: ")
	if r.Level != slog.LevelInfo {
		b.WriteString(strings.ToLower(r.Level.String()))
		b.WriteString(": ")
	}
	b.WriteString(r.Message)
	write := func(a slog.Attr, prefix string) {
		a.Value = a.Value.Resolve()
		if a.Equal(slog.Attr{}) {
			return
		}
		b.WriteByte(' ')
		b.WriteString(prefix + a.Key)
		b.WriteByte('=')
		v := a.Value.String()
		if a.Value.Kind() == slog.KindDuration {
			v = a.Value.Duration().Round(time.Millisecond).String()
		}
		if v == "" || strings.ContainsAny(v, " \t\n\"=") {
			v = strconv.Quote(v)
		}
		b.WriteString(v)
	}
	for _, a := range h.attrs {
		write(a, "")
	}
	r.Attrs(func(a slog.Attr) bool { write(a, h.prefix); return true })
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *humanHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append(append([]slog.Attr(nil), h.attrs...), prefixed(as, h.prefix)...)
	return &n
}

func (h *humanHandler) WithGroup(name string) slog.Handler {
	n := *h
	n.prefix = h.prefix + name + "."
	return &n
}

func prefixed(as []slog.Attr, prefix string) []slog.Attr {
	if prefix == "" {
		return as
	}
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = slog.Attr{Key: prefix + a.Key, Value: a.Value}
	}
	return out
}

// errorFormat is how reportError writes: "json" or text. It is set once
// the global flags are read.
var errorFormat = "text"

// reportError writes the error that ends a command: one line. With
// --log-format json it is a JSON log record carrying the error's box, op,
// path and code.
func reportError(w io.Writer, err error) {
	if errorFormat != "json" {
		fmt.Fprintf(w, "boxfs: %s\n", oneLine(err.Error()))
		return
	}
	rec := map[string]any{
		"time":  time.Now().Format(time.RFC3339Nano),
		"level": "ERROR",
		"msg":   oneLine(err.Error()),
	}
	var ue *usageError
	if errors.As(err, &ue) {
		rec["code"] = "usage"
	} else {
		rec["code"] = providers.CodeOf(err).String()
		var e *providers.Error
		if errors.As(err, &e) {
			for k, v := range map[string]string{"box": e.Box, "op": e.Op, "path": e.Path} {
				if v != "" {
					rec[k] = v
				}
			}
		}
	}
	b, _ := json.Marshal(rec)
	fmt.Fprintf(w, "%s\n", b)
}
