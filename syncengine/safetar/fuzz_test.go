package safetar_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/boxfs/boxfs/syncengine/safetar"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/fuzz/FuzzExtract from the hostile archives")

const corpusDir = "testdata/fuzz/FuzzExtract"

func corpusFile(b []byte) []byte {
	return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b)
}

// TestSeedCorpus keeps the fuzz seed corpus equal to the hostile archives
// the table tests use, so that plain `go test` (and CI) runs every one of
// them through FuzzExtract's invariants.
func TestSeedCorpus(t *testing.T) {
	h := hostile()
	names := make([]string, 0, len(h))
	for name, b := range h {
		names = append(names, name)
		path := filepath.Join(corpusDir, name)
		if *updateCorpus {
			if err := os.MkdirAll(corpusDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, corpusFile(b), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, corpusFile(b)) {
			t.Errorf("seed corpus file %s is missing or stale (%v); run go test -run TestSeedCorpus -update-corpus", path, err)
		}
	}
	ents, err := os.ReadDir(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !slices.Contains(names, e.Name()) && !*updateCorpus {
			t.Logf("corpus file %s is not a named hostile archive (kept: found by fuzzing?)", e.Name())
		}
	}
}

// FuzzExtract feeds arbitrary bytes to Extract, with a link to a sentinel
// directory already in the destination. Whatever the input: no panic,
// nothing created or changed outside dst, no symlink made inside it, no
// temporary file left, every file the receipt lists present as listed, and
// an error exactly when the receipt says it stopped.
func FuzzExtract(f *testing.F) {
	f.Add(newArc().dir("d/", 0o755).file("d/f", 0o644, "hello").end())
	f.Add(newArc().symlink("link/x", "/").file("abs/y", 0o755, "x").end())
	f.Fuzz(func(t *testing.T, data []byte) {
		p := newPlace(t)
		p.link(t, "link", "../sentinel")
		p.link(t, "link2", "../sentinel")
		p.link(t, "abs", p.sentinel)
		rc, err := safetar.Extract(context.Background(), bytes.NewReader(data), p.dst,
			safetar.Options{MaxBytes: 1 << 20, MaxEntries: 1000})
		if (err != nil) != (rc.Stopped != "") {
			t.Fatalf("err %v with stopped %q", err, rc.Stopped)
		}
		// A link the setup made may have been replaced by a file (rename
		// replaces the link itself); it must never have been written through.
		for rel := range p.links {
			if fi, err := os.Lstat(filepath.Join(p.dst, rel)); err == nil && fi.Mode().IsRegular() {
				delete(p.links, rel)
			}
		}
		p.check(t, rc)
		if rc.Files+rc.Dirs != len(rc.Written) {
			t.Fatalf("files %d + dirs %d != %d written", rc.Files, rc.Dirs, len(rc.Written))
		}
	})
}
