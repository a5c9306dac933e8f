package syncengine

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/safetar"
)

// BoxIO is what seed and pull need of a box: one listing of a tree, tars in
// and out, and file operations. hands.Hands serves it for any box.
type BoxIO interface {
	providers.Walker
	providers.Archiver
	providers.Files
}

// Skip reasons of seed and pull, beside safetar's.
const (
	ReasonExcluded safetar.Reason = "excluded"  // matched Exclude
	ReasonReadOnly safetar.Reason = "read_only" // matched ReadOnly: the host's copy is never replaced by a pull
	ReasonKept     safetar.Reason = "kept"      // PullOptions.Keep said so (a dirty file)
	ReasonNotEmpty safetar.Reason = "not_empty" // a directory removed in the box still holds host files
	ReasonMissing  safetar.Reason = "missing"   // listed, but absent from the archive (gone in between)
	ReasonSocket   safetar.Reason = "socket"
)

// Receipt says what a seed or a pull did.
type Receipt struct {
	Files int   `json:"files"` // regular files moved
	Dirs  int   `json:"dirs"`  // directories made or updated
	Bytes int64 `json:"bytes"` // file bytes moved
	// Moved lists the files moved, sorted; Hashes has their SHA-256 (hex).
	Moved  []string          `json:"moved,omitempty"`
	Hashes map[string]string `json:"hashes,omitempty"`
	// Unchanged counts files and directories a pull found as its mark
	// listed them, and so did not move.
	Unchanged int `json:"unchanged"`
	// HostChanged lists the files a pull left alone because the host's
	// copy changed since the mark (Overwrite: if_unchanged) or was never
	// the box's.
	HostChanged []string `json:"hostChanged,omitempty"`
	// Deleted lists what MirrorDeletes removed from the host.
	Deleted []string `json:"deleted,omitempty"`
	// Skipped lists what was not moved, with why; SkipsBy counts them
	// (and the ReasonFiltered and ReasonExcluded ones, which it does not
	// list).
	Skipped []safetar.Skip         `json:"skipped,omitempty"`
	SkipsBy map[safetar.Reason]int `json:"skipsBy,omitempty"`
	Masked  int                    `json:"masked"` // modes reduced by the cap
	// Archives is the number of tars moved: 0 or 1.
	Archives int `json:"archives"`
	// Listed is the number of entries the box's listing held (pull).
	Listed int `json:"listed"`
	// Stopped is why the archive's extraction stopped early, if it did.
	Stopped safetar.Stop `json:"stopped,omitempty"`
	// Warnings are problems that lost nothing (e.g. tar's exit status in
	// the box after a whole archive).
	Warnings []string      `json:"warnings,omitempty"`
	Duration time.Duration `json:"duration"`
}

// Skips returns how many paths were skipped for reason.
func (r *Receipt) Skips(reason safetar.Reason) int { return r.SkipsBy[reason] }

func (r *Receipt) moved(p, sum string) {
	r.Moved = append(r.Moved, p)
	if r.Hashes == nil {
		r.Hashes = map[string]string{}
	}
	r.Hashes[p] = sum
}

func (r *Receipt) skip(p string, reason safetar.Reason, target string) {
	if r.SkipsBy == nil {
		r.SkipsBy = map[safetar.Reason]int{}
	}
	r.SkipsBy[reason]++
	if reason != safetar.ReasonFiltered && reason != ReasonExcluded {
		r.Skipped = append(r.Skipped, safetar.Skip{Path: p, Reason: reason, Target: target})
	}
}

// SeedOptions tune Seed.
type SeedOptions struct {
	// Exclude names paths not to seed.
	Exclude Patterns
	// ReadOnly names paths seeded without write bits.
	ReadOnly Patterns
	// UID and GID own the seeded members in the box where its extraction
	// honours owners (as root does); zero is root.
	UID, GID int
}

// Seed copies the host directory hostDir into the box directory boxDir
// (made if missing) as one tar through one PutArchive: regular files and
// directories, with modes capped as safetar caps them (and no write bits
// under ReadOnly). Links on the host are never followed; they, and fifos,
// sockets and devices, are skipped and counted. Files already in the box
// are replaced; nothing in the box is deleted.
func Seed(ctx context.Context, box BoxIO, hostDir, boxDir string, opts SeedOptions) (Receipt, error) {
	const op = "syncengine.Seed"
	start := time.Now()
	var rc Receipt
	if err := opts.Exclude.Check(); err != nil {
		return rc, err
	}
	if err := opts.ReadOnly.Check(); err != nil {
		return rc, err
	}
	if fi, err := os.Stat(hostDir); err != nil {
		return rc, providers.E(0, op, err).WithPath(hostDir)
	} else if !fi.IsDir() {
		return rc, providers.Errorf(providers.Invalid, op, "not a directory").WithPath(hostDir)
	}
	if err := mkdirAll(ctx, box, boxDir); err != nil {
		return rc, providers.E(0, op, err).WithPath(boxDir)
	}
	pr, pw := io.Pipe()
	built := make(chan error, 1)
	go func() {
		err := buildSeedTar(ctx, pw, hostDir, opts, &rc)
		pw.CloseWithError(err) // nil: EOF after the end marker
		built <- err
	}()
	putErr := box.PutArchive(ctx, boxDir, pr)
	pr.CloseWithError(errPutDone) // unblock the builder if the box stopped reading
	buildErr := <-built
	rc.Archives = 1
	slices.Sort(rc.Moved)
	rc.Duration = time.Since(start)
	switch {
	case buildErr != nil && !errors.Is(buildErr, errPutDone):
		return rc, providers.E(0, op, buildErr).WithPath(hostDir)
	case putErr != nil:
		return rc, providers.E(0, op, putErr).WithPath(boxDir)
	}
	return rc, nil
}

var errPutDone = errors.New("syncengine: the box stopped reading the archive")

// mkdirAll makes dir and its missing parents in the box.
func mkdirAll(ctx context.Context, box providers.Files, dir string) error {
	fi, err := box.Stat(ctx, dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return providers.PathError("syncengine.mkdirAll", "", dir, syscall.ENOTDIR)
	case providers.CodeOf(err) != providers.NotFound:
		return err
	}
	if parent := path.Dir(dir); parent != dir {
		if err := mkdirAll(ctx, box, parent); err != nil {
			return err
		}
	}
	if err := box.Mkdir(ctx, dir, 0o755); err != nil && providers.CodeOf(err) != providers.Exists {
		return err
	}
	return nil
}

// buildSeedTar writes the tar of hostDir to w.
func buildSeedTar(ctx context.Context, w io.Writer, hostDir string, opts SeedOptions, rc *Receipt) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(hostDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == hostDir {
			return nil
		}
		rel, err := filepath.Rel(hostDir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if opts.Exclude.Match(rel) {
			rc.skip(rel, ReasonExcluded, "")
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if reason := safetar.CheckName(rel); reason != "" {
			rc.skip(rel, reason, "")
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch t := d.Type(); {
		case t.IsDir():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			mode := seedMode(fi.Mode(), true, opts.ReadOnly.Match(rel), rc)
			rc.Dirs++
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: int64(mode),
				ModTime: fi.ModTime(), Uid: opts.UID, Gid: opts.GID, Format: tar.FormatPAX})
		case t.IsRegular():
			return seedFile(tw, p, rel, opts, rc)
		case t&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			rc.skip(rel, safetar.ReasonSymlink, target)
		case t&fs.ModeNamedPipe != 0:
			rc.skip(rel, safetar.ReasonFifo, "")
		case t&fs.ModeDevice != 0:
			rc.skip(rel, safetar.ReasonDevice, "")
		case t&fs.ModeSocket != 0:
			rc.skip(rel, ReasonSocket, "")
		default:
			rc.skip(rel, safetar.ReasonOtherType, "")
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func seedMode(m fs.FileMode, dir, readOnly bool, rc *Receipt) fs.FileMode {
	if m&^0o755&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
		rc.Masked++
	}
	c := m.Perm() & 0o755
	if readOnly {
		c &^= 0o222
	}
	return c
}

// seedFile adds one host file, opened without following a link, with the
// size its open handle reports.
func seedFile(tw *tar.Writer, p, rel string, opts SeedOptions, rc *Receipt) error {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) { // became a link since the walk
			rc.skip(rel, safetar.ReasonSymlink, "")
			return nil
		}
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		rc.skip(rel, safetar.ReasonOtherType, "")
		return nil
	}
	mode := seedMode(fi.Mode(), false, opts.ReadOnly.Match(rel), rc)
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: rel, Size: fi.Size(), Mode: int64(mode),
		ModTime: fi.ModTime(), Uid: opts.UID, Gid: opts.GID, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.CopyN(io.MultiWriter(tw, h), f, fi.Size())
	if err != nil {
		if errors.Is(err, io.EOF) {
			return providers.Errorf(providers.Unavailable, "syncengine.Seed",
				"%s shrank from %d to %d bytes while it was read; seed again", rel, fi.Size(), n)
		}
		return err
	}
	rc.Files++
	rc.Bytes += n
	rc.moved(rel, hex.EncodeToString(h.Sum(nil)))
	return nil
}
