package local

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/boxfs/boxfs/providers"
)

// TestReadDirMax: a directory within the cap is listed whole; past it the
// answer is TooLarge, and nothing of it is returned.
func TestReadDirMax(t *testing.T) {
	p := New(t.TempDir())
	box, err := p.Create(t.Context(), providers.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Destroy(t.Context()) })
	b := box.(*Box)
	if err := os.Mkdir(filepath.Join(b.Workspace(), "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 5000 { // past one batch of names
		if err := os.WriteFile(filepath.Join(b.Workspace(), "d", fmt.Sprintf("f%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.ReadDirMax(t.Context(), filepath.Join(b.Workspace(), "d"), 5000)
	if err != nil || len(got) != 5000 || got[0].Name != "f0000" || got[4999].Name != "f4999" {
		t.Fatalf("ReadDirMax at the directory's size: %d entries, %v", len(got), err)
	}
	got, err = b.ReadDirMax(t.Context(), filepath.Join(b.Workspace(), "d"), 4999)
	if providers.CodeOf(err) != providers.TooLarge || got != nil {
		t.Errorf("ReadDirMax under the directory's size: %d entries, %v; want none and too_large", len(got), err)
	}
}
