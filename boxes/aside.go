package boxes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// SetAside moves the host's copy of rel (relative to the workspace), a file
// whose writes the box has not taken, to STATE/aside/PROVIDER-ID/ (0700),
// under the time and rel with "/" as "%2F", and drops those writes: rel is
// the box's again (gone, if the box never had it), and flush, sync,
// release and the commands' barrier pass over it. It returns where
// the copy went. Nothing is asked of the box.
func (b *Box) SetAside(ctx context.Context, rel string) (string, error) {
	const op = "boxes.SetAside"
	b.mu.Lock()
	c, rec := b.cache, b.rec
	b.mu.Unlock()
	if c == nil {
		return "", providers.Errorf(providers.NotFound, op, "no writes of it are held on the host").WithPath(rel)
	}
	pushErr := c.PushError(rel)
	dir := filepath.Join(b.m.opts.StateDir, "aside", safeKey(rec.Provider+"-"+rec.ID))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", providers.E(providers.Unknown, op, err)
	}
	dst := filepath.Join(dir, time.Now().UTC().Format("20060102T150405.000000000Z")+"-"+strings.ReplaceAll(rel, "/", "%2F"))
	if err := c.SetAside(rel, dst); err != nil {
		return "", providers.E(0, op, err)
	}
	b.m.log.Warn("set aside the host's copy of a file the box did not take", "box", b.name, "path", rel, "copy", dst, "push_err", pushErr)
	if v := b.m.viewer(); v != nil {
		v.PathsChanged(b, []string{rel})
	}
	return dst, nil
}
