package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// treeDirs are the directories of GOROOT/src the tree is taken from, in
// sorted order; the tree is their first N regular files by path (3,000
// files and 35.6 MB of Go source and test data with go1.26).
var treeDirs = []string{"crypto", "encoding", "net", "os", "runtime"}

// symbol is what the agent loop greps for.
const symbol = "ReadFull"

// tarTime is every tar member's modification time, so the tree, and a git
// commit of it with fixed dates, is the same in every run.
var tarTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// dataset is what the workloads write and what the checks expect.
type dataset struct {
	tarPath   string   // the tree as a tar, members under tree/
	files     []string // tree files, relative to tree/, sorted
	sizes     map[string]int64
	sums      map[string]string // sha256 hex of each file
	bytes     int64
	manifest  string   // manifestHash of tree/ (see manifestScript)
	grepHits  []string // files containing symbol, relative to tree/, sorted
	readSet   []string // the files the agent loop reads, relative to tree/
	turnSet   []string // the Go files W10's turns edit, none in readSet
	small     [][]byte // the small files' contents
	smallMF   string   // manifestHash of a directory of the small files
	big       []byte
	bigSum    string
	goVersion string // of the GOROOT the tree came from
}

// manifestScript prints the manifest hash of the directory $1: sha256 of
// `sha256sum` lines of every regular file, sorted by path (C locale).
const manifestScript = `cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum | sha256sum | cut -c1-64`

// manifestHash computes manifestScript's answer for files (names relative
// to the directory) with the given sha256 sums.
func manifestHash(names []string, sums map[string]string) string {
	lines := make([]string, 0, len(names))
	for _, n := range names {
		lines = append(lines, sums[n]+"  ./"+n+"\n")
	}
	slices.SortFunc(lines, func(a, b string) int { return strings.Compare(lineName(a), lineName(b)) })
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func lineName(l string) string { return l[66:] }

func smallName(i int) string { return fmt.Sprintf("f%04d", i) }

// makeDataset builds the tree tar (in dir) and the in-memory contents.
func makeDataset(dir, goroot string, sz sizes) (*dataset, error) {
	d := &dataset{sizes: map[string]int64{}, sums: map[string]string{}}
	if v, err := os.ReadFile(filepath.Join(goroot, "VERSION")); err == nil {
		d.goVersion, _, _ = strings.Cut(string(v), "\n")
	}
	src := filepath.Join(goroot, "src")
	var all []string
	tops := treeDirs
	if sz.allSrc {
		tops = []string{"."}
	}
	for _, top := range tops {
		err := filepath.WalkDir(filepath.Join(src, top), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.Type().IsRegular() {
				rel, _ := filepath.Rel(src, p)
				all = append(all, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("dataset: %v (the tree is taken from GOROOT/src)", err)
		}
	}
	slices.Sort(all)
	if sz.allSrc {
		sz.treeFiles = len(all)
	}
	if len(all) < sz.treeFiles {
		return nil, fmt.Errorf("dataset: GOROOT/src has %d files under %v, want %d", len(all), treeDirs, sz.treeFiles)
	}
	d.files = all[:sz.treeFiles]

	d.tarPath = filepath.Join(dir, fmt.Sprintf("tree-%s-%d.tar", sz.name, sz.treeFiles))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	var text []string
	addDir := func(p string) error {
		var chain []string
		for q := p; q != "." && !dirs[q]; q = path.Dir(q) {
			chain = append(chain, q)
		}
		for i := len(chain) - 1; i >= 0; i-- {
			dirs[chain[i]] = true
			hdr := &tar.Header{Typeflag: tar.TypeDir, Name: "tree/" + chain[i] + "/", Mode: 0o755, ModTime: tarTime, Format: tar.FormatPAX}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		}
		return nil
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tree/", Mode: 0o755, ModTime: tarTime, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	for _, f := range d.files {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return nil, err
		}
		if err := addDir(path.Dir(f)); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "tree/" + f, Mode: 0o644, Size: int64(len(b)), ModTime: tarTime, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
		s := sha256.Sum256(b)
		d.sums[f] = hex.EncodeToString(s[:])
		d.sizes[f] = int64(len(b))
		d.bytes += int64(len(b))
		if bytes.Contains(b, []byte(symbol)) {
			d.grepHits = append(d.grepHits, f)
		}
		if bytes.IndexByte(b, 0) < 0 && len(b) > 0 {
			text = append(text, f)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := os.WriteFile(d.tarPath, buf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	d.manifest = manifestHash(d.files, d.sums)
	// The agent reads and edits text files (the visibility check reads
	// them with a shell builtin, which stops at a NUL byte).
	if len(text) < sz.reads {
		return nil, fmt.Errorf("dataset: %d text files, want %d to read", len(text), sz.reads)
	}
	for i := range sz.reads {
		d.readSet = append(d.readSet, text[i*len(text)/sz.reads])
	}
	// W10 edits the last Go files of the tree, one per turn.
	for i := len(text) - 1; i >= 0 && len(d.turnSet) < sz.execs; i-- {
		if strings.HasSuffix(text[i], ".go") && !slices.Contains(d.readSet, text[i]) {
			d.turnSet = append(d.turnSet, text[i])
		}
	}

	// Small files: 4 KiB each, different, from a fixed seed.
	rng := rand.New(rand.NewChaCha8([32]byte{'b', 'o', 'x', 'f', 's'}))
	smallSums := map[string]string{}
	var smallNames []string
	for i := range sz.smallFiles {
		b := make([]byte, 4096)
		for j := 0; j < len(b); j += 8 {
			binary.LittleEndian.PutUint64(b[j:], rng.Uint64())
		}
		d.small = append(d.small, b)
		s := sha256.Sum256(b)
		smallSums[smallName(i)] = hex.EncodeToString(s[:])
		smallNames = append(smallNames, smallName(i))
	}
	d.smallMF = manifestHash(smallNames, smallSums)

	// The large file: random, so no layer can compress it.
	d.big = make([]byte, sz.bigMiB<<20)
	for j := 0; j < len(d.big); j += 8 {
		binary.LittleEndian.PutUint64(d.big[j:], rng.Uint64())
	}
	s := sha256.Sum256(d.big)
	d.bigSum = hex.EncodeToString(s[:])
	return d, nil
}
