package kubernetes

import (
	"context"
	"log/slog"
	"sync"

	"k8s.io/klog/v2"
)

var klogOnce sync.Once

// quietKlog sends client-go's own log lines (klog) to log at debug level,
// once per process. Left alone, klog writes to stderr at error level what
// is expected here: a stream copy that fails because boxfs closed the
// stream (an archive reader closed early, a command that ended before
// reading all its stdin).
func quietKlog(log *slog.Logger) {
	klogOnce.Do(func() { klog.SetSlogLogger(slog.New(debugHandler{log.Handler()})) })
}

// debugHandler passes every record on at debug level.
type debugHandler struct{ h slog.Handler }

func (d debugHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return d.h.Enabled(ctx, slog.LevelDebug)
}

// Handle drops what the logger would not log at debug level: logr passes
// errors on without asking Enabled.
func (d debugHandler) Handle(ctx context.Context, r slog.Record) error {
	if !d.h.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	r.Level = slog.LevelDebug
	return d.h.Handle(ctx, r)
}

func (d debugHandler) WithAttrs(as []slog.Attr) slog.Handler { return debugHandler{d.h.WithAttrs(as)} }
func (d debugHandler) WithGroup(name string) slog.Handler    { return debugHandler{d.h.WithGroup(name)} }
