//go:build linux

package agent

import (
	"bufio"
	"errors"
	"io"
	"os"
	"path"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxWatches bounds the directories one WatchTree watches; past it the
// rest of the tree goes unwatched and an overflow record says so.
const maxWatches = 100000

// watchMask is what WatchTree asks inotify for, on every directory.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_ATTRIB |
	unix.IN_CLOSE_WRITE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF |
	unix.IN_MOVE_SELF | unix.IN_DONT_FOLLOW | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// WatchTree watches every directory under root with inotify and writes a
// record to out for each change, flushed as each batch of events is read:
// a ready record once the tree is watched, then a path record per changed
// name (a file written, a name made, removed or renamed, attributes set; a
// directory that appears is watched and reported as a whole), and an
// overflow record when events were lost or the tree outgrew maxWatches.
// Names of boxfs's own temporary files (".boxfs-tmp-*") are not reported.
// It returns when root goes away or out fails.
func WatchTree(root string, out io.Writer) error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	w := &watcher{fd: fd, root: root, dirs: map[int32]string{}, wds: map[string]int32{}, out: bufio.NewWriter(out)}
	if !w.add("") {
		return &os.PathError{Op: "watch", Path: root, Err: unix.ENOTDIR}
	}
	w.addTree("")
	w.record(watchReady, "")
	if err := w.out.Flush(); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	w.seen = map[string]bool{}
	var batchStart time.Time
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if ev.Len > 0 {
				b := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				name = strings.TrimRight(string(b), "\x00")
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if w.event(ev.Wd, ev.Mask, name) {
				w.out.Flush()
				return nil // the root went away
			}
		}
		// A burst of changes (a build, an untar, the host's own writes
		// coming back) goes out as one batch: wait a moment for more.
		// A steady trickle is still sent every watchMaxDelay.
		if batchStart.IsZero() {
			batchStart = time.Now()
		}
		if time.Since(batchStart) < watchMaxDelay {
			if more, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(watchCoalesce/time.Millisecond)); more > 0 {
				continue
			}
		}
		batchStart = time.Time{}
		w.seen = map[string]bool{}
		if err := w.out.Flush(); err != nil {
			return err
		}
	}
}

// watchCoalesce is how long WatchTree waits for more events before it
// sends what it has.
const (
	watchCoalesce = 10 * time.Millisecond
	watchMaxDelay = 50 * time.Millisecond
)

type watcher struct {
	fd   int
	root string
	dirs map[int32]string // watch descriptor -> directory, relative to root
	wds  map[string]int32 // the reverse
	full bool             // maxWatches reached or the kernel's limit hit
	out  *bufio.Writer
	seen map[string]bool // paths already reported in this batch
}

func (w *watcher) record(typ byte, rel string) {
	w.out.WriteByte(typ)
	w.out.WriteString(rel)
	w.out.WriteByte(0)
}

func (w *watcher) report(rel string) {
	if !w.seen[rel] {
		w.seen[rel] = true
		w.record(watchPath, rel)
	}
}

func (w *watcher) overflow() {
	if !w.seen["\x00overflow"] {
		w.seen["\x00overflow"] = true
		w.record(watchOverflow, "")
	}
}

// add watches the directory rel; false when it is not one (or is gone).
func (w *watcher) add(rel string) bool {
	if len(w.wds) >= maxWatches {
		w.full = true
		w.overflow()
		return false
	}
	wd, err := unix.InotifyAddWatch(w.fd, path.Join(w.root, rel), watchMask)
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			w.full = true
			w.overflow()
		}
		return false
	}
	if old, ok := w.dirs[int32(wd)]; ok && old != rel {
		delete(w.wds, old)
	}
	w.dirs[int32(wd)], w.wds[rel] = rel, int32(wd)
	return true
}

// addTree watches every directory below rel (rel itself is watched).
func (w *watcher) addTree(rel string) {
	stack := []string{rel}
	for len(stack) > 0 && !w.full {
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		ents, err := os.ReadDir(path.Join(w.root, dir))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			sub := joinRel(dir, e.Name())
			if w.add(sub) {
				stack = append(stack, sub)
			}
		}
	}
}

// forget drops the watches of rel and below (a directory moved away).
func (w *watcher) forget(rel string) {
	for d, wd := range w.wds {
		if d == rel || strings.HasPrefix(d, rel+"/") {
			unix.InotifyRmWatch(w.fd, uint32(wd))
			delete(w.wds, d)
			delete(w.dirs, wd)
		}
	}
}

// event handles one inotify event; true when the root itself went away.
func (w *watcher) event(wd int32, mask uint32, name string) bool {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		w.overflow()
		return false
	}
	dir, ok := w.dirs[wd]
	if !ok {
		return false
	}
	if mask&unix.IN_IGNORED != 0 {
		delete(w.dirs, wd)
		if w.wds[dir] == wd {
			delete(w.wds, dir)
		}
		return dir == ""
	}
	if strings.HasPrefix(name, ".boxfs-tmp-") {
		return false
	}
	if name == "" {
		// The directory itself: its attributes, or it went away (its
		// parent's watch reports that too).
		if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 && dir == "" {
			w.overflow()
			return true
		}
		if mask&unix.IN_ATTRIB != 0 {
			w.report(dir)
		}
		return false
	}
	rel := joinRel(dir, name)
	if mask&unix.IN_ISDIR != 0 {
		switch {
		case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			if w.add(rel) {
				w.addTree(rel)
			}
		case mask&(unix.IN_MOVED_FROM|unix.IN_DELETE) != 0:
			w.forget(rel)
		}
	}
	w.report(rel)
	return false
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}
