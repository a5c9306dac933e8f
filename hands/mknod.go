package hands

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/boxfs/boxfs/providers"
)

var (
	_ providers.Mknoder = (*Hands)(nil)
	_ providers.Mknoder = (*scripts)(nil)
)

// Mknod makes name a named pipe, socket or device (see
// providers.Mknoder). Every path serves it: the agent and a box with its
// own Mknoder (the local provider) in one call, any other path with one
// exec of a fixed script (mkfifo, mknod; a socket with python3 or perl,
// Unsupported in a box with neither).
func (h *Hands) Mknod(ctx context.Context, name string, mode providers.FileMode, dev uint64) error {
	if mk, ok := h.files.(providers.Mknoder); ok {
		return mk.Mknod(ctx, name, mode, dev)
	}
	return h.sh.Mknod(ctx, name, mode, dev)
}

// specialKind is the letter scriptMknod takes for mode's kind, or "".
func specialKind(mode providers.FileMode) string {
	switch {
	case mode&fs.ModeNamedPipe != 0:
		return "p"
	case mode&fs.ModeSocket != 0:
		return "s"
	case mode&fs.ModeCharDevice != 0 && mode&fs.ModeDevice != 0:
		return "c"
	case mode&fs.ModeDevice != 0:
		return "b"
	}
	return ""
}

// Mknod makes a named pipe, socket or device with one exec, with mode's
// permission bits exactly (a chmod after: mknod -m takes no set-ID or
// sticky bits).
func (s *scripts) Mknod(ctx context.Context, name string, mode providers.FileMode, dev uint64) error {
	const op = "hands.Mknod"
	kind := specialKind(mode)
	if kind == "" {
		return providers.Errorf(providers.Invalid, op, "mode %v is not a special file's", mode).WithBox(s.box.ID()).WithPath(name)
	}
	perm := strconv.FormatUint(uint64(providers.UnixMode(mode)&0o7777), 8)
	major := strconv.FormatUint(uint64(providers.DevMajor(dev)), 10)
	minor := strconv.FormatUint(uint64(providers.DevMinor(dev)), 10)
	return s.simple(ctx, op, name, scriptMknod, perm, kind, major, minor)
}

// scriptMknod makes PATH of kind KIND (p, s, c or b) with mode PERM:
// PATH PERM KIND MAJOR MINOR. mknod(1) of a device fails where the box
// lacks CAP_MKNOD, which is EPERM once the checks before it passed. A
// socket is made by python3 (os.mknod, its errno as the exit status) or
// perl (bind in the directory, so a long path fits sockaddr_un); a box
// with neither lacks the tool (exit 127: Unsupported).
const scriptMknod = `p=$1
par "$p"
has "$p" && e 17
canw "$d"
case $3 in
p) mkfifo -m 600 -- "$p" || { nospc "$d"; exit 1; } ;;
c|b) mknod -m 600 -- "$p" "$3" "$4" "$5" || { nospc "$d"; e 1; } ;;
s)
	if command -v python3 >/dev/null 2>&1; then
		python3 -c 'import os, stat, sys
try:
    os.mknod(sys.argv[1], stat.S_IFSOCK | 0o600)
except OSError as x:
    sys.exit(64 + x.errno)' "$p" || exit $?
	elif command -v perl >/dev/null 2>&1; then
		(cd -- "$d" && perl -MSocket -e 'socket(my $s, PF_UNIX, SOCK_STREAM, 0) or exit(64 + $!);
bind($s, pack_sockaddr_un($ARGV[0])) or exit(64 + $!)' -- "$b") || exit $?
	else
		exit 127
	fi
	;;
*) e 22 ;;
esac
chmod "$2" "$p" || exit 1
`

// devNumbers fills in the device numbers of the device nodes of a listing
// of dir, which GNU find's -printf cannot print: one more exec, only for a
// listing that has any.
func (s *scripts) devNumbers(ctx context.Context, op, dir string, infos []providers.FileInfo) error {
	var args []string
	var at []int
	for i, fi := range infos {
		if fi.Mode&fs.ModeDevice != 0 && fi.Rdev == 0 {
			args = append(args, path.Join(dir, fi.Name))
			at = append(at, i)
		}
	}
	if len(args) == 0 {
		return nil
	}
	out, err := s.run(ctx, op, dir, scriptDevNumbers, nil, nil, args...)
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(args) {
		return providers.Errorf(providers.Unknown, op, "device numbers: %d lines for %d nodes", len(lines), len(args)).WithBox(s.box.ID()).WithPath(dir)
	}
	for j, line := range lines {
		var major, minor uint32
		if _, err := fmt.Sscanf(line, "%x %x", &major, &minor); err != nil {
			continue // gone or replaced since the listing: its stat will tell
		}
		infos[at[j]].Rdev = providers.Mkdev(major, minor)
	}
	return nil
}

// scriptDevNumbers prints "major minor" in hex for each PATH, one line
// each ("-" for one that cannot be stated).
const scriptDevNumbers = `for f; do
	stat -c '%t %T' -- "$f" 2>/dev/null || echo -
done
`
