package fs

import (
	"os"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/boxfs/boxfs/providers"
)

// The permission model. The mount asks the kernel to check every request
// against the attributes the namespace reports (default_permissions), so
// what a user may do is what the modes and owners say, as on a disk:
//
//   - the namespace's own files and directories belong to the user who
//     mounted; control files are 0600 (ctl, exec, cmds/N/ctl) or 0400
//     (err, facts.json, receipt.json, cmds/N/*), and with a group given at
//     mount that group gets the owner's access too (0660, 0440);
//   - work/ shows the box's own owners and modes, and what another user
//     than the one who mounted makes there is made theirs in the box
//     (settle, in work_posix.go);
//   - on a mount by a user who is not root, the owner of the box's
//     workspace (the user the box acts as) is shown as the user who
//     mounted, and the other way round for chown: the box's files are
//     theirs to change, as they would be without the check.

// ownership is who the namespace's own files belong to.
type ownership struct {
	uid, gid uint32 // the user who mounted
	group    bool   // gid is the group given at mount: it shares the owner's access
	self     uint32 // the group of the user who mounted
}

func processOwnership() ownership {
	return ownership{uid: uint32(os.Geteuid()), gid: uint32(os.Getegid()), self: uint32(os.Getegid())}
}

// fill sets a's owner, and its mode from the owner's bits perm (the group
// gets the same bits when the mount gave one).
func (o ownership) fill(a *fuse.Attr, kind, perm uint32) {
	a.Uid, a.Gid = o.uid, o.gid
	if o.group {
		perm |= (perm & 0o700) >> 3
	}
	a.Mode = kind | perm
}

// idmap shows the box's own user as the user who mounted: on a mount by a
// user who is not root, whose requests the box serves as its own user.
type idmap struct {
	on        bool
	box, host fuse.Owner
}

// newIDMap maps box (the owner of the box's workspace) to the mounting
// user of o, when that user is not root and not box already.
func newIDMap(o ownership, box fuse.Owner) idmap {
	host := fuse.Owner{Uid: o.uid, Gid: o.gid}
	return idmap{on: o.uid != 0 && box != host, box: box, host: host}
}

// toHost turns ids the box reports into the ones shown.
func (m idmap) toHost(uid, gid uint32) (uint32, uint32) {
	if !m.on {
		return uid, gid
	}
	if uid == m.box.Uid {
		uid = m.host.Uid
	}
	if gid == m.box.Gid {
		gid = m.host.Gid
	}
	return uid, gid
}

// toBox turns ids a request names (chown, a new file's owner) into the
// box's; -1 stays -1.
func (m idmap) toBox(uid, gid int) (int, int) {
	if !m.on {
		return uid, gid
	}
	if uid >= 0 && uint32(uid) == m.host.Uid {
		uid = int(m.box.Uid)
	}
	if gid >= 0 && uint32(gid) == m.host.Gid {
		gid = int(m.box.Gid)
	}
	return uid, gid
}

// ids returns the box's id map, learned from its workspace's owner.
func (v *boxView) ids() idmap {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.idmap
}

// learnOwner records the owner of the box's workspace, from its attributes.
func (v *boxView) learnOwner(fi providers.FileInfo) {
	m := newIDMap(v.fs.own, fuse.Owner{Uid: fi.UID, Gid: fi.GID})
	v.mu.Lock()
	v.idmap = m
	v.mu.Unlock()
}

// fillAttr renders a box file's attributes for the kernel, its owner as
// the id map shows it.
func (v *boxView) fillAttr(a *fuse.Attr, fi providers.FileInfo, ino uint64) {
	fillAttr(a, fi, ino)
	a.Uid, a.Gid = v.ids().toHost(a.Uid, a.Gid)
	a.Rdev = fuseDev(fi.Rdev)
}

// chownIDs turns a setattr's uid and gid (each -1 when not asked) into the
// box's.
func (v *boxView) chownIDs(in *fuse.SetAttrIn) (uid, gid int, ok bool) {
	u, uok := in.GetUID()
	g, gok := in.GetGID()
	if !uok && !gok {
		return -1, -1, false
	}
	uid, gid = -1, -1
	if uok {
		uid = int(u)
	}
	if gok {
		gid = int(g)
	}
	uid, gid = v.ids().toBox(uid, gid)
	return uid, gid, true
}
