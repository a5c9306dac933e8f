package cache_test

import (
	"strings"
	"testing"
)

// A name the box gave another kind of file (a directory replaced by a file,
// a file by a link) is reported removed and added, not changed: the old
// node must go, not be shown with the new attributes.
func TestRefreshReportsAKindChangeAsRemovedAndAdded(t *testing.T) {
	_, _, r := fakeBox(t)
	c := open(t, r, t.TempDir())
	ctx := t.Context()
	if err := r.Mkdir(ctx, root+"/x", 0o755); err != nil {
		t.Fatal(err)
	}
	boxWrite(t, r, "x/y", "in")
	boxWrite(t, r, "f", "file")
	if _, err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(ctx, root+"/x/y"); err != nil {
		t.Fatal(err)
	}
	if err := r.Rmdir(ctx, root+"/x"); err != nil {
		t.Fatal(err)
	}
	boxWrite(t, r, "x", "now a file")
	if err := r.Remove(ctx, root+"/f"); err != nil {
		t.Fatal(err)
	}
	if err := r.Symlink(ctx, "x", root+"/f"); err != nil {
		t.Fatal(err)
	}
	ch, err := c.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ch.Removed, ","); got != "f,x,x/y" {
		t.Errorf("removed %q", got)
	}
	if got := strings.Join(ch.Added, ","); got != "f,x" {
		t.Errorf("added %q", got)
	}
	if len(ch.Changed) != 0 {
		t.Errorf("changed %q", ch.Changed)
	}
}
