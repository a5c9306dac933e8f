package e2btest

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers/e2b/internal/envd/filesystem"
)

// watchEvent is one change a watcher saw, with envd's operations for it.
type watchEvent struct {
	path  string
	types []filesystem.EventType
}

// watcher watches a directory, or a tree, with inotify, reporting what
// fsnotify (which envd uses) would.
type watcher struct {
	f         *os.File
	recursive bool
	mu        sync.Mutex
	dirs      map[int]string // watch descriptor: directory
	events    chan watchEvent
	errs      chan error
	done      chan struct{}
	once      sync.Once
}

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE | unix.IN_DELETE_SELF |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_MOVE_SELF

func newWatcher(root string, recursive bool) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	w := &watcher{
		f: os.NewFile(uintptr(fd), "inotify"), recursive: recursive, dirs: map[int]string{},
		events: make(chan watchEvent, 1024), errs: make(chan error, 1), done: make(chan struct{}),
	}
	if err := w.add(root); err != nil {
		w.f.Close()
		return nil, err
	}
	go w.read()
	return w, nil
}

// add watches dir, and with recursive every directory under it.
func (w *watcher) add(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil
		}
		if !d.IsDir() {
			return nil
		}
		if !w.recursive && p != dir {
			return filepath.SkipDir
		}
		wd, err := unix.InotifyAddWatch(int(w.f.Fd()), p, watchMask)
		if err != nil {
			if p == dir {
				return err
			}
			return nil
		}
		w.mu.Lock()
		w.dirs[wd] = p
		w.mu.Unlock()
		return nil
	})
}

func (w *watcher) close() {
	w.once.Do(func() {
		close(w.done)
		w.f.Close()
	})
}

func (w *watcher) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			select {
			case <-w.done:
			default:
				w.errs <- err
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int(int32(binary.NativeEndian.Uint32(buf[off:])))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			l := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := string(trimNUL(buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+l]))
			off += unix.SizeofInotifyEvent + l
			if mask&unix.IN_Q_OVERFLOW != 0 {
				w.errs <- errors.New("inotify queue overflow")
				return
			}
			if !w.handle(wd, mask, name) {
				return
			}
		}
	}
}

// handle turns one inotify event into a watchEvent; false once the
// watcher is closed.
func (w *watcher) handle(wd int, mask uint32, name string) bool {
	w.mu.Lock()
	dir, ok := w.dirs[wd]
	if mask&unix.IN_IGNORED != 0 {
		delete(w.dirs, wd)
	}
	w.mu.Unlock()
	if !ok || mask&unix.IN_IGNORED != 0 {
		return true
	}
	p := dir
	if name != "" {
		p = filepath.Join(dir, name)
	}
	var types []filesystem.EventType
	if mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
		types = append(types, filesystem.EventType_EVENT_TYPE_CREATE)
		if mask&unix.IN_ISDIR != 0 && w.recursive {
			w.add(p)
		}
	}
	if mask&(unix.IN_MOVED_FROM|unix.IN_MOVE_SELF) != 0 {
		types = append(types, filesystem.EventType_EVENT_TYPE_RENAME)
	}
	if mask&unix.IN_ATTRIB != 0 {
		types = append(types, filesystem.EventType_EVENT_TYPE_CHMOD)
	}
	if mask&unix.IN_MODIFY != 0 {
		types = append(types, filesystem.EventType_EVENT_TYPE_WRITE)
	}
	if mask&(unix.IN_DELETE|unix.IN_DELETE_SELF) != 0 {
		types = append(types, filesystem.EventType_EVENT_TYPE_REMOVE)
	}
	if len(types) == 0 {
		return true
	}
	select {
	case w.events <- watchEvent{path: p, types: types}:
		return true
	case <-w.done:
		return false
	}
}

func trimNUL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}
