package fs

import (
	"context"
	"strings"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/internal/guard"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine/cache"
)

// boxView is what the namespace keeps of one box: its directory node, its
// work/ node and the inode numbers of its work tree. It tells the kernel
// to drop what it holds of paths that changed in the box.
type boxView struct {
	fs *FS
	b  *boxes.Box

	dirMu sync.Mutex // guards dir: its node is made once
	dir   *boxDir

	mu       sync.Mutex
	workRoot *workNode // its work/ node
	inoTable *inoTable
	idmap    idmap // learned from the workspace's owner
}

// inos returns the inode numbers of the box's work tree, seeded by the
// box's provider and id (a declared box gets its own once made).
func (v *boxView) inos() *inoTable {
	info := v.b.Info()
	seed := info.Provider + "/" + info.ID
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.inoTable == nil || v.inoTable.seed != seed {
		v.inoTable = newInoTable(seed)
	}
	return v.inoTable
}

// forgetIno drops ino from the box's inode numbers, when they gave it.
func (v *boxView) forgetIno(ino uint64) {
	v.mu.Lock()
	t := v.inoTable
	v.mu.Unlock()
	if t != nil {
		t.forget(ino)
	}
}

// notifyBoxChanges tells the kernel to ask again about each changed path:
// its name in its directory (a name made, removed or replaced), its
// attributes and pages, and its directory's attributes. A directory the
// kernel knows keeps its name unless the box no longer has a directory
// there (asked of the box, off this goroutine): dropping the name of a
// directory that is still there would unhash it, and a process whose
// working directory it is would fail getcwd(2) (git does at start), while
// a new lookup would find the same node anyway. No lock is held.
func (v *boxView) notifyBoxChanges(rels []string) {
	if len(rels) == 0 || !v.fs.mounted() {
		return
	}
	var dirs []string
	for _, rel := range rels {
		n := v.findNode(rel)
		if n != nil {
			n.NotifyContent(0, 0)
		}
		if rel == "" {
			continue
		}
		dir, name := splitRel(rel)
		parent := v.findNode(dir)
		if parent == nil {
			continue
		}
		if n != nil && n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR {
			dirs = append(dirs, rel)
		} else {
			parent.NotifyEntry(name)
		}
		parent.NotifyContent(-1, 0)
	}
	if len(dirs) > 0 {
		guard.Go(func() { v.checkDirs(dirs) }, func(err error) { v.fs.log.Error("checking changed directories", "box", v.b.Name(), "err", err) })
	}
}

// checkDirs drops the names of the directories in rels that the box no
// longer has as directories (removed, or replaced by another kind).
func (v *boxView) checkDirs(rels []string) {
	ctx, cancel := context.WithTimeout(context.Background(), v.fs.m.Options().OpTimeout)
	defer cancel()
	_, c, err := v.b.Parts(ctx)
	if err != nil {
		return
	}
	for _, rel := range rels {
		fi, err := c.Lookup(ctx, rel)
		if err == nil && fi.IsDir() {
			continue
		}
		if err != nil && !providers.IsCode(err, providers.NotFound) {
			continue // unknown: the entry timeout still bounds what the kernel keeps
		}
		dir, name := splitRel(rel)
		if parent := v.findNode(dir); parent != nil {
			parent.NotifyEntry(name)
		}
	}
}

// notifyLinked drops the kernel's attributes of the other names of rel's
// box file, when it has hard links the cache knows, and with entries their
// names too.
func (v *boxView) notifyLinked(ctx context.Context, rel string, entries bool) {
	v.notifyNames(v.linked(ctx, rel), entries)
}

// linked returns the other names of rel's box file the cache knows.
func (v *boxView) linked(ctx context.Context, rel string) []string {
	_, c, err := v.b.Parts(ctx)
	if err != nil {
		return nil
	}
	return c.Linked(rel)
}

// notifyNames drops the kernel's attributes of the files at rels, and with
// entries their names too. Never entries from a request whose caller holds
// a directory lock (link(2) and unlink(2) hold the name's directory): the
// kernel would wait for that lock inside the notification.
func (v *boxView) notifyNames(rels []string, entries bool) {
	if len(rels) == 0 || !v.fs.mounted() {
		return
	}
	for _, p := range rels {
		n := v.findNode(p)
		if n == nil {
			continue
		}
		n.NotifyContent(-1, 0)
		if !entries {
			continue
		}
		// An O_APPEND write starts at the kernel's size of the file, which
		// only a LOOKUP or GETATTR renews; dropping the name makes the next
		// open of it look the name up again.
		dir, name := splitRel(p)
		if parent := v.findNode(dir); parent != nil {
			parent.NotifyEntry(name)
		}
	}
}

// findNode returns the kernel-known node of rel, if any, without asking the box.
func (v *boxView) findNode(rel string) *gofs.Inode {
	v.mu.Lock()
	root := v.workRoot
	v.mu.Unlock()
	if root == nil {
		return nil
	}
	n := root.EmbeddedInode()
	if rel == "" {
		return n
	}
	for _, seg := range strings.Split(rel, "/") {
		n = n.GetChild(seg)
		if n == nil {
			return nil
		}
	}
	return n
}

func splitRel(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

// notifyChanges drops the kernel's entries, attributes and pages for what
// changed in the box. No lock is held while the kernel is told.
func (v *boxView) notifyChanges(ch cache.Changes) {
	inos := v.inos()
	for _, rel := range ch.Removed {
		inos.remove(rel)
	}
	if !v.fs.mounted() {
		return
	}
	// Removed names first: the kernel takes a deleted name's file to have
	// no links left, which a changed name of the same hard link (below)
	// then asks again.
	for _, rel := range ch.Removed {
		dir, name := splitRel(rel)
		parent := v.findNode(dir)
		child := v.findNode(rel)
		if parent == nil {
			continue
		}
		if child != nil {
			parent.NotifyDelete(name, child)
		} else {
			parent.NotifyEntry(name)
		}
	}
	for _, rel := range ch.Changed {
		n := v.findNode(rel)
		if n == nil {
			continue
		}
		n.NotifyContent(0, 0)
		if n.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFDIR {
			// The kernel's size of the file changes only with a LOOKUP or
			// GETATTR answer, and a shell's >> (an O_APPEND open, no stat)
			// writes at that size: dropping the name makes the open look it
			// up again, so the append lands after what the box wrote.
			dir, name := splitRel(rel)
			if parent := v.findNode(dir); parent != nil {
				parent.NotifyEntry(name)
			}
		}
	}
	for _, rel := range ch.Added {
		dir, name := splitRel(rel)
		if parent := v.findNode(dir); parent != nil {
			parent.NotifyEntry(name)
		}
	}
	if ch.All {
		v.notifyAll()
	}
}

// notifyAll drops what the kernel holds of every known node of the work
// tree: the fallback when the box's changes could not be listed. Names of
// directories stay (see notifyBoxChanges): a directory gone from the box
// answers ENOENT at its next use and leaves its parent's listing.
func (v *boxView) notifyAll() {
	if !v.fs.mounted() {
		return
	}
	root := v.findNode("")
	if root == nil {
		return
	}
	var walk func(n *gofs.Inode)
	walk = func(n *gofs.Inode) {
		n.NotifyContent(0, 0)
		for name, ch := range n.Children() {
			if ch.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFDIR {
				n.NotifyEntry(name)
			}
			walk(ch)
		}
	}
	walk(root)
}
