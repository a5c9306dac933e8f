package cache_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// setattrStater answers chmod, chown and utimes with the attributes they
// left, as the agent does; with unsupported set it answers Unsupported,
// changing nothing, as an agent without the operation does.
type setattrStater struct {
	cache.Remote
	unsupported bool
	calls       atomic.Int32
}

func (s *setattrStater) stat(ctx context.Context, name string, op func() error) (providers.FileInfo, error) {
	s.calls.Add(1)
	if s.unsupported {
		return providers.FileInfo{}, providers.Errorf(providers.Unsupported, "test.SetattrStat", "not here")
	}
	if err := op(); err != nil {
		return providers.FileInfo{}, err
	}
	return s.Remote.Lstat(ctx, name)
}

func (s *setattrStater) ChmodStat(ctx context.Context, name string, mode providers.FileMode) (providers.FileInfo, error) {
	return s.stat(ctx, name, func() error { return s.Remote.Chmod(ctx, name, mode) })
}

func (s *setattrStater) ChownStat(ctx context.Context, name string, uid, gid int) (providers.FileInfo, error) {
	return s.stat(ctx, name, func() error { return s.Remote.Chown(ctx, name, uid, gid) })
}

func (s *setattrStater) UtimesStat(ctx context.Context, name string, atime, mtime time.Time) (providers.FileInfo, error) {
	return s.stat(ctx, name, func() error { return s.Remote.Utimes(ctx, name, atime, mtime) })
}

// A chmod, chown or utimes answered with what it left records the box's
// change time: the watch's report of each is its echo, dropped (F-echo),
// and a box change right after is taken. A remote that answers
// Unsupported gets the plain call, once asked, and its reports are taken.
func TestSetattrAnsweredWithAttributesEchoes(t *testing.T) {
	mtime := time.Date(2001, 1, 1, 0, 0, 0, 5, time.UTC)
	setattrs := []struct {
		name string
		set  func(c *cache.Cache, rel string) error
		left func(fi providers.FileInfo) bool // what the box shows after it
	}{
		{"chmod", func(c *cache.Cache, rel string) error { _, err := c.Chmod(t.Context(), rel, 0o755); return err },
			func(fi providers.FileInfo) bool { return fi.Mode.Perm() == 0o755 }},
		{"chown", func(c *cache.Cache, rel string) error { _, err := c.Chown(t.Context(), rel, 7, 8); return err },
			func(fi providers.FileInfo) bool { return fi.UID == 7 && fi.GID == 8 }},
		{"utimes", func(c *cache.Cache, rel string) error {
			_, err := c.Utimes(t.Context(), rel, time.Time{}, mtime)
			return err
		},
			func(fi providers.FileInfo) bool { return fi.Mtime.Equal(mtime) }},
	}
	for _, unsupported := range []bool{false, true} {
		_, _, inner := fakeBox(t)
		s := &setattrStater{Remote: inner, unsupported: unsupported}
		c, _ := watchedCache(t, s)
		ctx := t.Context()
		for _, sa := range setattrs {
			name := sa.name
			write(t, c, name, "data of "+name).Release(ctx)
			_, err := c.Getattr(ctx, name)
			require.NoError(t, err)
			before := c.Reports()
			require.NoError(t, sa.set(c, name))
			ch := boxChange(t, inner, name)
			assert.True(t, sa.left(*ch.Info), "the %s reached the box: %+v", name, *ch.Info)
			c.Reported([]providers.Change{ch}, false)
			got := c.Reports()
			if unsupported {
				assert.Equal(t, before.Taken+1, got.Taken, "%s without attributes: its report is taken", name)
				continue
			}
			assert.Equal(t, before.Echoes+1, got.Echoes, "the %s's echo", name)
			assert.Equal(t, before.Taken, got.Taken, "reports of the %s taken", name)

			boxWrite(t, inner, name, "the box's, later")
			assert.Equal(t, []string{name}, c.Reported([]providers.Change{boxChange(t, inner, name)}, false), "a box change after the %s", name)
		}
		if unsupported {
			assert.Equal(t, int32(1), s.calls.Load(), "asked again after Unsupported")
		}
	}
}
