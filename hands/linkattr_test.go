package hands_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/providers"
)

// Hands sets a link's own times and owner where its path can (the local
// box's own files, the agent) and says Unsupported where it cannot (the
// scripts), changing nothing then.
func TestLinkAttrs(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		via  string
		opts hands.Options
		ok   bool
	}{
		{hands.ViaNativeFiles, hands.Options{}, true},
		{hands.ViaAgent, hands.Options{AgentBinary: boxfsbin.Path(t)}, true},
		{hands.ViaScript, hands.Options{}, false},
	} {
		t.Run("via="+tc.via, func(t *testing.T) {
			h, root := openOn(t, newLocalBox(t), tc.via, tc.opts)
			link := filepath.Join(root, "dangling")
			if err := h.Symlink(ctx, "missing", link); err != nil {
				t.Fatal(err)
			}
			before, err := h.Lstat(ctx, link)
			if err != nil {
				t.Fatal(err)
			}
			mt := time.Date(2002, 2, 2, 2, 2, 2, 123456789, time.UTC)
			terr := h.Lutimes(ctx, link, time.Time{}, mt)
			cerr := h.Lchown(ctx, link, -1, 4322)
			after, err := h.Lstat(ctx, link)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.ok {
				if !providers.IsCode(terr, providers.Unsupported) || !providers.IsCode(cerr, providers.Unsupported) {
					t.Fatalf("Lutimes: %v, Lchown: %v; want Unsupported", terr, cerr)
				}
				if !after.Mtime.Equal(before.Mtime) || after.GID != before.GID {
					t.Errorf("an Unsupported call changed the link: %+v, was %+v", after, before)
				}
				return
			}
			if terr != nil {
				t.Fatalf("Lutimes: %v", terr)
			}
			if !after.Mtime.Equal(mt) {
				t.Errorf("mtime %v, want %v", after.Mtime, mt)
			}
			if os.Geteuid() != 0 {
				return
			}
			if cerr != nil || after.GID != 4322 || after.UID != before.UID {
				t.Errorf("Lchown(-1, 4322): %v, now %d:%d", cerr, after.UID, after.GID)
			}
		})
	}
}
