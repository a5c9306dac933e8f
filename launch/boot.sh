# boxfs launch boot: sh -c BOOT boxfs-launch SCRIPT HASH TMPDIR MODE NAME [ARG...]
# Checks the spool TMPDIR/boxfs-launch-UID and every directory above it,
# installs SCRIPT there as launch-HASH.sh when it is not yet, and runs it:
# sh launch-HASH.sh MODE SPOOL NAME [ARG...]. An empty SCRIPT that is not
# installed exits 87: the host sends it then.
set -f
s=$1 h=$2 t=$3
shift 3
unsafe() {
	printf 'boxfs-launch: unsafe: %s\n' "$1" >&2
	exit 84
}
uid=$(id -u) || exit 82
case $uid in '' | *[!0-9]*) exit 82 ;; esac
case $t in /*) ;; *) t=/tmp ;; esac
sp=${t%/}/boxfs-launch-$uid
# check DIR: a directory, not a symbolic link, owned by root or us, and not
# writable by its group or others unless sticky.
check() {
	[ -L "$1" ] && unsafe "$1 is a symbolic link"
	[ -d "$1" ] || unsafe "$1 is not a directory"
	c_p=$1
	set -- $(ls -ldn -- "$1")
	[ "$3" = 0 ] || [ "$3" = "$uid" ] || unsafe "$c_p is owned by uid $3, not root or $uid"
	c_w=0
	case $1 in ?????w*) c_w=1 ;; esac
	case $1 in ????????w*) c_w=1 ;; esac
	case $1 in ?????????[tT]*) c_w=0 ;; esac
	[ "$c_w" = 0 ] || unsafe "$c_p is writable by its group or others and not sticky"
}
check /
p=
r=${sp#/}
while [ -n "$r" ]; do
	c=${r%%/*}
	case $r in */*) r=${r#*/} ;; *) r= ;; esac
	[ -n "$c" ] || continue
	p=$p/$c
	if [ "$p" = "$sp" ] && [ ! -e "$p" ] && [ ! -L "$p" ]; then
		mkdir -m 700 "$p" 2>/dev/null
	fi
	check "$p"
done
f=$sp/launch-$h.sh
# Installed by a rename over the name (a symbolic link there included),
# never removed first: another boot may be about to run the copy it just
# installed.
if [ ! -f "$f" ] || [ -L "$f" ]; then
	[ -n "$s" ] || exit 87
	printf '%s' "$s" >"$f.$$" && mv -f "$f.$$" "$f" || exit 1
fi
m=$1
shift
exec sh "$f" "$m" "$sp" "$@"
