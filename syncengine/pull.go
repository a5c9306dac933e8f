package syncengine

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/safetar"
)

// Overwrite says what a pull does with a host file that the box changed.
type Overwrite string

// Overwrite policies. The empty Overwrite is OverwriteAlways.
const (
	// OverwriteAlways replaces the host's copy with the box's.
	OverwriteAlways Overwrite = "always"
	// OverwriteIfUnchanged replaces the host's copy only if it is as the
	// last pull left it (size, mode, mtime, ctime and inode, from the
	// mark); a host copy that changed since, or that no pull wrote, wins
	// and is reported in Receipt.HostChanged. MirrorDeletes spares it too.
	OverwriteIfUnchanged Overwrite = "if_unchanged"
	// OverwriteNever only adds files the host does not have.
	OverwriteNever Overwrite = "never"
)

// PullOptions tune Pull.
type PullOptions struct {
	// Exclude names paths never pulled (nor deleted, nor marked).
	Exclude Patterns
	// ReadOnly names paths whose host copy is never replaced or deleted:
	// the host's is the truth (it was seeded read-only).
	ReadOnly Patterns
	// MirrorDeletes removes from the host the files and (empty)
	// directories the box removed since the mark. Only paths the mark
	// knows are removed: files the host made itself never are.
	MirrorDeletes bool
	// Overwrite is the policy for host files the box changed.
	Overwrite Overwrite
	// Keep, if set, is asked for every path the pull would write or
	// delete; true leaves the host's copy alone (ReasonKept). A cache
	// keeps its dirty files this way.
	Keep func(rel string) bool
	// MaxBytes and MaxEntries bound the archive (0: safetar's defaults).
	MaxBytes   int64
	MaxEntries int
}

// MultiArchiver is an optional ability of a BoxIO: one tar of a set of
// paths under root, each member named by its path relative to root,
// directories as themselves (without their contents). Pull uses it to move
// only what changed; without it, Pull takes one GetArchive of the whole
// root and extracts only the changed members from it, which moves more
// bytes but is still one round trip.
type MultiArchiver interface {
	GetFiles(ctx context.Context, root string, paths []string) (io.ReadCloser, error)
}

// Pull brings what changed in the box directory boxDir since the mark
// since (nil: everything) into the host directory hostDir (made if
// missing): one Walk, then one tar of the new and changed files and
// directories, extracted by safetar. Links and special files in the box
// are skipped and counted. Pulls into one host directory run one at a time
// (a lock on the directory, across processes too).
//
// It returns the receipt and the new mark: the listing, less what did not
// reach the host (skipped paths keep their old entry, so a later pull tries
// them again), with the host-side stat of every file written. On an error
// the mark still records what reached the host, and is the one to pull
// from next.
func Pull(ctx context.Context, box BoxIO, boxDir, hostDir string, since *Mark, opts PullOptions) (Receipt, Mark, error) {
	const op = "syncengine.Pull"
	start := time.Now()
	boxDir = path.Clean(boxDir)
	p := &puller{box: box, boxDir: boxDir, hostDir: hostDir, opts: opts}
	if since != nil {
		p.old = *since
	}
	switch {
	case opts.Overwrite == "":
		p.opts.Overwrite = OverwriteAlways
	case opts.Overwrite != OverwriteAlways && opts.Overwrite != OverwriteIfUnchanged && opts.Overwrite != OverwriteNever:
		return p.rc, p.old, providers.Errorf(providers.Invalid, op, "unknown overwrite policy %q", opts.Overwrite)
	}
	if err := opts.Exclude.Check(); err != nil {
		return p.rc, p.old, err
	}
	if err := opts.ReadOnly.Check(); err != nil {
		return p.rc, p.old, err
	}
	if since != nil && since.Root != "" && path.Clean(since.Root) != boxDir {
		return p.rc, p.old, providers.Errorf(providers.Invalid, op, "the mark is of %q, not of %q", since.Root, boxDir)
	}
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return p.rc, p.old, providers.E(0, op, err).WithPath(hostDir)
	}
	unlock, err := lockDir(ctx, hostDir)
	if err != nil {
		return p.rc, p.old, providers.E(0, op, err).WithPath(hostDir)
	}
	defer unlock()
	err = p.run(ctx)
	slices.Sort(p.rc.Moved)
	slices.Sort(p.rc.HostChanged)
	p.rc.Duration = time.Since(start)
	if err != nil {
		return p.rc, p.next, providers.E(0, op, err).WithPath(boxDir)
	}
	return p.rc, p.next, nil
}

type puller struct {
	box             BoxIO
	boxDir, hostDir string
	opts            PullOptions
	old, next       Mark
	rc              Receipt
}

// keepOld carries the old mark's entry of rel on (a path not brought over).
func (p *puller) keepOld(rel string) {
	if o, ok := p.old.Entries[rel]; ok {
		p.next.Entries[rel] = o
	} else {
		delete(p.next.Entries, rel)
	}
}

func (p *puller) kept(rel string) bool {
	return p.opts.ReadOnly.Match(rel) || p.opts.Keep != nil && p.opts.Keep(rel)
}

func (p *puller) keptReason(rel string) safetar.Reason {
	if p.opts.ReadOnly.Match(rel) {
		return ReasonReadOnly
	}
	return ReasonKept
}

// mayReplace applies the overwrite policy to the host's copy of a file the
// mark knows; false with hostChanged when the host's copy wins.
func (p *puller) mayReplace(rel string) (ok, hostChanged bool) {
	switch p.opts.Overwrite {
	case OverwriteNever:
		return false, false
	case OverwriteIfUnchanged:
		rec, known := p.old.Host[rel]
		st, err := hostStat(p.hostDir, rel)
		if !known || err != nil || st != rec {
			return false, true
		}
	}
	return true, false
}

func (p *puller) run(ctx context.Context) error {
	list, err := p.box.Walk(ctx, p.boxDir)
	if err != nil {
		return err
	}
	p.rc.Listed = len(list)
	p.next = Mark{Root: p.boxDir, Entries: make(map[string]Entry, len(list)), Host: maps.Clone(p.old.Host), Taken: time.Now()}
	if p.next.Host == nil {
		p.next.Host = map[string]HostStat{}
	}
	listed := make(map[string]bool, len(list))
	want := map[string]Entry{}
	var kindChanged []string
	for _, fi := range list {
		rel := fi.Name
		if reason := safetar.CheckName(rel); reason != "" {
			p.rc.skip(rel, reason, "")
			continue
		}
		listed[rel] = true
		if p.opts.Exclude.Match(rel) {
			p.rc.skip(rel, ReasonExcluded, "")
			continue
		}
		e := EntryOf(fi)
		o, had := p.old.Entries[rel]
		if had && o.Same(e) {
			o.Target = e.Target
			p.next.Entries[rel] = o
			if e.Kind == KindFile || e.Kind == KindDir {
				p.rc.Unchanged++
			}
			continue
		}
		switch {
		case e.Kind == KindSymlink:
			p.rc.skip(rel, safetar.ReasonSymlink, e.Target)
			p.next.Entries[rel] = e
			continue
		case e.Kind == KindOther:
			p.rc.skip(rel, safetar.ReasonOtherType, "")
			p.next.Entries[rel] = e
			continue
		case p.kept(rel):
			p.rc.skip(rel, p.keptReason(rel), "")
			p.keepOld(rel)
			continue
		}
		want[rel] = e
		if had && o.Kind != e.Kind && (o.Kind == KindFile || o.Kind == KindDir) {
			kindChanged = append(kindChanged, rel)
		}
	}
	var removed []string
	for rel := range p.old.Entries {
		if !listed[rel] {
			removed = append(removed, rel)
		}
	}
	if err := p.deletes(removed); err != nil {
		return err
	}
	if err := p.replaceKinds(kindChanged, want); err != nil {
		return err
	}
	if len(want) == 0 {
		return nil
	}
	return p.extract(ctx, want)
}

// byDepth sorts paths children first.
func byDepth(paths []string) {
	slices.SortFunc(paths, func(a, b string) int {
		if d := strings.Count(b, "/") - strings.Count(a, "/"); d != 0 {
			return d
		}
		return strings.Compare(b, a)
	})
}

// deletes handles the paths the box removed since the mark.
func (p *puller) deletes(removed []string) error {
	byDepth(removed)
	for _, rel := range removed {
		o := p.old.Entries[rel]
		if !p.opts.MirrorDeletes || o.Kind == KindSymlink || o.Kind == KindOther || p.opts.Exclude.Match(rel) {
			// Not ours to delete: drop it from the mark, keep its host
			// stat (a file the box makes again may replace it).
			continue
		}
		if p.kept(rel) {
			p.rc.skip(rel, p.keptReason(rel), "")
			p.keepOld(rel)
			continue
		}
		if o.Kind == KindFile {
			if ok, changed := p.mayReplace(rel); !ok {
				if changed {
					p.rc.HostChanged = append(p.rc.HostChanged, rel)
				} else {
					p.rc.skip(rel, safetar.ReasonRefused, "")
				}
				p.keepOld(rel)
				continue
			}
		}
		if done, err := p.remove(rel); err != nil {
			return err
		} else if !done {
			p.keepOld(rel)
		}
	}
	return nil
}

// remove removes rel from the host; false (and a skip) when it cannot be.
func (p *puller) remove(rel string) (bool, error) {
	err := safetar.Remove(p.hostDir, rel)
	switch providers.CodeOf(err) {
	case 0:
		p.rc.Deleted = append(p.rc.Deleted, rel)
	case providers.NotFound:
	case providers.Exists:
		p.rc.skip(rel, ReasonNotEmpty, "")
		return false, nil
	case providers.Unsafe:
		p.rc.skip(rel, safetar.ReasonThroughLink, "")
		return false, nil
	default:
		return false, err
	}
	delete(p.next.Host, rel)
	return true, nil
}

// replaceKinds makes room for paths whose kind changed in the box (a file
// that became a directory, or the reverse).
func (p *puller) replaceKinds(paths []string, want map[string]Entry) error {
	byDepth(paths)
	for _, rel := range paths {
		if p.old.Entries[rel].Kind == KindFile {
			if ok, changed := p.mayReplace(rel); !ok {
				if changed {
					p.rc.HostChanged = append(p.rc.HostChanged, rel)
				} else {
					p.rc.skip(rel, safetar.ReasonRefused, "")
				}
				p.keepOld(rel)
				delete(want, rel)
				continue
			}
		}
		if done, err := p.remove(rel); err != nil {
			return err
		} else if !done {
			p.keepOld(rel)
			delete(want, rel)
		}
	}
	return nil
}

// extract moves the wanted paths in one archive.
func (p *puller) extract(ctx context.Context, want map[string]Entry) error {
	paths := slices.Sorted(maps.Keys(want))
	var r io.ReadCloser
	var err error
	strip := ""
	if ma, ok := p.box.(MultiArchiver); ok {
		r, err = ma.GetFiles(ctx, p.boxDir, paths)
	} else {
		r, err = p.box.GetArchive(ctx, p.boxDir)
		if strip = path.Base(p.boxDir); strip == "/" {
			strip = "."
		}
	}
	if err != nil {
		return err
	}
	p.rc.Archives = 1
	ex, xerr := p.extractFrom(ctx, r, strip, want)
	if cerr := r.Close(); cerr != nil {
		p.rc.Warnings = append(p.rc.Warnings, fmt.Sprintf("closing the archive: %v", cerr))
	}
	p.rc.Stopped = ex.Stopped
	if xerr == nil {
		xerr = p.copyHardlinks(ctx, ex, want)
	}
	// What the listing had but the archive did not: gone in between, or
	// the archive stopped before it.
	for rel := range want {
		if xerr == nil {
			p.rc.skip(rel, ReasonMissing, "")
		}
		p.keepOld(rel)
	}
	return xerr
}

// extractFrom extracts the wanted members of r and records what it did:
// written paths leave want and enter the new mark; skipped ones leave want
// and keep their old entry, except hard links, which stay in want for
// copyHardlinks.
func (p *puller) extractFrom(ctx context.Context, r io.Reader, strip string, want map[string]Entry) (safetar.Receipt, error) {
	hostChanged := map[string]bool{} // the Overwrite hook runs on this goroutine
	ex, xerr := safetar.Extract(ctx, r, p.hostDir, safetar.Options{
		Strip:      strip,
		MaxBytes:   p.opts.MaxBytes,
		MaxEntries: p.opts.MaxEntries,
		Filter:     func(rel string) bool { _, ok := want[rel]; return ok },
		Overwrite: func(rel string) bool {
			ok, changed := p.mayReplace(rel)
			if changed {
				hostChanged[rel] = true
			}
			return ok
		},
	})
	p.rc.Masked += ex.Masked
	for _, w := range ex.Written {
		e := want[w.Path]
		delete(want, w.Path)
		if w.Dir {
			p.rc.Dirs++
			p.next.Entries[w.Path] = e
			continue
		}
		e.SHA256 = w.SHA256
		p.next.Entries[w.Path] = e
		p.rc.Files++
		p.rc.Bytes += w.Size
		p.rc.moved(w.Path, w.SHA256)
		if st, err := hostStat(p.hostDir, w.Path); err == nil {
			p.next.Host[w.Path] = st
		} else {
			delete(p.next.Host, w.Path)
		}
	}
	for _, s := range ex.Skipped {
		if s.Reason == safetar.ReasonHardlink {
			continue // copyHardlinks decides
		}
		if s.Reason == safetar.ReasonRefused && hostChanged[s.Path] {
			p.rc.HostChanged = append(p.rc.HostChanged, s.Path)
		} else {
			p.rc.skip(s.Path, s.Reason, s.Target)
		}
		if _, ok := want[s.Path]; ok {
			delete(want, s.Path)
			p.keepOld(s.Path)
		}
	}
	return ex, xerr
}

// copyHardlinks gives each wanted file that the archive sent as a hard
// link to a file it also sent (a box file with two names in the tree) a
// copy of that file, through a second extraction of a tar built on the
// host from the files just written: the same checks, no second round trip.
func (p *puller) copyHardlinks(ctx context.Context, ex safetar.Receipt, want map[string]Entry) error {
	written := map[string]bool{}
	for _, w := range ex.Written {
		written[w.Path] = !w.Dir
	}
	var links []safetar.Skip
	for _, s := range ex.Skipped {
		if s.Reason != safetar.ReasonHardlink {
			continue
		}
		if _, ok := want[s.Path]; !ok {
			continue
		}
		if !written[s.Target] || safetar.CheckName(s.Target) != "" {
			p.rc.skip(s.Path, s.Reason, s.Target)
			delete(want, s.Path)
			p.keepOld(s.Path)
			continue
		}
		links = append(links, s)
	}
	if len(links) == 0 {
		return nil
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		for _, l := range links {
			if err := p.addHostFile(tw, l.Path, l.Target); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	_, err := p.extractFrom(ctx, pr, "", want)
	pr.Close()
	return err
}

// addHostFile adds the host file target (just written by this pull) to tw
// as the member name.
func (p *puller) addHostFile(tw *tar.Writer, name, target string) error {
	f, err := os.OpenFile(filepath.Join(p.hostDir, filepath.FromSlash(target)), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: fi.Size(),
		Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err = io.CopyN(tw, f, fi.Size())
	return err
}

// TarExec gets one tar of a set of paths from any box with GNU tar, in one
// exec: `tar --null -T -` reading the names from stdin. It makes a BoxIO a
// MultiArchiver:
//
//	struct{ *hands.Hands; syncengine.TarExec }{h, syncengine.TarExec{Box: box}}
type TarExec struct{ Box providers.Box }

var _ MultiArchiver = TarExec{}

// GetFiles starts tar in the box and returns its output. Close returns an
// error when tar exited with a status of 2 or more (a path it could not
// read, e.g. removed since the listing); the archive is whole regardless,
// as Extract checks.
func (t TarExec) GetFiles(ctx context.Context, root string, paths []string) (io.ReadCloser, error) {
	var names bytes.Buffer
	for _, p := range paths {
		names.WriteString(p)
		names.WriteByte(0)
	}
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	stderr := &tailBuffer{max: 4096}
	proc, err := t.Box.Exec(ctx, providers.ExecRequest{
		Argv: []string{"tar", "-C", root, "--no-recursion", "--hard-dereference", "--null",
			"--verbatim-files-from", "--no-unquote", "-T", "-", "-cf", "-"},
		Stdin:  &names,
		Stdout: pw,
		Stderr: stderr,
	})
	if err != nil {
		cancel()
		return nil, err
	}
	x := &execReader{PipeReader: pr, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(x.done)
		code, err := proc.Wait()
		switch {
		case err != nil:
			x.err = err
		case code >= 2:
			x.err = providers.Errorf(providers.Unknown, "syncengine.TarExec", "tar exited %d: %s", code, stderr.String())
		}
		pw.CloseWithError(x.err)
	}()
	return x, nil
}

type execReader struct {
	*io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// Close stops tar if it still runs and returns how it ended.
func (x *execReader) Close() error {
	x.PipeReader.Close()
	<-x.done
	x.cancel()
	return x.err
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
