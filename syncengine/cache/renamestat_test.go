package cache_test

import (
	"context"
	"path"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// renameStater answers renames with the attributes they left, as the
// agent does, and counts the stats asked of it apart.
type renameStater struct {
	cache.Remote
	stats atomic.Int32
}

func (r *renameStater) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	r.stats.Add(1)
	return r.Remote.Lstat(ctx, name)
}

func (r *renameStater) RenameStat(ctx context.Context, oldname, newname string) (providers.FileInfo, []providers.FileInfo, error) {
	if err := r.Remote.Rename(ctx, oldname, newname); err != nil {
		return providers.FileInfo{}, nil, err
	}
	fi, err := r.Remote.Lstat(ctx, newname)
	if err != nil {
		return fi, nil, err
	}
	var dirs []providers.FileInfo
	for _, d := range []string{path.Dir(newname), path.Dir(oldname)} {
		if len(dirs) == 1 && d == path.Dir(newname) {
			break
		}
		di, err := r.Remote.Lstat(ctx, d)
		if err != nil {
			break
		}
		dirs = append(dirs, di)
	}
	return fi, dirs, nil
}

// An editor's save (a temporary file renamed over the original) and a
// move between directories leave the new name's change time and both
// directories' times known as the box has them: a stat of any of them
// after the rename asks the box nothing.
func TestRenameAnsweredWithAttributes(t *testing.T) {
	_, _, inner := fakeBox(t)
	r := &renameStater{Remote: inner}
	c := open(t, r, t.TempDir())
	ctx := t.Context()
	for _, d := range []string{"a", "b"} {
		_, err := c.Mkdir(ctx, d, 0o755)
		require.NoError(t, err)
	}
	for _, f := range []string{"a/f", "a/.f.tmp", "a/g"} {
		write(t, c, f, "content of "+f).Release(ctx)
	}

	for _, mv := range [][2]string{{"a/.f.tmp", "a/f"}, {"a/g", "b/g"}} {
		require.NoError(t, c.Rename(ctx, mv[0], mv[1]))
		before := r.stats.Load()
		for _, p := range []string{mv[1], "a", "b"} {
			fi, err := c.Getattr(ctx, p)
			require.NoError(t, err)
			want, err := inner.Lstat(ctx, root+"/"+p)
			require.NoError(t, err)
			// A file keeps the modification time the host gave it (Cache.shown).
			same := fi.Ctime.Equal(want.Ctime) && fi.Size == want.Size && fi.Ino == want.Ino &&
				(!fi.IsDir() || fi.Mtime.Equal(want.Mtime))
			assert.True(t, same, "after mv %s %s: %s is %+v, the box has %+v", mv[0], mv[1], p, fi, want)
		}
		assert.Equal(t, before, r.stats.Load(), "stats asked of the box after mv %s %s", mv[0], mv[1])
	}
	assert.Equal(t, "content of a/.f.tmp", readWhole(t, c, "a/f"))
}

// A rename over a file whose answer carries what it left: the watch's
// reports of the new name (its change time moved) and of the old one
// (gone) are the rename's echoes, dropped; the directories' are taken.
// A box change to the new name right after is taken (F-echo, F-watch).
func TestRenameOverFileEchoes(t *testing.T) {
	_, _, inner := fakeBox(t)
	c, _ := watchedCache(t, &renameStater{Remote: inner})
	ctx := t.Context()
	_, err := c.Mkdir(ctx, "dir", 0o755)
	require.NoError(t, err)
	write(t, c, "file", "moved").Release(ctx)
	write(t, c, "dir/renamed", "replaced").Release(ctx)
	for _, p := range []string{"file", "dir/renamed"} {
		_, err := c.Getattr(ctx, p)
		require.NoError(t, err)
	}
	before := c.Reports()

	require.NoError(t, c.Rename(ctx, "file", "dir/renamed"))
	c.Reported([]providers.Change{boxChange(t, inner, "file"), boxChange(t, inner, "dir/renamed")}, false)
	assert.Equal(t, before.Echoes+2, c.Reports().Echoes, "the rename's echoes")
	assert.Equal(t, before.Taken, c.Reports().Taken, "reports of the rename taken")

	boxWrite(t, inner, "dir/renamed", "the box's, later")
	assert.Equal(t, []string{"dir/renamed"}, c.Reported([]providers.Change{boxChange(t, inner, "dir/renamed")}, false))
	fi, err := c.Getattr(ctx, "dir/renamed")
	require.NoError(t, err)
	assert.Equal(t, int64(len("the box's, later")), fi.Size)
}
