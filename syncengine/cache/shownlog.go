package cache

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// The times the host reported of the files it wrote, kept across mounts.
// Cache.shown keeps, for a file whose push the box answered, the times the
// host reported of it while it was dirty, for as long as the box holds the
// file the push made. A later process (a remount, a restarted daemon) has
// no such file in memory and would report the box's own times, those of
// the push: in write=behind a second or more after the host's, so git,
// whose index holds the times reported before, takes every such file for
// changed and reads it again at the next git status. So each push's answer
// is appended, with the times shown, to a file (Options.ShownPath), which
// the next process loads: one line per push and a "drop" line per record
// let go (a file removed, renamed over or changed in the box), rewritten
// with the live records alone when it holds well more lines than them.
const shownName = "shown.log"

// maxShown is the most records kept (about 300 bytes each on disk and in
// memory): past it, files pushed later report the box's times after a
// remount, as without the log.
var maxShown = 1 << 17

// shownRec is the box's file a push made (identified as Cache.shown does:
// inode, device, size and modification time; and its change and access
// times) and the times the host reported of it.
type shownRec struct {
	Path     string    `json:"p"`
	Drop     bool      `json:"drop,omitempty"`
	Ino      uint64    `json:"ino,omitempty"`
	Dev      uint64    `json:"dev,omitempty"`
	Size     int64     `json:"size,omitempty"`
	BoxMtime time.Time `json:"bm,omitzero"`
	BoxCtime time.Time `json:"bc,omitzero"`
	BoxAtime time.Time `json:"ba,omitzero"`
	Mtime    time.Time `json:"m,omitzero"`
	Ctime    time.Time `json:"c,omitzero"`
	Atime    time.Time `json:"a,omitzero"`
}

// showTimes returns fi, the box's attributes of a file, with the times
// the host reported (mtime, ctime, atime) when fi is box, the file a push
// made, with its content unchanged since (same inode, size and
// modification time). A change of attributes since (chmod, chown, a link)
// moved the change time in the box: that one is the box's; so is the
// access time once the box read the file.
func showTimes(fi, box providers.FileInfo, mtime, ctime, atime time.Time) (providers.FileInfo, bool) {
	if ctime.IsZero() || box.Ctime.IsZero() || fi.Ino != box.Ino || fi.Dev != box.Dev ||
		!fi.Mtime.Equal(box.Mtime) || fi.Size != box.Size {
		return fi, false
	}
	fi.Mtime = mtime
	if fi.Ctime.Equal(box.Ctime) {
		fi.Ctime = ctime
	}
	if fi.Atime.Equal(box.Atime) && !atime.IsZero() {
		fi.Atime = atime
	}
	return fi, true
}

// shownLog is the file of shown times and its live records. Its lock is
// taken after Cache.mu where both are held.
type shownLog struct {
	path string

	mu    sync.Mutex
	f     *os.File // open for appending; nil after a failure
	recs  map[string]shownRec
	lines int // lines in the file
}

// openShownLog loads the records at path (a missing or damaged file is an
// empty log: the records only spare git a re-read), and rewrites the file
// with the live ones.
func openShownLog(path string) *shownLog {
	l := &shownLog{path: path, recs: map[string]shownRec{}}
	os.MkdirAll(filepath.Dir(path), 0o700) // a failure shows at the rewrite: no log
	b, _ := os.ReadFile(path)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r shownRec
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.Path == "" {
			continue
		}
		if r.Drop {
			delete(l.recs, r.Path)
			continue
		}
		if _, ok := l.recs[r.Path]; ok || len(l.recs) < maxShown {
			l.recs[r.Path] = r
		}
	}
	l.rewriteLocked()
	return l
}

// rewriteLocked replaces the file with the live records and opens it for
// appending. l.mu held (or l not shared yet).
func (l *shownLog) rewriteLocked() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	var buf bytes.Buffer
	for _, r := range l.recs {
		line, _ := json.Marshal(r)
		buf.Write(line)
		buf.WriteByte('\n')
	}
	tmp := l.path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
		return
	}
	if err := os.Rename(tmp, l.path); err != nil {
		os.Remove(tmp)
		return
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	l.f, l.lines = f, len(l.recs)
}

// appendLocked writes r's line, and rewrites the file once it holds well
// more lines than live records. l.mu held.
func (l *shownLog) appendLocked(r shownRec) {
	if l.f == nil {
		return
	}
	line, _ := json.Marshal(r)
	if _, err := l.f.Write(append(line, '\n')); err != nil {
		l.f.Close()
		l.f = nil
		return
	}
	l.lines++
	if l.lines > 2*len(l.recs)+1024 {
		l.rewriteLocked()
	}
}

// put records what a push of rel made in the box (fi) and the times the
// host reported of it.
func (l *shownLog) put(rel string, fi providers.FileInfo, mtime, ctime, atime time.Time) {
	if l == nil || ctime.IsZero() || fi.Ctime.IsZero() || !fi.IsRegular() {
		return
	}
	r := shownRec{Path: rel, Ino: fi.Ino, Dev: fi.Dev, Size: fi.Size,
		BoxMtime: fi.Mtime, BoxCtime: fi.Ctime, BoxAtime: fi.Atime, Mtime: mtime, Ctime: ctime, Atime: atime}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.recs[rel]; !ok && len(l.recs) >= maxShown {
		return
	}
	l.recs[rel] = r
	l.appendLocked(r)
}

// show returns fi, the box's attributes of rel, with the times a record
// keeps of the push that made it, if fi is still that file; a record of
// another file is dropped.
func (l *shownLog) show(rel string, fi providers.FileInfo) providers.FileInfo {
	if l == nil || !fi.IsRegular() {
		return fi
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.recs[rel]
	if !ok {
		return fi
	}
	box := providers.FileInfo{Ino: r.Ino, Dev: r.Dev, Size: r.Size, Mtime: r.BoxMtime, Ctime: r.BoxCtime, Atime: r.BoxAtime}
	out, same := showTimes(fi, box, r.Mtime, r.Ctime, r.Atime)
	if !same {
		delete(l.recs, rel)
		l.appendLocked(shownRec{Path: rel, Drop: true})
	}
	return out
}

// drop forgets the record of rel, a name the host removed.
func (l *shownLog) drop(rel string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.recs[rel]; ok {
		delete(l.recs, rel)
		l.appendLocked(shownRec{Path: rel, Drop: true})
	}
}

// move gives the record of oldrel, a file the host renamed, to newrel,
// and forgets the one of the file newrel replaced.
func (l *shownLog) move(oldrel, newrel string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.recs[oldrel]
	if _, had := l.recs[newrel]; had || ok {
		delete(l.recs, newrel)
		l.appendLocked(shownRec{Path: newrel, Drop: true})
	}
	if ok {
		delete(l.recs, oldrel)
		l.appendLocked(shownRec{Path: oldrel, Drop: true})
		r.Path = newrel
		l.recs[newrel] = r
		l.appendLocked(r)
	}
}

func (l *shownLog) close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
