package cache

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// The journal of dirty files: one append-only file per box, a line per
// change, so that making a file dirty, setting its attributes or renaming
// it costs one small write(2), not a file and a rename each. A "put" line
// is the whole state of one dirty file (its data file's id, path,
// attributes set while dirty, and the box file it started from); a "drop"
// line says the file was pushed or removed. Replaying the lines in order
// gives the dirty files a crash left. Lines and data files are written
// through the page cache, which survives a crash of the daemon (not a power
// loss of the machine); the journal is rewritten with only its live lines
// when it has grown well past them.
const journalName = "journal.log"

// journalEntry is one line of the journal.
type journalEntry struct {
	Op    string      `json:"op"` // "put" or "drop"
	ID    uint64      `json:"id"`
	Path  string      `json:"path,omitempty"`
	Mode  fs.FileMode `json:"mode,omitempty"`
	Force bool        `json:"force,omitempty"` // Mode was set while dirty
	Atime time.Time   `json:"atime,omitzero"`
	Mtime time.Time   `json:"mtime,omitzero"`
	Owner *[2]int     `json:"owner,omitempty"` // uid, gid set while dirty (-1 kept)
	// New says the host made the file: the box had nothing under its name
	// when the writes began. Otherwise Base, when known, is the box file
	// the content started from.
	New  bool         `json:"new,omitempty"`
	Base *journalBase `json:"base,omitempty"`
	// Excl says the file was made with O_EXCL and has not reached the box:
	// it must not replace a file the box made meanwhile.
	Excl bool `json:"excl,omitempty"`
	// Link is a second name the host gave the file (linkHere), made in
	// the box once the file is.
	Link string `json:"link,omitempty"`
	// Remove says the line is not a dirty file but a name the host
	// removed and the box has not yet (behindrm.go): a directory when
	// Dir. It has no data file.
	Remove bool `json:"remove,omitempty"`
	Dir    bool `json:"dir,omitempty"`
}

// journalBase is the box file a dirty file's content started from.
type journalBase struct {
	Size  int64     `json:"size"`
	Mtime time.Time `json:"mtime"`
	Ino   uint64    `json:"ino,omitempty"`
	Nlink uint32    `json:"nlink,omitempty"`
}

// journal is a box's journal file.
type journal struct {
	path string

	mu        sync.Mutex
	f         *os.File // open for appending; nil after a failure to reopen
	size      int64
	live      map[uint64][]byte // the last put line of each dirty file
	liveBytes int64             // their size, newlines included
}

// Compaction thresholds: rewrite when the file is this large and holds
// this many times the bytes of its live lines; empty it once nothing is
// dirty and it holds more than journalEmptyMin.
const (
	journalCompactMin = 1 << 20
	journalCompactX   = 4
	journalEmptyMin   = 64 << 10
)

// openJournal reads the journal at path and returns it open for
// appending, with the live entries it holds (in the order of their
// last put). A torn last line (a crash mid-write) is skipped.
func openJournal(path string) (*journal, []journalEntry, error) {
	j := &journal{path: path, live: map[uint64][]byte{}}
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, nil, err
	}
	order := []uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e journalEntry
		if json.Unmarshal(line, &e) != nil || e.ID == 0 {
			continue
		}
		switch e.Op {
		case "put":
			if e.Path == "" {
				continue
			}
			if _, ok := j.live[e.ID]; !ok {
				order = append(order, e.ID)
			}
			j.live[e.ID] = bytes.Clone(line)
		case "drop":
			delete(j.live, e.ID)
		}
	}
	for _, l := range j.live {
		j.liveBytes += int64(len(l)) + 1
	}
	var out []journalEntry
	for _, id := range order {
		if line, ok := j.live[id]; ok {
			var e journalEntry
			json.Unmarshal(line, &e)
			out = append(out, e)
		}
	}
	if err := j.rewriteLocked(order); err != nil {
		return nil, nil, err
	}
	return j, out, nil
}

// Journaled reports whether the cache kept in dir holds writes journaled
// and not pushed yet (in the journal, or the journal directory of earlier
// versions). It reads, and changes nothing.
func Journaled(dir string) bool {
	if ents, err := os.ReadDir(filepath.Join(dir, "journal")); err == nil && len(ents) > 0 {
		return true
	}
	b, err := os.ReadFile(filepath.Join(dir, journalName))
	if err != nil {
		return false
	}
	live := map[uint64]bool{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var e journalEntry
		if json.Unmarshal(line, &e) != nil || e.ID == 0 {
			continue
		}
		switch e.Op {
		case "put":
			live[e.ID] = e.Path != ""
		case "drop":
			delete(live, e.ID)
		}
	}
	for _, l := range live {
		if l {
			return true
		}
	}
	return false
}

// rewriteLocked replaces the file with the live lines, in order (the ids
// of the live lines, others ignored), and opens it for appending.
func (j *journal) rewriteLocked(order []uint64) error {
	var buf bytes.Buffer
	for _, id := range order {
		if line, ok := j.live[id]; ok {
			buf.Write(line)
			buf.WriteByte('\n')
		}
	}
	tmp := j.path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, j.path); err != nil {
		return err
	}
	if j.f != nil {
		j.f.Close()
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		j.f = nil
		return err
	}
	j.f, j.size = f, int64(buf.Len())
	return nil
}

// put records e, the whole state of a dirty file.
func (j *journal) put(e journalEntry) error {
	e.Op = "put"
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.liveBytes += int64(len(line)) - int64(len(j.live[e.ID]))
	if _, ok := j.live[e.ID]; !ok {
		j.liveBytes++
	}
	j.live[e.ID] = line
	return j.appendLocked(line)
}

// drop records that the file with data id is no longer dirty.
func (j *journal) drop(id uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	line, ok := j.live[id]
	if !ok {
		return nil
	}
	delete(j.live, id)
	j.liveBytes -= int64(len(line)) + 1
	if len(j.live) == 0 && j.size > journalEmptyMin && j.f != nil {
		// Nothing dirty: an empty journal says so.
		if err := j.f.Truncate(0); err == nil {
			j.size = 0
			return nil
		}
	}
	return j.appendLocked([]byte(`{"op":"drop","id":` + strconv.FormatUint(id, 10) + `}`))
}

func (j *journal) appendLocked(line []byte) error {
	if j.f == nil {
		if err := j.rewriteLocked(j.liveOrder()); err != nil {
			return err
		}
	}
	buf := make([]byte, 0, len(line)+1)
	buf = append(append(buf, line...), '\n')
	n, err := j.f.Write(buf)
	j.size += int64(n)
	if err != nil {
		return err
	}
	if j.size > journalCompactMin && j.size > journalCompactX*j.liveBytes {
		return j.rewriteLocked(j.liveOrder())
	}
	return nil
}

// liveOrder is the ids of the live lines, in id order (the order files
// were first seen).
func (j *journal) liveOrder() []uint64 {
	ids := make([]uint64, 0, len(j.live))
	for id := range j.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (j *journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f != nil {
		j.f.Close()
		j.f = nil
	}
}

// entryLocked is f's state as a journal line. f.mu held.
func (f *file) entryLocked() journalEntry {
	e := journalEntry{ID: f.id, Path: f.rel, Mode: f.mode, Force: f.force, Atime: f.atime, Mtime: f.mtime,
		New: f.created, Excl: f.excl && !f.inBox, Link: f.alias}
	if f.chown {
		e.Owner = &[2]int{f.uid, f.gid}
	}
	if b := f.started; b != nil {
		e.Base = &journalBase{Size: b.Size, Mtime: b.Mtime, Ino: b.Ino, Nlink: b.Nlink}
	}
	return e
}

// journalLocked records f's state in the journal. f.mu held.
func (f *file) journalLocked(c *Cache) {
	if err := c.jnl.put(f.entryLocked()); err != nil {
		c.log.Error("journal write failed; a crash now would lose this file's writes", "path", f.rel, "err", err)
		return
	}
	f.journal = true
}

// unjournalLocked records that f is not dirty any more. f.mu held.
func (f *file) unjournalLocked(c *Cache) {
	if !f.journal {
		return
	}
	if err := c.jnl.drop(f.id); err != nil {
		c.log.Error("journal write failed; a crash now would push this file again", "path", f.rel, "err", err)
	}
	f.journal = false
}

// rewriteJournal records f's new state (a rename) while it is dirty.
func (f *file) rewriteJournal(c *Cache) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.journal && f.dirty {
		f.journalLocked(c)
	}
}

// loadJournal reads what a previous process left dirty (the journal, and
// the one-file-per-record journal directory of earlier versions), and
// clears data files nothing refers to.
func (c *Cache) loadJournal() error {
	const op = "cache.loadJournal"
	j, ents, err := openJournal(filepath.Join(c.opts.Dir, journalName))
	if err != nil {
		return providers.E(providers.Unknown, op, err)
	}
	c.jnl = j
	ents = append(ents, c.oldJournal()...)
	keep := map[uint64]bool{}
	for _, e := range ents {
		if e.Remove {
			c.pseq++
			c.prms.Set(e.Path, &pendingRm{dir: e.Dir, seq: c.pseq, id: e.ID})
			c.nextID = max(c.nextID, e.ID)
			continue
		}
		st, err := os.Stat(c.dataPath(e.ID))
		if err != nil {
			c.log.Error("journal names a missing data file; dropped", "path", e.Path, "err", err)
			c.jnl.drop(e.ID)
			continue
		}
		keep[e.ID] = true
		f := &file{id: e.ID, rel: e.Path, valid: true, dirty: true, inBox: !e.New, journal: true, recovered: true,
			mode: e.Mode, force: e.Force, atime: e.Atime, mtime: e.Mtime, size: st.Size(), local: st.ModTime(),
			created: e.New, excl: e.Excl}
		if e.Owner != nil {
			f.chown, f.uid, f.gid = true, e.Owner[0], e.Owner[1]
		}
		if b := e.Base; b != nil {
			f.started = &providers.FileInfo{Size: b.Size, Mtime: b.Mtime, Ino: b.Ino, Nlink: b.Nlink}
		}
		if old := c.file(e.Path); old != nil && old.id > e.ID {
			c.jnl.drop(e.ID)
			continue
		}
		c.files.Set(e.Path, f)
		if e.New {
			c.news.Set(e.Path, f)
		}
		if e.Link != "" && e.New && c.file(e.Link) == nil {
			f.alias, f.base.Nlink = e.Link, 2
			c.files.Set(e.Link, f)
			c.news.Set(e.Link, f)
		}
		c.dirtied(f)
		if e.ID > c.nextID {
			c.nextID = e.ID
		}
	}
	data, err := os.ReadDir(c.dataDir)
	if err != nil {
		return providers.E(providers.Unknown, op, err)
	}
	for _, e := range data {
		id, err := strconv.ParseUint(e.Name(), 10, 64)
		if err != nil || !keep[id] {
			os.Remove(filepath.Join(c.dataDir, e.Name()))
		}
	}
	return nil
}

// oldJournal reads the journal directory of earlier versions (a JSON
// record per dirty file), moves its records into the journal and removes
// it.
func (c *Cache) oldJournal() []journalEntry {
	dir := filepath.Join(c.opts.Dir, "journal")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []journalEntry
	for _, d := range ents {
		name := d.Name()
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		var e journalEntry
		if err == nil {
			err = json.Unmarshal(b, &e)
		}
		if err != nil || e.Path == "" || e.ID == 0 {
			c.log.Error("unreadable journal record of an earlier version; left in place", "file", name, "err", err)
			continue
		}
		if err := c.jnl.put(e); err != nil {
			c.log.Error("journal record of an earlier version not moved; left in place", "file", name, "err", err)
			continue
		}
		os.Remove(filepath.Join(dir, name))
		out = append(out, e)
	}
	os.Remove(dir) // only when empty
	return out
}
