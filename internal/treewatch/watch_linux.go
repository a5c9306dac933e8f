//go:build linux

package treewatch

import (
	"context"
	"errors"
	"os"
	"path"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask is what Watch asks inotify for, on every directory.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_ATTRIB |
	unix.IN_CLOSE_WRITE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF |
	unix.IN_MOVE_SELF | unix.IN_DONT_FOLLOW | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// Batching: Watch waits coalesce for more events before it reports what
// it has, and reports a steady trickle at least every maxDelay. While a
// batch is open it lets events gather for gather after each read, so that
// a stream of changes (an untar, a loop of creates, each a few events) is
// taken in a few large reads rather than a wake-up per event, which would
// take CPU from the writer that makes them.
const (
	coalesce = 10 * time.Millisecond
	maxDelay = Latency - coalesce
	gather   = time.Millisecond
)

// Watch watches every directory under root with inotify and reports each
// change as opts says: a file written, a name made, removed or renamed,
// attributes set; a directory that appears is watched and reported as a
// whole. A burst of changes (a build, an untar) goes out as one batch. It
// returns nil when ctx ends or root goes away (reported as all changed),
// else the error that stopped it.
func Watch(ctx context.Context, root string, opts Options) error {
	if opts.Limit <= 0 {
		opts.Limit = DefaultLimit
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// A pipe wakes the poll below when ctx ends.
	var stop [2]int
	if err := unix.Pipe2(stop[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return err
	}
	defer unix.Close(stop[0])
	defer unix.Close(stop[1])
	done := make(chan struct{})
	var waker sync.WaitGroup
	waker.Add(1)
	go func() {
		defer waker.Done()
		select {
		case <-ctx.Done():
			unix.Write(stop[1], []byte{0})
		case <-done:
		}
	}()
	// The waker is gone before the pipe is closed: its descriptor number
	// may be reused at once.
	defer waker.Wait()
	defer close(done)
	w := &watcher{fd: fd, root: root, opts: opts, dirs: map[int32]string{}, wds: map[string]int32{}, seen: map[string]bool{}}
	if !w.add("") {
		return &os.PathError{Op: "watch", Path: root, Err: unix.ENOTDIR}
	}
	w.addTree("")
	w.flush()
	if opts.Ready != nil {
		opts.Ready()
	}
	buf := make([]byte, 64<<10)
	var batchStart time.Time // when the batch not yet reported began
	for {
		wait := -1
		if !batchStart.IsZero() {
			wait = int(max(0, min(coalesce, maxDelay-time.Since(batchStart))) / time.Millisecond)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(stop[0]), Events: unix.POLLIN}}
		_, err := unix.Poll(fds, wait)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if fds[1].Revents != 0 {
			return nil
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			// Quiet for coalesce, or the batch is maxDelay old.
			w.flush()
			batchStart = time.Time{}
			continue
		}
		gone, err := w.read(buf)
		if err != nil {
			return err
		}
		if gone {
			w.flush()
			return nil
		}
		if batchStart.IsZero() && (len(w.batch) > 0 || w.all) {
			batchStart = time.Now()
		}
		if !batchStart.IsZero() && time.Since(batchStart) >= maxDelay {
			w.flush()
			batchStart = time.Time{}
		}
		if !batchStart.IsZero() {
			// A sleep, not a poll: the goroutine holds no thread or P
			// meanwhile. A stop during it is seen by the poll after.
			time.Sleep(gather)
		}
	}
}

type watcher struct {
	fd   int
	root string
	opts Options
	dirs map[int32]string // watch descriptor -> directory, relative to root
	wds  map[string]int32 // the reverse
	full bool             // the limit reached or the kernel's hit

	batch []string
	all   bool
	seen  map[string]bool // paths already in batch
}

// read handles the events waiting; true when the root itself went away.
func (w *watcher) read(buf []byte) (bool, error) {
	n, err := unix.Read(w.fd, buf)
	if err == unix.EINTR || err == unix.EAGAIN {
		return false, nil
	}
	if err != nil {
		return false, err
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
			return true, nil
		}
	}
	return false, nil
}

// flush reports the batch, if any.
func (w *watcher) flush() {
	if len(w.batch) == 0 && !w.all {
		return
	}
	if w.opts.Changed != nil {
		w.opts.Changed(w.batch, w.all)
	}
	w.batch, w.all = nil, false
	clear(w.seen)
}

func (w *watcher) report(rel string) {
	if !w.seen[rel] {
		w.seen[rel] = true
		w.batch = append(w.batch, rel)
	}
}

func (w *watcher) overflow() { w.all = true }

// add watches the directory rel; false when it is not one (or is gone).
func (w *watcher) add(rel string) bool {
	if len(w.wds) >= w.opts.Limit {
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
	if name != "" && w.opts.Skip != nil && w.opts.Skip(name) {
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
