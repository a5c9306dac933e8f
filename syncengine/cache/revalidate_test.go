package cache_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// walkRemote walks the fake's tree with a cap, as the agent does, and
// counts the listings the cache asks for.
type walkRemote struct {
	cache.Remote
	mu       sync.Mutex
	walks    int
	readdirs int
}

func (r *walkRemote) WalkMax(ctx context.Context, root string, max int) ([]providers.FileInfo, error) {
	r.mu.Lock()
	r.walks++
	r.mu.Unlock()
	list, err := r.Remote.Walk(ctx, root)
	if err == nil && len(list) > max {
		return nil, providers.Errorf(providers.TooLarge, "walk", "more than %d entries", max)
	}
	return list, err
}

func (r *walkRemote) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	r.mu.Lock()
	r.readdirs++
	r.mu.Unlock()
	return r.Remote.ReadDir(ctx, name)
}

// walkCache opens a cache over a fake box whose walk has a cap, on a clock
// the test moves with *now.
func walkCache(t *testing.T, walkMax int) (*cache.Cache, *walkRemote, cache.Remote, *time.Time) {
	t.Helper()
	_, _, inner := fakeBox(t)
	r := &walkRemote{Remote: inner}
	now := new(time.Time)
	*now = time.Unix(1000, 0)
	c, err := cache.Open(r, cache.Options{Dir: t.TempDir(), Root: root, Box: "test", WalkMax: walkMax,
		Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, r, inner, now
}

func (r *walkRemote) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, d := r.walks, r.readdirs
	r.walks, r.readdirs = 0, 0
	return w, d
}

// Once the attribute timeout passed, the first stale listing renews them
// all with one walk, and the others are answered from it; a box change is
// seen; a tree larger than WalkMax is listed directory by directory.
func TestStaleListingsRenewedByOneWalk(t *testing.T) {
	for _, tc := range []struct {
		name    string
		walkMax int
	}{{"small tree", 0}, {"tree over the cap", 15}} {
		t.Run(tc.name, func(t *testing.T) {
			c, r, inner, now := walkCache(t, tc.walkMax)
			ctx := t.Context()
			const ndirs = 10
			for i := range ndirs {
				if err := inner.Mkdir(ctx, fmt.Sprintf("%s/d%d", root, i), 0o755); err != nil {
					t.Fatal(err)
				}
				boxWrite(t, inner, fmt.Sprintf("d%d/f", i), "x")
			}
			listAll := func() {
				t.Helper()
				for i := range ndirs {
					if _, err := c.ReadDir(ctx, fmt.Sprintf("d%d", i)); err != nil {
						t.Fatal(err)
					}
				}
			}
			listAll() // cold: one listing per directory (too few known for a walk)
			r.counts()
			*now = now.Add(2 * time.Second) // every listing is stale
			boxWrite(t, inner, "d7/new", "made in the box")
			listAll()
			walks, readdirs := r.counts()
			if tc.walkMax == 0 {
				if walks != 1 || readdirs != 0 {
					t.Errorf("renewing %d stale listings took %d walks and %d listings, want 1 walk", ndirs, walks, readdirs)
				}
			} else if readdirs != ndirs || walks != 0 {
				// The walk was tried once, during the cold listings, and refused.
				t.Errorf("over the cap: %d walks and %d listings, want no walk within a minute of the refused one and %d listings", walks, readdirs, ndirs)
			}
			if _, err := c.Lookup(ctx, "d7/new"); err != nil {
				t.Errorf("a file the box made is not seen after renewal: %v", err)
			}
			// Within the timeout nothing is asked again; after it, over the cap,
			// no walk is tried again for a while.
			listAll()
			if w, d := r.counts(); w+d != 0 {
				t.Errorf("fresh listings asked the box again: %d walks, %d listings", w, d)
			}
			*now = now.Add(2 * time.Second)
			listAll()
			if w, _ := r.counts(); tc.walkMax != 0 && w != 0 {
				t.Errorf("a walk was tried again %d times within a minute of a too-large tree", w)
			}
		})
	}
}

// While a healthy watch vouches for the listings, a directory a report
// made stale is listed again alone: no walk of the whole tree per report,
// however many directories the cache knows; the box's change is seen.
func TestReportedListingAskedAlone(t *testing.T) {
	c, r, inner, now := walkCache(t, 0)
	c.Trust(true)
	ctx := t.Context()
	const ndirs = 10
	for i := range ndirs {
		if err := inner.Mkdir(ctx, fmt.Sprintf("%s/d%d", root, i), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range ndirs {
		if _, err := c.ReadDir(ctx, fmt.Sprintf("d%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	r.counts()
	*now = now.Add(time.Hour) // trusted listings do not expire
	for round := range 3 {
		boxWrite(t, inner, fmt.Sprintf("d3/new%d", round), "made in the box")
		c.BoxChanged([]string{fmt.Sprintf("d3/new%d", round)}, false)
		list, err := c.ReadDir(ctx, "d3")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != round+1 {
			t.Errorf("round %d: d3 lists %d names, want %d", round, len(list), round+1)
		}
		for i := range ndirs {
			if _, err := c.ReadDir(ctx, fmt.Sprintf("d%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if w, d := r.counts(); w != 0 || d != 1 {
			t.Errorf("round %d: a report of one directory cost %d walks and %d listings, want 0 and 1", round, w, d)
		}
		*now = now.Add(2 * time.Second)
	}
}

// What a fetch between two refreshes learned of the box's changes (the
// walk that renews stale listings, a listing asked again, a stat) is
// reported by the next Refresh, although the cache knows it by then: the
// refresh after a command tells the filesystem everything the command
// changed, whatever was fetched while it ran.
func TestRefreshReportsWhatFetchesLearned(t *testing.T) {
	for _, tc := range []struct {
		name    string
		walkMax int
		fetch   func(ctx context.Context, c *cache.Cache) error
	}{
		{"renewing walk", 0, func(ctx context.Context, c *cache.Cache) error { _, err := c.ReadDir(ctx, "d0"); return err }},
		{"listings", -1, func(ctx context.Context, c *cache.Cache) error {
			for _, d := range []string{"d3", "d4", "d5"} {
				if _, err := c.ReadDir(ctx, d); err != nil {
					return err
				}
			}
			return nil
		}},
		{"stats", -1, func(ctx context.Context, c *cache.Cache) error {
			if _, err := c.Getattr(ctx, "d3/f"); !providers.IsCode(err, providers.NotFound) {
				return fmt.Errorf("stat of a removed file: %v", err)
			}
			_, err := c.Getattr(ctx, "d5/f")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, inner, now := walkCache(t, tc.walkMax)
			ctx := t.Context()
			for i := range 10 {
				if err := inner.Mkdir(ctx, fmt.Sprintf("%s/d%d", root, i), 0o755); err != nil {
					t.Fatal(err)
				}
				boxWrite(t, inner, fmt.Sprintf("d%d/f", i), "x")
			}
			if _, err := c.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			// The command: one file removed, one made, one rewritten.
			if err := inner.Remove(ctx, root+"/d3/f"); err != nil {
				t.Fatal(err)
			}
			boxWrite(t, inner, "d4/new", "n")
			boxWrite(t, inner, "d5/f", "longer")
			*now = now.Add(2 * time.Second)
			if err := tc.fetch(ctx, c); err != nil {
				t.Fatal(err)
			}
			ch, err := c.Refresh(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The directories' times changed too.
			want := cache.Changes{Removed: []string{"d3/f"}, Changed: []string{"d3", "d4", "d5", "d5/f"}, Added: []string{"d4/new"}}
			if fmt.Sprint(ch) != fmt.Sprint(want) {
				t.Errorf("refresh after the fetch reports %+v, want %+v", ch, want)
			}
			if ch, _ := c.Refresh(ctx); !ch.Empty() {
				t.Errorf("a second refresh reports %+v, want nothing", ch)
			}
		})
	}
}
