package fs

import (
	"path"
	"strings"

	"github.com/boxfs/boxfs/providers"
)

// Symlinks says how the targets of absolute symbolic links in work/ read.
// Relative targets that climb out of work/ are confined whatever it says
// (presentTarget).
type Symlinks string

const (
	// SymlinksAuto transforms them on boxes whose provider isolates the
	// box (its facts say an isolation other than none; an absent fact
	// transforms) and keeps them on the others (a local box's files are
	// the host's own).
	SymlinksAuto Symlinks = ""
	// SymlinksTransform shows an absolute target as a path relative to
	// the link, inside work/ (sshfs's transform_symlinks): the box's
	// workspace is work/, and anything else in the box is taken from
	// work/ as if it were the box's root. A host tool following the link
	// stays inside the mount, where a link to /etc is no way to the
	// host's /etc.
	SymlinksTransform Symlinks = "transform"
	// SymlinksKeep shows absolute targets as the box has them, and a
	// relative target that climbs above work/ as the absolute box path it
	// names there (never as a path into the mount).
	SymlinksKeep Symlinks = "keep"
)

// linkView returns how the target of the link n (at rel) is presented.
func (n *workNode) linkView() linkView {
	return linkView{transform: n.v.transformLinks(), shared: n.v.inos().shared(n.StableAttr().Ino)}
}

// transformLinks reports whether absolute targets in the box's work/ read
// transformed.
func (v *boxView) transformLinks() bool {
	switch v.fs.symlinks {
	case SymlinksTransform:
		return true
	case SymlinksKeep:
		return false
	}
	return v.b.Isolation() != providers.IsolationNone
}

// linkView says how one link's target is presented on the host.
type linkView struct {
	// transform: absolute targets, and relative ones that climb above
	// work/, read inside work/ as if work/ were the box's root
	// (SymlinksTransform). Without it they read as the box path they
	// name (SymlinksKeep: a local box's paths are the host's own).
	transform bool
	// shared: the link has several names (a hard link to a symlink, which
	// a box can make). The kernel resolves its target from whichever name
	// it came by, so its depth under work/ is not known: the target is
	// given without any leading "..".
	shared bool
}

// presentTarget returns how the target of the link at rel (under work/)
// reads, for a box whose workspace is the box path ws. A box never names,
// through a link it made, anything outside its own work/ (the mount's
// control files, another box, a host path), except where lv.transform is
// off: there an absolute target reads as it is.
//
//   - A relative target that only descends after its leading "..", and
//     whose ".." stay within work/ from the link's directory, reads as it
//     is: every such link inside work/ is kept.
//   - Any other relative target is resolved lexically against the link's
//     directory. One that lands within work/ reads as that place, from
//     the link's directory (a host tool following it then meets no ".."
//     after a name, which a link in the middle could turn upwards). One
//     that climbs above work/ names the box path ws/..., and reads as an
//     absolute target naming that path would.
//   - An absolute target, with lv.transform, reads as a path relative to
//     the link, inside work/: a target in the workspace leads to its
//     place there, anything else in the box to work/ as if it were the
//     box's root. Without lv.transform it reads as it is.
//
// Each presented target climbs at most to work/ from the link's directory
// and then only descends (through links presented by the same rule), so
// following it never leaves work/.
func presentTarget(rel, target, ws string, lv linkView) string {
	dir := path.Dir(rel)
	depth := 0
	if dir != "." {
		depth = strings.Count(dir, "/") + 1
	}
	if lv.shared {
		depth = 0 // up to the shallowest name's directory at most: none
	}
	if !path.IsAbs(target) {
		if ups, plain := leadingUps(target); plain && ups <= depth {
			return target
		}
		j := path.Join(dir, target) // under work/, unless it climbs above
		if j != ".." && !strings.HasPrefix(j, "../") {
			return down(depth, j)
		}
		// Above work/: the box path the link names there.
		if path.IsAbs(ws) {
			target = path.Join(ws, j)
		} else {
			target = path.Join("/", j) // the workspace is not known: its root
		}
		if !lv.transform && path.IsAbs(ws) && !within(target, ws) {
			return target
		}
	} else if !lv.transform {
		return target
	}
	return down(depth, inWork(target, ws))
}

// leadingUps counts the ".." at the start of the relative target t, and
// reports whether t is plain: no ".." after a name.
func leadingUps(t string) (ups int, plain bool) {
	named := false
	for _, e := range strings.Split(t, "/") {
		switch e {
		case "", ".":
		case "..":
			if named {
				return ups, false
			}
			ups++
		default:
			named = true
		}
	}
	return ups, true
}

// within reports whether the clean absolute path t is ws or below it.
func within(t, ws string) bool {
	ws = path.Clean(ws)
	return t == ws || strings.HasPrefix(t, ws+"/") || ws == "/"
}

// inWork returns the place under work/ ("." for work/ itself) that the
// absolute box path t reads as: its place in the workspace ws, else t
// taken from work/ as if work/ were the box's root.
func inWork(t, ws string) string {
	t, ws = path.Clean(t), path.Clean(ws)
	switch {
	case t == ws:
		return "."
	case strings.HasPrefix(t, ws+"/"):
		return t[len(ws)+1:]
	case ws == "/":
		return t[1:]
	}
	if in := strings.TrimPrefix(t, "/"); in != "" {
		return in
	}
	return "."
}

// down returns the path from a directory depth levels below work/ up to
// work/ and down to in (a clean path under work/, "." for work/).
func down(depth int, in string) string {
	ups := strings.Repeat("../", depth)
	if in == "." {
		if depth == 0 {
			return "."
		}
		return strings.TrimSuffix(ups, "/")
	}
	return ups + in
}
