package hands

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/hands/agent"
	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
)

// scripts serves every file operation with one exec of a fixed sh script.
type scripts struct {
	box       providers.Box
	exec      execFunc // box.Exec, telling Options.OnExec
	liveness  time.Duration
	noStdin   bool // the box's facts say Exec takes no stdin: GetFiles passes names as arguments
	maxAnswer int  // the most bytes one script's answer may hold; zero is agent.DefaultMaxListing
}

var (
	_ providers.Files          = (*scripts)(nil)
	_ providers.Walker         = (*scripts)(nil)
	_ providers.Archiver       = (*scripts)(nil)
	_ providers.LinkAttrSetter = (*scripts)(nil)
)

// errnoBase is added to an errno to make a script's exit status: 64+errno
// stays clear of the shell's own statuses (1, 2, 126, 127, 128+n).
const errnoBase = 64

// prelude is the fixed head of every script. It decodes escaped arguments
// (see shell.Escape) and defines the checks that recover errnos.
const prelude = decodeArgs + `
# e N: end with errno N
e() { exit $((64 + $1)); }
# walk D: D resolves to a searchable directory, else end with the errno path
# resolution gives (ENAMETOOLONG, ENOTDIR, ENOENT, EACCES).
walk() {
	r=${1#/}
	a=
	while [ -n "$r" ]; do
		c=${r%%/*}
		case $r in */*) r=${r#*/} ;; *) r= ;; esac
		[ ${#c} -le 255 ] || e 36
		a=$a/$c
		if [ -d "$a" ]; then
			[ -x "$a" ] || e 13
		elif [ -e "$a" ]; then
			e 20
		else
			unres "$a"
		fi
	done
}
# unres P: P does not resolve; end with the errno following it gives (a
# dangling symlink's target may fail with ENOTDIR, a loop with ELOOP). k
# counts the links followed in the whole resolution, as the kernel does.
k=0
unres() {
	u=$1
	while [ -L "$u" ]; do
		k=$((k + 1))
		[ $k -le 40 ] || e 40
		l=$(readlink -- "$u"; echo x)
		l=${l%?x}
		case $l in /*) ;; *) l=${u%/*}/$l ;; esac
		q=${l%/*}
		[ -n "$q" ] || q=/
		walk "$q"
		u=$l
	done
	e 2
}
# par P: P's parent resolves; sets d (the parent) and b (the base name)
par() {
	d=${1%/*}
	b=${1##*/}
	[ -n "$d" ] || d=/
	walk "$d"
	[ ${#b} -le 255 ] || e 36
}
# has P: P exists, a final symlink not followed
has() { [ -e "$1" ] || [ -L "$1" ]; }
# isdir P: P is a directory and not a symlink
isdir() { [ -d "$1" ] && ! [ -L "$1" ]; }
# canw D: D can be written
canw() {
	[ -w "$1" ] && return 0
	[ "$(id -u)" = 0 ] && e 30
	e 13
}
# nospc P: end with ENOSPC when P's file system is full
nospc() {
	df -Pk "$1" 2>/dev/null | {
		read -r _
		read -r _ _ _ f _
		[ "$f" = 0 ]
	} && e 28
	return 0
}
gnu() { stat --version >/dev/null 2>&1; }
# st FLAG P: "mode size atime mtime ctime ino nlink uid gid dev major
# minor", times s.ns, the device numbers in hex
st() {
	if gnu; then
		stat $1 -c '%f %s %.9X %.9Y %.9Z %i %h %u %g %d %t %T' -- "$2"
	else
		stat $1 -c '%f %s %X %Y %Z %i %h %u %g %d %t %T' -- "$2"
	fi
}
# mvT O N: rename O to N, N never taken as a directory to move into (GNU
# and busybox mv both have -T; busybox's refuses to replace a symlink to a
# directory, which is then removed first: not atomic, but the only way)
mvT() {
	mv -f -T -- "$1" "$2" && return 0
	[ -L "$2" ] && [ -d "$2" ] || return 1
	rm -f -- "$2" && mv -f -T -- "$1" "$2"
}
`

// The scripts, one per operation. Arguments are described above each.
const (
	// PATH L|P
	scriptStat = `p=$1
par "$p"
if [ "$2" = L ]; then
	[ -e "$p" ] || unres "$p"
	f=-L
else
	has "$p" || e 2
	f=
fi
st "$f" "$p" || exit 1
if [ -z "$f" ] && [ -L "$p" ]; then readlink -- "$p" || exit 1; fi
`
	// findFormat is one entry of a listing: 13 NUL-terminated fields.
	findFormat = `%m\0%y\0%s\0%A@\0%T@\0%C@\0%i\0%n\0%U\0%G\0%D\0%l\0`
	// DIR
	scriptReadDir = `p=$1
par "$p"
[ -e "$p" ] || unres "$p"
[ -d "$p" ] || e 20
[ -r "$p" ] || e 13
if find --version >/dev/null 2>&1; then
	exec find -H "$p" -mindepth 1 -maxdepth 1 -printf '` + findFormat + `%f\0'
fi
for f in "$p"/* "$p"/.[!.]* "$p"/..?*; do
	has "$f" || continue
	printf 'B\0%s\0' "$(st "" "$f")"
	if [ -L "$f" ]; then l=$(readlink -- "$f"; echo x); printf '%s' "${l%?x}"; fi
	printf '\0%s\0' "${f##*/}"
done
`
	// ROOT WALKENTRIES
	scriptWalk = `p=$1
par "$p"
[ -e "$p" ] || unres "$p"
[ -d "$p" ] || e 20
[ -r "$p" ] || e 13
if find --version >/dev/null 2>&1; then
	exec find -H "$p" -mindepth 1 -printf '` + findFormat + `%P\0'
fi
exec find "$p" -mindepth 1 -exec sh -c "$2" sh "$p" {} +
`
	// walkEntries prints listing records for a walk without GNU find (see
	// parseListing): ROOT FILE...
	walkEntries = `p=$1
shift
for f; do
	printf 'B\0%s\0' "$(stat -c '%f %s %X %Y %Z %i %h %u %g %d %t %T' -- "$f")"
	if [ -L "$f" ]; then l=$(readlink -- "$f"; echo x); printf '%s' "${l%?x}"; fi
	printf '\0%s\0' "${f#"$p"/}"
done
`
	// PATH; prints K, then the file
	scriptReadFile = `p=$1
par "$p"
[ -e "$p" ] || unres "$p"
[ -d "$p" ] && e 21
[ -r "$p" ] || e 13
printf K
exec cat -- "$p"
`
	// PATH OFF LEN
	scriptReadAt = `p=$1
par "$p"
[ -e "$p" ] || unres "$p"
[ -d "$p" ] && e 21
[ -r "$p" ] || e 13
tail -c +$(($2 + 1)) -- "$p" | head -c "$3"
`
	// PATH PERM; stdin is the content
	scriptWriteFile = `p=$1
par "$p"
isdir "$p" && e 21
canw "$d"
t=$d/.boxfs-w.$$
if ! cat > "$t"; then
	rm -f -- "$t"
	nospc "$d"
	exit 1
fi
m=$2
if [ -f "$p" ] && ! [ -L "$p" ]; then m=0$(stat -c %a -- "$p") || m=$2; fi
chmod "$m" "$t" || { rm -f -- "$t"; exit 1; }
mvT "$t" "$p" || { rm -f -- "$t"; exit 1; }
`
	// PATH OFF; stdin is the content
	scriptWriteAt = `p=$1
par "$p"
[ -e "$p" ] || unres "$p"
[ -d "$p" ] && e 21
[ -w "$p" ] || e 13
if dd --version >/dev/null 2>&1; then
	dd of="$p" bs=65536 seek="$2" oflag=seek_bytes conv=notrunc status=none || { nospc "$p"; exit 1; }
else
	dd of="$p" bs=1 seek="$2" conv=notrunc 2>/dev/null || { nospc "$p"; exit 1; }
fi
`
	// PATH PERM EXCL(1|0)
	scriptCreate = `p=$1
par "$p"
# "true >", not ": >": a failed redirection of a special built-in ends sh
if has "$p"; then
	[ "$3" = 1 ] && e 17
	[ -d "$p" ] && e 21
	if [ -e "$p" ]; then
		[ -w "$p" ] || e 13
		true > "$p" || exit 1
	else
		# a dangling symlink: open(2) makes its target, mode perm & ~umask
		true > "$p" || unres "$p"
		chmod "$(printf '%o' $(($2 & ~$(umask))))" "$p" || exit 1
	fi
else
	canw "$d"
	true > "$p" || { nospc "$d"; exit 1; }
	chmod "$2" "$p" || exit 1
fi
`
	// PATH PERM
	scriptMkdir = `p=$1
par "$p"
has "$p" && e 17
canw "$d"
mkdir -m "$2" -- "$p" || { nospc "$d"; exit 1; }
# mkdir(2) passes a set-group-ID parent's bit on, which -m's chmod took
if [ -g "$d" ]; then chmod g+s -- "$p" || exit 1; fi
`
	// PATH
	scriptRemove = `p=$1
par "$p"
has "$p" || e 2
isdir "$p" && e 21
canw "$d"
rm -f -- "$p" || exit 1
`
	// PATH
	scriptRmdir = `p=$1
par "$p"
has "$p" || e 2
isdir "$p" || e 20
[ "$p" = / ] && e 16
[ -z "$(ls -A -- "$p")" ] || e 39
canw "$d"
rmdir -- "$p" || exit 1
`
	// OLD NEW; the checks in the kernel's order (do_renameat2, vfs_rename)
	scriptRename = `o=$1
n=$2
par "$o"
od=$d
par "$n"
nd=$d
[ "$(stat -L -c %d -- "$od")" = "$(stat -L -c %d -- "$nd")" ] || e 18
has "$o" || e 2
[ "$o" = "$n" ] && exit 0
case $n/ in "$o"/*) e 22 ;; esac
case $o/ in "$n"/*) e 39 ;; esac
if ! [ -L "$o" ] && ! [ -L "$n" ] && [ "$o" -ef "$n" ]; then exit 0; fi
canw "$od"
canw "$nd"
if isdir "$o"; then
	if has "$n"; then
		isdir "$n" || e 20
		[ -z "$(ls -A -- "$n")" ] || e 39
	fi
elif has "$n"; then
	isdir "$n" && e 21
fi
mvT "$o" "$n" || exit 1
`
	// PATH MODE
	scriptChmod = `p=$1
par "$p"
[ -e "$p" ] || unres "$p"
chmod "$2" "$p" && exit 0
[ "$(id -u)" = 0 ] || e 1
exit 1
`
	// PATH OWNER (uid, :gid or uid:gid)
	scriptChown = `p=$1
par "$p"
[ -e "$p" ] || unres "$p"
[ -n "$2" ] || exit 0
chown "$2" -- "$p" && exit 0
[ "$(id -u)" = 0 ] || e 1
exit 1
`
	// PATH ATIME MTIME ("" leaves one; else @sec.ns)
	scriptUtimes = `p=$1
par "$p"
[ -e "$p" ] || unres "$p"
a=$2
m=$3
if ! touch --version >/dev/null 2>&1; then
	a=${a%.*}
	m=${m%.*}
fi
if [ -n "$a" ]; then touch -c -a -d "$a" -- "$p" || exit 1; fi
if [ -n "$m" ]; then touch -c -m -d "$m" -- "$p" || exit 1; fi
`
	// PATH OWNER: the owner of PATH itself, a final symlink not followed
	scriptLchown = `p=$1
par "$p"
has "$p" || e 2
[ -n "$2" ] || exit 0
chown -h "$2" -- "$p" && exit 0
[ "$(id -u)" = 0 ] || e 1
exit 1
`
	// PATH ATIME MTIME: the times of PATH itself, as scriptUtimes
	scriptLutimes = `p=$1
par "$p"
has "$p" || e 2
a=$2
m=$3
if ! touch --version >/dev/null 2>&1; then
	a=${a%.*}
	m=${m%.*}
fi
if [ -n "$a" ]; then touch -h -c -a -d "$a" -- "$p" || exit 1; fi
if [ -n "$m" ]; then touch -h -c -m -d "$m" -- "$p" || exit 1; fi
`
	// PATH SIZE
	scriptTruncate = `p=$1
par "$p"
[ -e "$p" ] || unres "$p"
[ -d "$p" ] && e 21
[ -w "$p" ] || e 13
truncate -s "$2" -- "$p" || { nospc "$p"; exit 1; }
`
	// TARGET PATH
	scriptSymlink = `t=$1
p=$2
par "$p"
has "$p" && e 17
canw "$d"
ln -s -- "$t" "$p" || { nospc "$d"; exit 1; }
`
	// PATH
	scriptReadlink = `p=$1
par "$p"
has "$p" || e 2
[ -L "$p" ] || e 22
readlink -- "$p"
`
	// OLD NEW; the checks in the kernel's order (do_linkat)
	scriptLink = `o=$1
n=$2
par "$o"
od=$d
has "$o" || e 2
par "$n"
has "$n" && e 17
[ "$(stat -L -c %d -- "$od")" = "$(stat -L -c %d -- "$d")" ] || e 18
isdir "$o" && e 1
canw "$d"
ln -- "$o" "$n" || { nospc "$d"; exit 1; }
`
	// PATH
	scriptStatfs = `p=$1
par "$p"
[ -e "$p" ] || unres "$p"
stat -f -c '%s %b %f %a %c %d %l' -- "$p"
`
	// PATH
	scriptFsync = `p=$1
par "$p"
[ -e "$p" ] || unres "$p"
sync -- "$p" 2>/dev/null || sync
`
	// PATH; prints K, then the tar
	scriptGetArchive = `p=$1
par "$p"
has "$p" || e 2
printf K
exec tar -C "$d" -cf - -- "$b"
`
	// ROOT; stdin is the NUL-separated paths; prints K, then the tar.
	// Only GNU tar reads NUL-separated names (-T, --null): without it the
	// box lacks a tool (126).
	scriptGetFiles = `p=$1
par "$p"
[ -e "$p" ] || unres "$p"
[ -d "$p" ] || e 20
case $(tar --version 2>/dev/null) in *"GNU tar"*) ;; *) echo "GNU tar needed" >&2; exit 126 ;; esac
printf K
exec tar -C "$p" --no-recursion --null -T - -cf -
`
	// DIR; stdin is the tar
	scriptPutArchive = `p=$1
par "$p"
[ -e "$p" ] || unres "$p"
[ -d "$p" ] || e 20
canw "$p"
exec tar -C "$p" -xf -
`
)

// decodeArgs is the fixed head of every script hands runs: it decodes the
// arguments shell.Escape escaped, in place.
const decodeArgs = `LC_ALL=C
export LC_ALL
i=$#
while [ "$i" -gt 0 ]; do
	a=$1
	shift
	case $a in *\\*) a=$(printf '%bx' "$a"); a=${a%x} ;; esac
	set -- "$@" "$a"
	i=$((i - 1))
done
`

// checkPath cleans a box-side path: absolute, no NUL byte, not over
// PATH_MAX.
func checkPath(op, box, p string) (string, error) {
	if p == "" || p[0] != '/' {
		return "", providers.Errorf(providers.Invalid, op, "path %q is not absolute", p).WithBox(box).WithPath(p)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", providers.PathError(op, box, p, syscall.EINVAL)
	}
	if len(p) >= 4096 {
		return "", providers.PathError(op, box, p, syscall.ENAMETOOLONG)
	}
	return path.Clean(p), nil
}

// run runs one script. stdout nil captures the output, the script's
// answer, which run returns: an answer over the cap (s.maxAnswer) stops the
// script and is TooLarge, and nothing of it is returned. A script whose
// output is no answer gets io.Discard, so that the cap never stops one
// half way through a change.
func (s *scripts) run(ctx context.Context, op, name, script string, stdin io.Reader, stdout io.Writer, args ...string) ([]byte, error) {
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out *answerWriter
	if stdout == nil {
		limit := s.maxAnswer
		if limit <= 0 {
			limit = agent.DefaultMaxListing
		}
		out = &answerWriter{max: limit, stop: cancel}
		stdout = out
	}
	argv := make([]string, 0, 4+len(args))
	argv = append(argv, "sh", "-c", prelude+script, "sh")
	for _, a := range args {
		argv = append(argv, shell.Escape(a))
	}
	act := newActivity()
	stderr := &limitedBuffer{max: 4096}
	req := providers.ExecRequest{
		Argv:   argv,
		Env:    map[string]string{"LC_ALL": "C"},
		Dir:    "/",
		Stdout: actWriter{stdout, act},
		Stderr: stderr,
	}
	if stdin != nil {
		req.Stdin = actReader{stdin, act}
	}
	p, err := startLive(ectx, s.exec, req, s.liveness, nil)
	if err != nil {
		return nil, s.wrap(op, name, err)
	}
	code, err := waitLive(ectx, cancel, p, act, s.liveness, nil)
	if out != nil && out.over.Load() {
		// The cap stopped the script: how it ended follows from that.
		return nil, providers.Errorf(providers.TooLarge, op, "the script's answer is over %d bytes", out.max).WithBox(s.box.ID()).WithPath(name)
	}
	if err != nil {
		return nil, s.wrap(op, name, err)
	}
	if out == nil {
		return nil, s.status(op, name, code, stderr.String())
	}
	return out.b, s.status(op, name, code, stderr.String())
}

// errAnswerOver is what a write past the cap of a script's answer fails
// with.
var errAnswerOver = errors.New("the script's answer is over its cap")

// answerWriter keeps a script's answer, up to max bytes. The write that
// would take it past max fails, sets over and calls stop (which ends the
// script): the box cannot make the daemon hold more than max bytes, nor
// grow the buffer past them.
type answerWriter struct {
	b    []byte
	max  int
	over atomic.Bool
	stop func()
}

func (w *answerWriter) Write(p []byte) (int, error) {
	if w.over.Load() {
		return 0, errAnswerOver
	}
	if len(p) > w.max-len(w.b) {
		w.over.Store(true)
		w.stop()
		return 0, errAnswerOver
	}
	if len(w.b)+len(p) > cap(w.b) {
		b := make([]byte, len(w.b), min(max(2*cap(w.b), len(w.b)+len(p), 512), w.max))
		copy(b, w.b)
		w.b = b
	}
	w.b = append(w.b, p...)
	return len(p), nil
}

func (s *scripts) wrap(op, name string, err error) error {
	e := providers.E(0, op, err).WithBox(s.box.ID())
	if name != "" {
		e.WithPath(name)
	}
	return e
}

// status turns a script's exit status into its error.
func (s *scripts) status(op, name string, code int, stderr string) error {
	switch {
	case code == 0:
		return nil
	case code > errnoBase && code < 126:
		return providers.PathError(op, s.box.ID(), name, syscall.Errno(code-errnoBase))
	case code == 126 || code == 127:
		return providers.Errorf(providers.Unsupported, op, "the box lacks a tool the script needs (exit %d): %s", code, strings.TrimSpace(stderr)).WithBox(s.box.ID()).WithPath(name)
	}
	return providers.Errorf(providers.Unknown, op, "script exited %d: %s", code, strings.TrimSpace(stderr)).WithBox(s.box.ID()).WithPath(name)
}

// Stat returns name's attributes, following symlinks.
func (s *scripts) Stat(ctx context.Context, name string) (providers.FileInfo, error) {
	return s.stat(ctx, "hands.Stat", name, "L")
}

// Lstat returns name's attributes, not following a final symlink.
func (s *scripts) Lstat(ctx context.Context, name string) (providers.FileInfo, error) {
	return s.stat(ctx, "hands.Lstat", name, "P")
}

func (s *scripts) stat(ctx context.Context, op, name, follow string) (providers.FileInfo, error) {
	p, err := checkPath(op, s.box.ID(), name)
	if err != nil {
		return providers.FileInfo{}, err
	}
	out, err := s.run(ctx, op, p, scriptStat, nil, nil, p, follow)
	if err != nil {
		return providers.FileInfo{}, err
	}
	line, rest, _ := bytes.Cut(out, []byte{'\n'})
	fi, err := parseStat(string(line))
	if err != nil {
		return providers.FileInfo{}, providers.E(providers.Unknown, op, err).WithBox(s.box.ID()).WithPath(p)
	}
	fi.Name = path.Base(p)
	if fi.IsSymlink() {
		fi.Target = string(bytes.TrimSuffix(rest, []byte{'\n'}))
	}
	return fi, nil
}

// parseStat reads "mode size atime mtime ctime ino nlink uid gid dev major
// minor" with the mode and the device numbers in hex and times as stat
// prints them.
func parseStat(line string) (providers.FileInfo, error) {
	f := strings.Fields(line)
	if len(f) != 12 {
		return providers.FileInfo{}, fmt.Errorf("stat printed %q, want 12 fields", line)
	}
	mode, err := strconv.ParseUint(f[0], 16, 32)
	if err != nil {
		return providers.FileInfo{}, fmt.Errorf("stat printed %q: %v", line, err)
	}
	major, err1 := strconv.ParseUint(f[10], 16, 32)
	minor, err2 := strconv.ParseUint(f[11], 16, 32)
	if err1 != nil || err2 != nil {
		return providers.FileInfo{}, fmt.Errorf("stat printed %q: bad device numbers", line)
	}
	fi, err := parseAttrs(uint32(mode), f[1:10], parseTime)
	if fi.Mode&fs.ModeDevice != 0 {
		fi.Rdev = providers.Mkdev(uint32(major), uint32(minor))
	}
	return fi, err
}

// parseAttrs reads "size atime mtime ctime ino nlink uid gid dev".
func parseAttrs(mode uint32, f []string, parseT func(string) (time.Time, error)) (providers.FileInfo, error) {
	var fi providers.FileInfo
	size, err1 := strconv.ParseInt(f[0], 10, 64)
	at, err2 := parseT(f[1])
	mt, err3 := parseT(f[2])
	ct, err4 := parseT(f[3])
	ino, err5 := strconv.ParseUint(f[4], 10, 64)
	nlink, err6 := strconv.ParseUint(f[5], 10, 32)
	uid, err7 := strconv.ParseUint(f[6], 10, 32)
	gid, err8 := strconv.ParseUint(f[7], 10, 32)
	dev, err9 := strconv.ParseUint(f[8], 10, 64)
	for _, err := range []error{err1, err2, err3, err4, err5, err6, err7, err8, err9} {
		if err != nil {
			return providers.FileInfo{}, fmt.Errorf("attributes %q: %v", f, err)
		}
	}
	fi.Mode = providers.FileModeFromUnix(mode)
	fi.Size = size
	fi.Atime, fi.Mtime, fi.Ctime = at, mt, ct
	fi.Ino, fi.Nlink, fi.UID, fi.GID, fi.Dev = ino, uint32(nlink), uint32(uid), uint32(gid), dev
	return fi, nil
}

// parseTime reads a time as GNU stat's %.9Y prints it: a signed decimal
// ("-1.500000000" is 1.5 s before the epoch), or whole seconds. Fraction
// digits past nine are dropped.
func parseTime(s string) (time.Time, error) {
	sec, ns, err := splitTime(s)
	if err != nil {
		return time.Time{}, err
	}
	if strings.HasPrefix(s, "-") {
		ns = -ns
	}
	return time.Unix(sec, ns), nil
}

// parseFindTime reads a time as GNU find's %T@ prints it: the seconds
// rounded down, then a positive fraction ("-2.5000000000" is 1.5 s before
// the epoch).
func parseFindTime(s string) (time.Time, error) {
	sec, ns, err := splitTime(s)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(sec, ns), nil
}

func splitTime(s string) (sec, ns int64, err error) {
	secs, frac, _ := strings.Cut(s, ".")
	if sec, err = strconv.ParseInt(secs, 10, 64); err != nil {
		return 0, 0, err
	}
	if frac != "" {
		if len(frac) > 9 {
			frac = frac[:9]
		}
		frac += strings.Repeat("0", 9-len(frac))
		if ns, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return 0, 0, err
		}
	}
	return sec, ns, nil
}

// findTypes maps find's %y letters to Linux file type bits.
var findTypes = map[string]uint32{
	"f": 0o100000, "d": 0o040000, "l": 0o120000, "p": 0o010000,
	"s": 0o140000, "c": 0o020000, "b": 0o060000,
}

// parseListing reads a listing: records of findFormat followed by a name
// (GNU find), or, where find has no -printf (busybox), records of four
// fields: "B", a stat line as st prints it, the target, the name.
func parseListing(out []byte) ([]providers.FileInfo, error) {
	fields := strings.Split(string(out), "\x00")
	if len(fields) > 0 && fields[len(fields)-1] == "" {
		fields = fields[:len(fields)-1]
	}
	var infos []providers.FileInfo
	for len(fields) > 0 {
		if fields[0] == "B" {
			if len(fields) < 4 {
				return nil, fmt.Errorf("listing ends in a short record: %q", fields)
			}
			fi, err := parseStat(fields[1])
			if err != nil {
				return nil, err
			}
			if fi.IsSymlink() {
				fi.Target = fields[2]
			}
			fi.Name = fields[3]
			infos = append(infos, fi)
			fields = fields[4:]
			continue
		}
		const n = 13
		if len(fields) < n {
			return nil, fmt.Errorf("listing ends in a short record: %q", fields)
		}
		f := fields[:n]
		fields = fields[n:]
		perm, err := strconv.ParseUint(f[0], 8, 32)
		if err != nil {
			return nil, fmt.Errorf("listing mode %q: %v", f[0], err)
		}
		typ, ok := findTypes[f[1]]
		if !ok {
			return nil, fmt.Errorf("listing type %q", f[1])
		}
		fi, err := parseAttrs(uint32(perm)|typ, f[2:11], parseFindTime)
		if err != nil {
			return nil, err
		}
		if fi.IsSymlink() {
			fi.Target = f[11]
		}
		fi.Name = f[12]
		infos = append(infos, fi)
	}
	return infos, nil
}

// ReadDir lists a directory with attributes, sorted by name.
func (s *scripts) ReadDir(ctx context.Context, name string) ([]providers.FileInfo, error) {
	const op = "hands.ReadDir"
	p, err := checkPath(op, s.box.ID(), name)
	if err != nil {
		return nil, err
	}
	out, err := s.run(ctx, op, p, scriptReadDir, nil, nil, p)
	if err != nil {
		return nil, err
	}
	infos, err := parseListing(out)
	if err != nil {
		return nil, providers.E(providers.Unknown, op, err).WithBox(s.box.ID()).WithPath(p)
	}
	slices.SortFunc(infos, func(a, b providers.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return infos, s.devNumbers(ctx, op, p, infos)
}

// Walk lists the tree under root with one exec of find.
func (s *scripts) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	const op = "hands.Walk"
	p, err := checkPath(op, s.box.ID(), root)
	if err != nil {
		return nil, err
	}
	out, err := s.run(ctx, op, p, scriptWalk, nil, nil, p, walkEntries)
	if err != nil {
		return nil, err
	}
	infos, err := parseListing(out)
	if err != nil {
		return nil, providers.E(providers.Unknown, op, err).WithBox(s.box.ID()).WithPath(p)
	}
	sortTree(infos)
	return infos, s.devNumbers(ctx, op, p, infos)
}

// sortTree orders a walk: parents before children, siblings in byte order
// (compare with '/' below every other byte, which names never hold).
func sortTree(infos []providers.FileInfo) {
	slices.SortFunc(infos, func(a, b providers.FileInfo) int { return comparePaths(a.Name, b.Name) })
}

func comparePaths(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		if ca == '/' {
			return -1
		}
		if cb == '/' {
			return 1
		}
		if ca < cb {
			return -1
		}
		return 1
	}
	return len(a) - len(b)
}

// ReadFile streams name through cat.
func (s *scripts) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	const op = "hands.ReadFile"
	p, err := checkPath(op, s.box.ID(), name)
	if err != nil {
		return nil, err
	}
	return s.stream(ctx, op, p, scriptReadFile, nil, p)
}

// stream runs a script that prints K and then a stream, and returns the
// stream once K arrived, or the script's error.
func (s *scripts) stream(ctx context.Context, op, p, script string, stdin io.Reader, args ...string) (io.ReadCloser, error) {
	sctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.run(sctx, op, p, script, stdin, pw, args...)
		pw.CloseWithError(err)
		done <- err
	}()
	var k [1]byte
	if _, err := io.ReadFull(pr, k[:]); err != nil || k[0] != 'K' {
		pr.Close()
		cancel()
		if err = <-done; err == nil {
			err = providers.Errorf(providers.Unknown, op, "script gave no stream").WithBox(s.box.ID()).WithPath(p)
		}
		return nil, err
	}
	return &streamReader{pr: pr, cancel: cancel, done: done}, nil
}

type streamReader struct {
	pr     *io.PipeReader
	cancel context.CancelFunc
	done   chan error
	closed bool
}

func (r *streamReader) Read(p []byte) (int, error) { return r.pr.Read(p) }

// Close stops the stream; the exec is cancelled when it has not ended.
func (r *streamReader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.pr.Close()
	r.cancel()
	<-r.done
	return nil
}

// ReadAt reads up to len(p) bytes at off with tail and head.
func (s *scripts) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	const op = "hands.ReadAt"
	pth, err := checkPath(op, s.box.ID(), name)
	if err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, providers.PathError(op, s.box.ID(), pth, syscall.EINVAL)
	}
	if len(p) == 0 {
		return 0, nil
	}
	w := &fixedWriter{buf: p}
	if _, err := s.run(ctx, op, pth, scriptReadAt, nil, w, pth, strconv.FormatInt(off, 10), strconv.Itoa(len(p))); err != nil {
		return 0, err
	}
	if w.n < len(p) {
		return w.n, io.EOF
	}
	return w.n, nil
}

// fixedWriter fills buf and fails past its end.
type fixedWriter struct {
	buf []byte
	n   int
}

func (w *fixedWriter) Write(p []byte) (int, error) {
	n := copy(w.buf[w.n:], p)
	w.n += n
	if n < len(p) {
		return n, io.ErrShortWrite
	}
	return n, nil
}

// WriteFile writes r to a temporary name in name's directory and renames it
// over name.
func (s *scripts) WriteFile(ctx context.Context, name string, r io.Reader, perm providers.FileMode) error {
	const op = "hands.WriteFile"
	p, err := checkPath(op, s.box.ID(), name)
	if err != nil {
		return err
	}
	if r == nil {
		r = bytes.NewReader(nil)
	}
	_, err = s.run(ctx, op, p, scriptWriteFile, r, io.Discard, p, shell.Octal(perm))
	return err
}

// WriteAt writes p at off with dd.
func (s *scripts) WriteAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	const op = "hands.WriteAt"
	pth, err := checkPath(op, s.box.ID(), name)
	if err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, providers.PathError(op, s.box.ID(), pth, syscall.EINVAL)
	}
	if _, err := s.run(ctx, op, pth, scriptWriteAt, bytes.NewReader(p), io.Discard, pth, strconv.FormatInt(off, 10)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Create makes an empty regular file.
func (s *scripts) Create(ctx context.Context, name string, perm providers.FileMode, exclusive bool) error {
	const op = "hands.Create"
	p, err := checkPath(op, s.box.ID(), name)
	if err != nil {
		return err
	}
	excl := "0"
	if exclusive {
		excl = "1"
	}
	_, err = s.run(ctx, op, p, scriptCreate, nil, io.Discard, p, shell.Octal(perm), excl)
	return err
}

// Mkdir makes a directory with exactly perm.
func (s *scripts) Mkdir(ctx context.Context, name string, perm providers.FileMode) error {
	return s.simple(ctx, "hands.Mkdir", name, scriptMkdir, shell.Octal(perm))
}

// Remove unlinks a non-directory.
func (s *scripts) Remove(ctx context.Context, name string) error {
	return s.simple(ctx, "hands.Remove", name, scriptRemove)
}

// Rmdir removes an empty directory.
func (s *scripts) Rmdir(ctx context.Context, name string) error {
	return s.simple(ctx, "hands.Rmdir", name, scriptRmdir)
}

// simple runs a script whose first argument is the checked path.
func (s *scripts) simple(ctx context.Context, op, name, script string, args ...string) error {
	p, err := checkPath(op, s.box.ID(), name)
	if err != nil {
		return err
	}
	_, err = s.run(ctx, op, p, script, nil, io.Discard, append([]string{p}, args...)...)
	return err
}

// two runs a script on two checked paths.
func (s *scripts) two(ctx context.Context, op, script, a, b string) error {
	pa, err := checkPath(op, s.box.ID(), a)
	if err != nil {
		return err
	}
	pb, err := checkPath(op, s.box.ID(), b)
	if err != nil {
		return err
	}
	_, err = s.run(ctx, op, pa, script, nil, io.Discard, pa, pb)
	return err
}

// Rename moves oldname to newname as rename(2) does.
func (s *scripts) Rename(ctx context.Context, oldname, newname string) error {
	return s.two(ctx, "hands.Rename", scriptRename, oldname, newname)
}

// Chmod sets name's mode, following symlinks.
func (s *scripts) Chmod(ctx context.Context, name string, mode providers.FileMode) error {
	return s.simple(ctx, "hands.Chmod", name, scriptChmod, shell.Octal(mode))
}

// Chown sets name's owner, following symlinks.
func (s *scripts) Chown(ctx context.Context, name string, uid, gid int) error {
	return s.simple(ctx, "hands.Chown", name, scriptChown, ownerArg(uid, gid))
}

// Lchown sets the owner of name itself, never following a final symlink.
func (s *scripts) Lchown(ctx context.Context, name string, uid, gid int) error {
	return s.simple(ctx, "hands.Lchown", name, scriptLchown, ownerArg(uid, gid))
}

// ownerArg renders an owner for chown: uid, :gid or uid:gid; "" when both
// are -1 (left as they are).
func ownerArg(uid, gid int) string {
	var owner string
	if uid >= 0 {
		owner = strconv.Itoa(uid)
	}
	if gid >= 0 {
		owner += ":" + strconv.Itoa(gid)
	}
	return owner
}

// touchTime renders t for touch -d: "@sec.ns", or "" for the zero time.
func touchTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	sec, ns := t.Unix(), t.Nanosecond()
	if sec < 0 && ns > 0 {
		return fmt.Sprintf("@-%d.%09d", -sec-1, 1e9-ns)
	}
	return fmt.Sprintf("@%d.%09d", sec, ns)
}

// Utimes sets times with touch -d @sec.ns.
func (s *scripts) Utimes(ctx context.Context, name string, atime, mtime time.Time) error {
	return s.simple(ctx, "hands.Utimes", name, scriptUtimes, touchTime(atime), touchTime(mtime))
}

// Lutimes sets the times of name itself, never following a final symlink.
func (s *scripts) Lutimes(ctx context.Context, name string, atime, mtime time.Time) error {
	return s.simple(ctx, "hands.Lutimes", name, scriptLutimes, touchTime(atime), touchTime(mtime))
}

// Truncate sets name's size.
func (s *scripts) Truncate(ctx context.Context, name string, size int64) error {
	const op = "hands.Truncate"
	if size < 0 {
		return providers.PathError(op, s.box.ID(), name, syscall.EINVAL)
	}
	return s.simple(ctx, op, name, scriptTruncate, strconv.FormatInt(size, 10))
}

// Symlink makes name a symbolic link to target.
func (s *scripts) Symlink(ctx context.Context, target, name string) error {
	const op = "hands.Symlink"
	p, err := checkPath(op, s.box.ID(), name)
	if err != nil {
		return err
	}
	if target == "" {
		return providers.PathError(op, s.box.ID(), p, syscall.ENOENT)
	}
	if strings.IndexByte(target, 0) >= 0 {
		return providers.PathError(op, s.box.ID(), p, syscall.EINVAL)
	}
	_, err = s.run(ctx, op, p, scriptSymlink, nil, io.Discard, target, p)
	return err
}

// Readlink returns a symlink's target.
func (s *scripts) Readlink(ctx context.Context, name string) (string, error) {
	const op = "hands.Readlink"
	p, err := checkPath(op, s.box.ID(), name)
	if err != nil {
		return "", err
	}
	out, err := s.run(ctx, op, p, scriptReadlink, nil, nil, p)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSuffix(out, []byte{'\n'})), nil
}

// Link makes newname a hard link to oldname.
func (s *scripts) Link(ctx context.Context, oldname, newname string) error {
	return s.two(ctx, "hands.Link", scriptLink, oldname, newname)
}

// Statfs reports the file system's capacity with stat -f.
func (s *scripts) Statfs(ctx context.Context, name string) (providers.StatFS, error) {
	const op = "hands.Statfs"
	p, err := checkPath(op, s.box.ID(), name)
	if err != nil {
		return providers.StatFS{}, err
	}
	out, err := s.run(ctx, op, p, scriptStatfs, nil, nil, p)
	if err != nil {
		return providers.StatFS{}, err
	}
	f := strings.Fields(string(out))
	if len(f) != 7 {
		return providers.StatFS{}, providers.Errorf(providers.Unknown, op, "stat -f printed %q", out).WithBox(s.box.ID()).WithPath(p)
	}
	var v [7]uint64
	for i := range f {
		if v[i], err = strconv.ParseUint(f[i], 10, 64); err != nil {
			return providers.StatFS{}, providers.Errorf(providers.Unknown, op, "stat -f printed %q", out).WithBox(s.box.ID()).WithPath(p)
		}
	}
	return providers.StatFS{Bsize: uint32(v[0]), Blocks: v[1], Bfree: v[2], Bavail: v[3], Files: v[4], Ffree: v[5], NameLen: uint32(v[6])}, nil
}

// Fsync flushes name with sync FILE.
func (s *scripts) Fsync(ctx context.Context, name string) error {
	return s.simple(ctx, "hands.Fsync", name, scriptFsync)
}

// GetArchive streams tar -cf of path, member names starting at its base
// name.
func (s *scripts) GetArchive(ctx context.Context, name string) (io.ReadCloser, error) {
	const op = "hands.GetArchive"
	p, err := checkPath(op, s.box.ID(), name)
	if err != nil {
		return nil, err
	}
	return s.stream(ctx, op, p, scriptGetArchive, nil, p)
}

// GetFiles returns one tar of paths (relative to root, slash-separated),
// each member named by its path and a directory as itself without its
// contents: one exec of GNU tar with the names on stdin, or on a box that
// takes no stdin, with the names as arguments (getFilesByArgs).
func (s *scripts) GetFiles(ctx context.Context, root string, paths []string) (io.ReadCloser, error) {
	const op = "hands.GetFiles"
	p, err := checkPath(op, s.box.ID(), root)
	if err != nil {
		return nil, err
	}
	var names bytes.Buffer
	for _, rel := range paths {
		if !localPath(rel) {
			return nil, providers.Errorf(providers.Unsafe, op, "path %q is not a local path under the root", rel).WithBox(s.box.ID()).WithPath(p)
		}
		names.WriteString(rel)
		names.WriteByte(0)
	}
	if s.noStdin {
		return s.getFilesByArgs(ctx, op, p, paths)
	}
	return s.stream(ctx, op, p, scriptGetFiles, &names, p)
}

// localPath reports whether rel names something under a root: relative,
// clean, no ".." element, no NUL.
func localPath(rel string) bool {
	if rel == "" || rel[0] == '/' || strings.IndexByte(rel, 0) >= 0 || path.Clean(rel) != rel {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, "../")
}

// PutArchive extracts a tar stream into dir with tar -xf.
func (s *scripts) PutArchive(ctx context.Context, dir string, tar io.Reader) error {
	const op = "hands.PutArchive"
	p, err := checkPath(op, s.box.ID(), dir)
	if err != nil {
		return err
	}
	_, err = s.run(ctx, op, p, scriptPutArchive, tar, io.Discard, p)
	return err
}
