package archiltest

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Shared mode: every container mounts the disk shared, and a client may
// change a file or directory (write, create, rename, delete) only where it
// has ownership: a path it checked out, or below one; or a directory it
// made (mkdir in a directory no one owns gives the new one to its maker).
// The fake cannot stop a command's system calls, so it checks afterwards:
// it compares the disk before and after the command, and a change no
// checkout of a container running meanwhile covers, nor an object call,
// nor a directory made meanwhile, is refused: the call answers 403 with
// the paths, and Violations lists them.

// Violation is a command that changed paths its container had not
// checked out.
type Violation struct {
	Disk    string
	Command string
	Paths   []string
}

// Violations returns the refused commands so far.
func (s *Server) Violations() []Violation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.violations)
}

// fileState is what tells a change of one path.
type fileState struct {
	dir   bool
	ino   uint64
	ctime int64
	size  int64
}

// snapshot records every path under dir but the fake's own temporary
// files. A directory's own times are left out: what changes in it shows
// as its entries.
func snapshot(dir string) map[string]fileState {
	out := map[string]fileState{}
	filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		if strings.HasPrefix(de.Name(), ".archiltest-") {
			return nil
		}
		fi, err := de.Info()
		if err != nil {
			return nil
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, dir+string(filepath.Separator)))
		st := fileState{dir: de.IsDir()}
		if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
			st.ino = sys.Ino
			if !st.dir {
				st.ctime = sys.Ctim.Nano()
				st.size = sys.Size
			}
		}
		out[rel] = st
		return nil
	})
	return out
}

// history returns the paths a container checked out while it ran.
func (s *Server) history(client string) []string {
	b, err := os.ReadFile(filepath.Join(s.state, "hist", client))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// noteObjectWrite tells every running container of disk that the object
// API changed key.
func (s *Server) noteObjectWrite(disk, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.running {
		if r.disk == disk {
			r.s3 = append(r.s3, key)
		}
	}
}

// unowned returns the paths that changed between ru's before and after
// that nothing covers: a checkout of this container or of another that
// ran meanwhile (a path or one above it), an object written or deleted
// meanwhile, or a directory made by a container running meanwhile (the
// path or one above it: one that did not exist when this container or
// one still running began, or that one that ended meanwhile made). It
// notes the directories made meanwhile in ru.made.
func (s *Server) unowned(ru *run, after map[string]fileState) []string {
	before := ru.before
	held := s.history(ru.client)
	s.mu.Lock()
	held = append(held, ru.others...)
	objects := slices.Clone(ru.s3)
	starts := []map[string]fileState{before}
	var live []string
	for c, r := range s.running {
		if c != ru.client && r.disk == ru.disk {
			live = append(live, c)
			if r.before != nil {
				starts = append(starts, r.before)
			}
		}
	}
	s.mu.Unlock()
	for _, c := range live {
		held = append(held, s.history(c)...)
	}
	made := func(q string) bool {
		st, ok := after[q]
		if !ok || !st.dir {
			return false
		}
		for _, b := range starts {
			if was, ok := b[q]; !ok || !was.dir || was.ino != st.ino {
				return true
			}
		}
		return false
	}
	for p, st := range after {
		if b, ok := before[p]; st.dir && (!ok || !b.dir || b.ino != st.ino) {
			ru.made = append(ru.made, p)
		}
	}
	covered := func(p string) bool {
		if slices.Contains(objects, p) {
			return true
		}
		for q := p; q != "."; q = filepath.ToSlash(filepath.Dir(q)) {
			if slices.Contains(held, q) || made(q) {
				return true
			}
		}
		return false
	}
	var out []string
	for p, b := range before {
		a, ok := after[p]
		changed := !ok || a.dir != b.dir || a.ino != b.ino || a.ctime != b.ctime || a.size != b.size
		if changed && !covered(p) {
			out = append(out, p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok && !covered(p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
