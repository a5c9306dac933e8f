package syncengine

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/safetar"
)

// Kind is what a listed path is.
type Kind string

// Kinds.
const (
	KindFile    Kind = "file"
	KindDir     Kind = "dir"
	KindSymlink Kind = "symlink"
	KindOther   Kind = "other" // a fifo, socket or device
)

// Entry is one path of a listing.
type Entry struct {
	Kind    Kind        `json:"kind"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`    // permission, setuid, setgid and sticky bits; the type is Kind
	MtimeNs int64       `json:"mtimeNs"` // the box's clock
	Target  string      `json:"target,omitempty"`
	SHA256  string      `json:"sha256,omitempty"` // hex, set for files moved
}

// Same reports whether two listings of a path agree: kind, size, mode and
// mtime. Neither the target nor the hash is compared.
func (e Entry) Same(o Entry) bool {
	return e.Kind == o.Kind && e.Size == o.Size && e.Mode == o.Mode && e.MtimeNs == o.MtimeNs
}

// EntryOf converts one listed FileInfo.
func EntryOf(fi providers.FileInfo) Entry {
	e := Entry{
		Size:    fi.Size,
		Mode:    fi.Mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky),
		MtimeNs: fi.Mtime.UnixNano(),
	}
	switch {
	case fi.IsRegular():
		e.Kind = KindFile
	case fi.IsDir():
		e.Kind, e.Size = KindDir, 0 // a directory's size says nothing portable
	case fi.IsSymlink():
		e.Kind, e.Target = KindSymlink, fi.Target
	default:
		e.Kind, e.Size = KindOther, 0
	}
	return e
}

// HostStat is what the host's copy of a file was when a pull wrote it: a
// later stat that differs means the host changed it.
type HostStat struct {
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	MtimeNs int64       `json:"mtimeNs"`
	CtimeNs int64       `json:"ctimeNs"`
	Ino     uint64      `json:"ino"`
}

// Mark is a listing of the tree under Root at Taken (the host's clock, for
// people; never compared with the box's times).
type Mark struct {
	Root    string
	Entries map[string]Entry // relative slash-separated path -> entry
	// Host holds the host-side stat of the files a pull wrote (or found
	// unchanged), for Overwrite: if_unchanged.
	Host  map[string]HostStat
	Taken time.Time
}

// TakeMark lists root in the box with one Walk. Entries whose names are not
// safe relative paths (safetar.CheckName) are left out: a box does not get
// to name a path outside its tree.
func TakeMark(ctx context.Context, w providers.Walker, root string) (Mark, error) {
	const op = "syncengine.TakeMark"
	list, err := w.Walk(ctx, root)
	if err != nil {
		return Mark{}, providers.E(0, op, err).WithPath(root)
	}
	m := Mark{Root: root, Entries: make(map[string]Entry, len(list)), Taken: time.Now()}
	for _, fi := range list {
		if safetar.CheckName(fi.Name) != "" {
			continue
		}
		m.Entries[fi.Name] = EntryOf(fi)
	}
	return m, nil
}

// Changes are the paths that differ between two marks, each list sorted.
type Changes struct {
	Added   []string `json:"added,omitempty"`
	Changed []string `json:"changed,omitempty"`
	Removed []string `json:"removed,omitempty"`
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool { return len(c.Added)+len(c.Changed)+len(c.Removed) == 0 }

// Diff compares two marks of one tree by kind, size, mode and mtime.
func Diff(old, new Mark) Changes {
	var c Changes
	for p, e := range new.Entries {
		o, ok := old.Entries[p]
		switch {
		case !ok:
			c.Added = append(c.Added, p)
		case !o.Same(e):
			c.Changed = append(c.Changed, p)
		}
	}
	for p := range old.Entries {
		if _, ok := new.Entries[p]; !ok {
			c.Removed = append(c.Removed, p)
		}
	}
	slices.Sort(c.Added)
	slices.Sort(c.Changed)
	slices.Sort(c.Removed)
	return c
}

// Paths returns the mark's paths, sorted (parents before children).
func (m Mark) Paths() []string {
	ps := make([]string, 0, len(m.Entries))
	for p := range m.Entries {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// markJSON is a mark on disk: entries as a sorted list, so the file is
// stable, with each path in "path" when it is UTF-8 and in "path64"
// (base64) when it is not (JSON would mangle it).
type markJSON struct {
	Version int         `json:"version"`
	Root    string      `json:"root"`
	Taken   time.Time   `json:"taken"`
	Entries []entryJSON `json:"entries"`
}

type entryJSON struct {
	Path   string `json:"path,omitempty"`
	Path64 string `json:"path64,omitempty"`
	Entry
	Host *HostStat `json:"host,omitempty"`
}

const markVersion = 1

// MarshalJSON writes the mark as a versioned, sorted list of entries.
func (m Mark) MarshalJSON() ([]byte, error) {
	keys := m.Paths()
	for p := range m.Host {
		if _, ok := m.Entries[p]; !ok {
			keys = append(keys, p)
		}
	}
	slices.Sort(keys)
	out := markJSON{Version: markVersion, Root: m.Root, Taken: m.Taken, Entries: make([]entryJSON, 0, len(keys))}
	for _, p := range keys {
		ej := entryJSON{Entry: m.Entries[p]}
		if utf8.ValidString(p) {
			ej.Path = p
		} else {
			ej.Path64 = base64.StdEncoding.EncodeToString([]byte(p))
		}
		if hs, ok := m.Host[p]; ok {
			ej.Host = &hs
		}
		out.Entries = append(out.Entries, ej)
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (m *Mark) UnmarshalJSON(b []byte) error {
	var in markJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	if in.Version != markVersion {
		return fmt.Errorf("syncengine: mark version %d, want %d", in.Version, markVersion)
	}
	*m = Mark{Root: in.Root, Taken: in.Taken, Entries: make(map[string]Entry, len(in.Entries))}
	for _, ej := range in.Entries {
		p := ej.Path
		if ej.Path64 != "" {
			raw, err := base64.StdEncoding.DecodeString(ej.Path64)
			if err != nil {
				return fmt.Errorf("syncengine: mark path64: %w", err)
			}
			p = string(raw)
		}
		if safetar.CheckName(p) != "" {
			return fmt.Errorf("syncengine: mark holds a bad path %q", p)
		}
		if ej.Kind != "" {
			m.Entries[p] = ej.Entry
		}
		if ej.Host != nil {
			if m.Host == nil {
				m.Host = map[string]HostStat{}
			}
			m.Host[p] = *ej.Host
		}
	}
	return nil
}

// Save writes the mark to file atomically (a temporary file, then rename).
func (m Mark) Save(file string) error {
	const op = "syncengine.Mark.Save"
	b, err := json.Marshal(m)
	if err != nil {
		return providers.E(providers.Invalid, op, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return providers.E(0, op, err).WithPath(file)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return providers.E(0, op, err).WithPath(file)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return providers.E(0, op, err).WithPath(file)
	}
	if err := tmp.Close(); err != nil {
		return providers.E(0, op, err).WithPath(file)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return providers.E(0, op, err).WithPath(file)
	}
	return nil
}

// LoadMark reads a mark Save wrote. A missing file is NotFound; a file that
// is not a mark is Invalid.
func LoadMark(file string) (Mark, error) {
	const op = "syncengine.LoadMark"
	b, err := os.ReadFile(file)
	if err != nil {
		return Mark{}, providers.E(0, op, err).WithPath(file)
	}
	var m Mark
	if err := json.Unmarshal(b, &m); err != nil {
		return Mark{}, providers.E(providers.Invalid, op, err).WithPath(file)
	}
	return m, nil
}

// Patterns are Exclude or ReadOnly patterns (see the package doc).
type Patterns []string

// Check returns an Invalid error for the first malformed pattern.
func (ps Patterns) Check() error {
	for _, p := range ps {
		if strings.Trim(p, "/") == "" {
			return providers.Errorf(providers.Invalid, "syncengine.Patterns", "empty pattern %q", p)
		}
		if _, err := path.Match(strings.Trim(p, "/"), ""); err != nil {
			return providers.Errorf(providers.Invalid, "syncengine.Patterns", "bad pattern %q: %v", p, err)
		}
	}
	return nil
}

// Match reports whether rel (a relative slash-separated path) or one of
// its parent directories matches one of the patterns.
func (ps Patterns) Match(rel string) bool {
	if len(ps) == 0 {
		return false
	}
	segs := strings.Split(rel, "/")
	for _, p := range ps {
		anchored := strings.Contains(strings.TrimSuffix(p, "/"), "/")
		p = strings.Trim(p, "/")
		if !anchored {
			for _, s := range segs {
				if ok, _ := path.Match(p, s); ok {
					return true
				}
			}
			continue
		}
		n := strings.Count(p, "/") + 1
		if n > len(segs) {
			continue
		}
		if ok, _ := path.Match(p, strings.Join(segs[:n], "/")); ok {
			return true
		}
	}
	return false
}
