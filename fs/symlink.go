package fs

import (
	"path"
	"strings"

	"github.com/boxfs/boxfs/providers"
)

// Symlinks says how the targets of absolute symbolic links in work/ read.
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
	// SymlinksKeep shows every target as the box has it.
	SymlinksKeep Symlinks = "keep"
)

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

// presentTarget returns how the target of the link at rel (under work/)
// reads, for a box whose workspace is the box path ws: an absolute target
// relative to the link's directory, within work/; a relative one as it
// is.
func presentTarget(rel, target, ws string) string {
	if !path.IsAbs(target) {
		return target
	}
	t, ws := path.Clean(target), path.Clean(ws)
	var in string // the target's path under work/
	switch {
	case t == ws:
		in = "."
	case strings.HasPrefix(t, ws+"/"):
		in = t[len(ws)+1:]
	default:
		in = strings.TrimPrefix(t, "/")
		if in == "" {
			in = "."
		}
	}
	dir := path.Dir(rel)
	ups := 0
	if dir != "." {
		ups = strings.Count(dir, "/") + 1
	}
	// From the link's directory up to work/, then down to the target.
	out := strings.Repeat("../", ups) + in
	if in == "." && ups > 0 {
		out = strings.TrimSuffix(strings.Repeat("../", ups), "/")
	}
	return out
}
