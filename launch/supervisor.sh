# boxfs launch: the POSIX sh supervisor (Debian dash, BusyBox ash).
# sh launch-HASH.sh MODE SPOOL NAME [ARG...], run by the boot script after
# it checked SPOOL. The files of a launch, in SPOOL/NAME/:
#   config  the request without secrets and stdin ("key value" lines)
#   vars    one line: phase inc restarts lastexit pid pidstart sup supstart
#           dog dogstart started since runner runnerstart bsexit why
#   state   the same as JSON, for the host and for people
#   lock/   held (mkdir) while a process changes vars; lock/owner: "pid start"
#   prog    "pid start inc" of the running incarnation (its group leader)
#   rc.N    incarnation N's exit code, written by its runner
#   burst   the times of the restarts still inside the burst window
#   stop    present once a stop began: nothing starts the program again
#   stopping/ held by the one stop that kills; stopping/owner: "pid start"
#   restart present while a restart is asked for
#   out.log the output's tail; out.base "inode base" once it was trimmed
# Exit codes: 80 invalid, 81 not found, 82 unsupported, 83 refused,
# 84 unsafe, 85 busy, 86 permission; the message is on stderr.
set -f
mode=$1 spool=$2 name=$3
shift 3
d=$spool/$name
nl='
'
tick=0.25

die() {
	printf 'boxfs-launch: %s\n' "$2" >&2
	exit "$1"
}
now() { date +%s; }

# pstart PID: ps_start, ps_pgrp of a live (not zombie) process, or fail.
pstart() {
	ps_start= ps_pgrp=
	case $1 in '' | *[!0-9]*) return 1 ;; esac
	IFS= read -r ps_l 2>/dev/null <"/proc/$1/stat" || return 1
	ps_l=${ps_l##*) }
	set -- $ps_l
	case $1 in Z | X | x) return 1 ;; esac
	ps_pgrp=$3
	ps_start=${20}
}
# alive PID START: the process PID runs and is the one that started at START.
alive() { pstart "$1" && [ "$ps_start" = "$2" ]; }
pstart $$
mystart=$ps_start

# The process group of an incarnation is its leader's pid: its members are
# the processes in that group started no earlier than the leader.
group_empty() {
	case $1 in '' | *[!0-9]*) return 0 ;; esac
	set +f
	for g_p in /proc/[0-9]*; do
		pstart "${g_p#/proc/}" || continue
		if [ "$ps_pgrp" = "$1" ] && [ "$ps_start" -ge "$2" ]; then
			set -f
			return 1
		fi
	done
	set -f
	return 0
}
# group_signal SIG PG START: signals each member, one by one.
group_signal() {
	case $2 in '' | *[!0-9]*) return 0 ;; esac
	set +f
	for g_p in /proc/[0-9]*; do
		g_p=${g_p#/proc/}
		pstart "$g_p" || continue
		[ "$ps_pgrp" = "$2" ] && [ "$ps_start" -ge "$3" ] && kill -"$1" "$g_p" 2>/dev/null
	done
	set -f
}
# term_drain PG START SECS: TERM to the group, then wait up to SECS for it
# to be empty.
term_drain() {
	if alive "$1" "$2"; then
		kill -TERM -"$1" 2>/dev/null
	else
		group_signal TERM "$1" "$2"
	fi
	td_i=$(($3 * 10))
	while [ "$td_i" -gt 0 ] && ! group_empty "$1" "$2"; do
		sleep 0.1
		td_i=$((td_i - 1))
	done
}
# kill_confirm PG START: KILL the group until it is empty (about 10 s).
kill_confirm() {
	for kc_s in 0.01 0.05 0.1 0.2 0.5 1 1 2 2 3; do
		group_signal KILL "$1" "$2"
		group_empty "$1" "$2" && return 0
		sleep $kc_s
	done
	group_empty "$1" "$2"
}

load() {
	phase=new inc=0 restarts=0 lastexit=- pid=- pidstart=- sup=- supstart=- dog=- dogstart=-
	started=- since=- runner=- runnerstart=- bsexit=- why=-
	[ -f "$d/vars" ] && read -r phase inc restarts lastexit pid pidstart sup supstart dog dogstart started since runner runnerstart bsexit why <"$d/vars"
	:
}
j() { case $1 in '' | *[!0-9]*) printf null ;; *) printf %s "$1" ;; esac; }
save() {
	printf '%s\n' "$phase $inc $restarts $lastexit $pid $pidstart $sup $supstart $dog $dogstart $started $since $runner $runnerstart $bsexit $why" >"$d/vars.tmp"
	sv_sec=false
	[ "${c_secrets:-0}" = 1 ] && sv_sec=true
	sv_why=
	[ "$why" = - ] || sv_why=$why
	{
		printf '{"name":"%s","phase":"%s","incarnation":%s,"restarts":%s,' "$name" "$phase" "$inc" "$restarts"
		printf '"lastExit":%s,"pid":%s,"supervisor":%s,"watchdog":%s,' "$(j "$lastexit")" "$(j "$pid")" "$(j "$sup")" "$(j "$dog")"
		printf '"startedAt":%s,"since":%s,"beforeStopExit":%s,' "$(j "$started")" "$(j "$since")" "$(j "$bsexit")"
		printf '"secrets":%s,"via":"sh","reason":"%s"}\n' "$sv_sec" "$sv_why"
	} >"$d/state.tmp"
	# state before vars: a reader that waits on vars (wait_phase) and then
	# prints state never prints an older phase than it waited for.
	mv -f "$d/state.tmp" "$d/state"
	mv -f "$d/vars.tmp" "$d/vars"
}
cat_state() { cat "$d/state"; }

lock() {
	lk_i=0 lk_none=0
	while ! mkdir "$d/lock" 2>/dev/null; do
		if IFS=' ' read -r lk_p lk_s 2>/dev/null <"$d/lock/owner"; then
			lk_none=0
			if ! alive "$lk_p" "$lk_s"; then
				rm -f "$d/lock/owner"
				rmdir "$d/lock" 2>/dev/null
				continue
			fi
		else
			# A holder killed between its mkdir and its owner line
			# leaves a lock no one owns: broken after 100 looks.
			lk_none=$((lk_none + 1))
			if [ "$lk_none" -gt 100 ]; then
				lk_none=0
				rmdir "$d/lock" 2>/dev/null
				continue
			fi
		fi
		lk_i=$((lk_i + 1))
		[ "$lk_i" -gt 1200 ] && die 85 "the launch $name stays locked"
		sleep 0.05
	done
	printf '%s %s\n' "$$" "$mystart" >"$d/lock/owner"
}
unlock() {
	rm -f "$d/lock/owner"
	rmdir "$d/lock" 2>/dev/null
}

# dec ESCAPED: dec_v is the bytes it stands for.
dec() {
	dec_v=$(printf '%bx' "$1")
	dec_v=${dec_v%x}
}

# load_config [FILE]: reads the launch's config (or FILE).
load_config() {
	c_dir=/ c_restart=on c_terminal= c_burst_n=5 c_burst_t=60 c_grace=5 c_user= c_beforemax=30
	c_logmax=8388608 c_secrets=0 c_argv= c_env= c_inherit= c_before= c_uid= c_gid= c_home= c_drop=
	lc_f=${1:-$d/config}
	[ -f "$lc_f" ] || return 1
	while IFS= read -r l; do
		k=${l%% *} v=${l#* }
		case $k in
		dir) c_dir=$v ;;
		argv) c_argv=$c_argv"x$v$nl" ;;
		env) c_env=$c_env"$v$nl" ;;
		inherit) c_inherit="$c_inherit $v" ;;
		restart) c_restart=$v ;;
		terminal) c_terminal=" $v " ;;
		burst) c_burst_n=${v% *} c_burst_t=${v#* } ;;
		grace) c_grace=$v ;;
		user) c_user=$v ;;
		uid) c_uid=$v ;;
		gid) c_gid=$v ;;
		home) c_home=$v ;;
		drop) c_drop=$v ;;
		before) c_before=$c_before"x$v$nl" ;;
		beforemax) c_beforemax=$v ;;
		logmax) c_logmax=$v ;;
		hassecrets) c_secrets=1 ;;
		esac
	done <"$lc_f"
}

# resolve USER: u_name u_uid u_gid u_home from /etc/passwd; a uid it does
# not list runs with that uid as its gid.
resolve_user() {
	u_name= u_uid= u_gid= u_home=/
	if [ -r /etc/passwd ]; then
		while IFS=: read -r r_n r_x r_u r_g r_c r_h r_s; do
			if [ "$r_n" = "$1" ] || [ "$r_u" = "$1" ]; then
				u_name=$r_n u_uid=$r_u u_gid=$r_g u_home=$r_h
				break
			fi
		done </etc/passwd
	fi
	if [ -z "$u_uid" ]; then
		case $1 in *[!0-9]*) return 1 ;; esac
		u_uid=$1 u_gid=$1
	fi
	:
}

# check_request: what only the box knows; appends uid, gid, home, drop to
# the config it prints. Ends the script on a refusal.
check_request() {
	command -v setsid >/dev/null 2>&1 || die 82 "the box has no setsid, which the sh supervisor needs"
	for cr_n in $c_inherit; do
		case $cr_n in '' | [0-9]* | *[!A-Za-z0-9_]*) die 80 "inherit: $cr_n is not a variable name" ;; esac
	done
	for cr_v in "$c_grace" "$c_beforemax" "$c_logmax" "$c_burst_n" "$c_burst_t" $c_terminal; do
		case $cr_v in '' | *[!0-9]*) die 80 "the request holds a bad number: $cr_v" ;; esac
	done
	me=$(id -u)
	prog_uid=$me
	if [ -n "$c_user" ]; then
		resolve_user "$c_user" || die 81 "no user $c_user in the box"
		prog_uid=$u_uid
		if [ "$u_uid" != "$me" ]; then
			[ "$me" = 0 ] || die 86 "only root can run a program as another user ($c_user)"
			if [ -n "$u_name" ] && setpriv --reuid="$u_uid" --regid="$u_gid" --init-groups true 2>/dev/null; then
				c_drop=setpriv
			elif [ -z "$u_name" ] && setpriv --reuid="$u_uid" --regid="$u_gid" --clear-groups true 2>/dev/null; then
				c_drop=setpriv-clear
			elif [ -n "$u_name" ] && runuser -u "$u_name" -- true 2>/dev/null; then
				c_drop=runuser
			else
				die 82 "the box can drop to another user with neither setpriv nor runuser"
			fi
		fi
		printf 'uid %s\ngid %s\nhome %s\ndrop %s\n' "$u_uid" "$u_gid" "$u_home" "${c_drop:--}"
	fi
	if [ "$c_secrets" = 1 ]; then
		case $(command -V printf 2>&1) in *builtin*) ;; *) die 82 "the box's sh has no printf builtin to pass secrets without an argv" ;; esac
		if [ "$prog_uid" != 0 ]; then
			cr_y=
			IFS= read -r cr_y </proc/sys/kernel/yama/ptrace_scope 2>/dev/null
			case $cr_y in 1 | 2 | 3) ;; *) die 83 "secrets for a program not run as root need kernel.yama.ptrace_scope >= 1; the box has ${cr_y:-no Yama}" ;; esac
		fi
	fi
	:
}

# run_prog N MARK LIST [exec]: runs the argv LIST (escaped, one "x"-prefixed
# word a line) as the program runs: its own session and group, in c_dir, as
# the launch's user, with the launch's environment and nothing else. MARK
# "prog" records "pid start N" in prog first. With exec, the calling
# (sub)shell becomes the program.
run_prog() {
	rp_n=$1 rp_mark=$2 rp_list=$3 rp_exec=${4:-}
	set --
	case $c_drop in
	setpriv) set -- setpriv --reuid="$c_uid" --regid="$c_gid" --init-groups ;;
	setpriv-clear) set -- setpriv --reuid="$c_uid" --regid="$c_gid" --clear-groups ;;
	runuser)
		resolve_user "$c_uid"
		set -- runuser -u "$u_name" --
		;;
	esac
	rp_home=${HOME:-/}
	[ -n "$c_home" ] && rp_home=$c_home
	set -- "$@" env -i "PATH=${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}" "HOME=$rp_home" "BOXFS_INCARNATION=$rp_n"
	[ -n "${LANG+x}" ] && set -- "$@" "LANG=$LANG"
	[ -n "$sec" ] && set -- "$@" "BOXFS_SECRETS_FD=3"
	for rp_k in $(env | sed -n 's/^\(BOXFS_[A-Za-z0-9_]*\)=.*/\1/p') $c_inherit; do
		case $rp_k in BOXFS_INCARNATION | BOXFS_SECRETS_FD) continue ;; esac
		eval "rp_set=\${$rp_k+x} rp_v=\${$rp_k-}"
		[ -n "$rp_set" ] && set -- "$@" "$rp_k=$rp_v"
	done
	rp_ifs=$IFS
	IFS=$nl
	for rp_e in $c_env; do
		dec "${rp_e#* }"
		set -- "$@" "${rp_e%% *}=$dec_v"
	done
	for rp_a in $rp_list; do
		dec "${rp_a#x}"
		set -- "$@" "$dec_v"
	done
	IFS=$rp_ifs
	dec "$c_dir"
	[ -n "$rp_exec" ] && exec setsid sh -c "$child" boxfs-launch-prog "$d" "$rp_n" "$rp_mark" "$dec_v" "$@"
	setsid sh -c "$child" boxfs-launch-prog "$d" "$rp_n" "$rp_mark" "$dec_v" "$@"
}
# child: the program's own process, once setsid made it a group leader.
# Its stderr is descriptor 4 (the log), the shells' around it /dev/null:
# dash says "Terminated" of a killed child on its own stderr.
child='exec 2>&4 4>&-
d=$1 n=$2 m=$3 w=$4
shift 4
st() { set -f; set -- $1; s=${20}; }
IFS= read -r l </proc/$$/stat
st "${l##*) }"
if [ "$m" = prog ]; then
	printf "%s %s %s\n" $$ "$s" "$n" >"$d/prog.tmp" && mv -f "$d/prog.tmp" "$d/prog"
fi
cd "$w" || { echo "boxfs-launch: cannot enter $w" >&2; exit 126; }
exec "$@"'

# logger: appends stdin to out.log, keeping its tail: past logmax bytes,
# the last half is kept and out.base says how much went before it.
logger() {
	lg_max=$c_logmax
	lg_keep=$((lg_max / 2))
	lg_base=0
	[ -f "$d/out.base" ] && read -r lg_ino lg_base <"$d/out.base"
	: >>"$d/out.log"
	lg_sz=$(($(wc -c <"$d/out.log")))
	while :; do
		dd bs=65536 count=16 >>"$d/out.log" 2>/dev/null
		lg_n=$(($(wc -c <"$d/out.log")))
		[ "$lg_n" -eq "$lg_sz" ] && break
		lg_sz=$lg_n
		if [ "$lg_sz" -gt "$lg_max" ]; then
			tail -c "$lg_keep" "$d/out.log" >"$d/out.new"
			set -- $(ls -i "$d/out.new")
			lg_base=$((lg_base + lg_sz - lg_keep))
			printf '%s %s\n' "$1" "$lg_base" >"$d/out.base.tmp"
			mv -f "$d/out.base.tmp" "$d/out.base"
			mv -f "$d/out.new" "$d/out.log"
			lg_sz=$lg_keep
		fi
	done
}

# runner N: runs incarnation N (a background subshell of the supervisor):
# secrets on descriptor 3 and stdin through pipes fed by the builtin
# printf, output to the logger; when the program ends, what it left in its
# group is killed (unless a stop or restart drains it), and rc.N written.
runner() {
	rn_n=$1
	exec </dev/null
	{
		# The program's stderr is the log (4); the shells' own words
		# ("Terminated") are not.
		exec 4>&1 2>/dev/null
		if [ -n "$sec" ]; then
			printf '%b' "$sec" | {
				exec 3<&0
				if [ -n "$inp" ]; then
					printf '%b' "$inp" | run_prog "$rn_n" prog "$c_argv"
				else
					run_prog "$rn_n" prog "$c_argv" </dev/null
				fi
			}
		elif [ -n "$inp" ]; then
			printf '%b' "$inp" | run_prog "$rn_n" prog "$c_argv"
		else
			run_prog "$rn_n" prog "$c_argv"
		fi
		rn_rc=$?
		if [ ! -e "$d/stop" ] && [ ! -e "$d/restart" ] &&
			IFS=' ' read -r rn_pg rn_ps rn_i 2>/dev/null <"$d/prog" && [ "$rn_i" = "$rn_n" ]; then
			kill_confirm "$rn_pg" "$rn_ps"
		fi
		printf '%s\n' "$rn_rc" >"$d/rc.$rn_n.tmp" && mv -f "$d/rc.$rn_n.tmp" "$d/rc.$rn_n"
	} | logger
}

# begin N (lock held): starts incarnation N and waits for it to record
# itself.
begin() {
	inc=$1
	rm -f "$d/rc.$inc" "$d/prog"
	(runner "$inc") &
	runner=$!
	pstart "$runner"
	runnerstart=${ps_start:--}
	pid=- pidstart=-
	bg_i=0
	while [ "$bg_i" -lt 400 ]; do
		if IFS=' ' read -r bg_p bg_s bg_n 2>/dev/null <"$d/prog" && [ "$bg_n" = "$inc" ]; then
			pid=$bg_p pidstart=$bg_s
			break
		fi
		[ -f "$d/rc.$inc" ] && break
		sleep 0.025
		bg_i=$((bg_i + 1))
	done
	phase=running since=$(now) why=-
	save
}

# ensure_dog (lock held): a watchdog runs for the launch.
ensure_dog() {
	alive "$dog" "$dogstart" && return
	setsid sh "$0" watchdog "$spool" "$name" </dev/null >/dev/null 2>&1 &
	dog=$!
	pstart "$dog"
	dogstart=${ps_start:--}
	save
}

# lock_own: takes the lock and loads the vars, or exits when a stop began
# or a later start has a supervisor of its own.
lock_own() {
	lock
	load
	if [ -e "$d/stop" ] || [ "$sup" != "$$" ]; then
		unlock
		exit 0
	fi
}

inc_ended() {
	[ -f "$d/rc.$inc" ] && return 0
	alive "$runner" "$runnerstart" && return 1
	alive "$pid" "$pidstart" && return 1
	return 0
}

# on_exit: the incarnation ended; restart it, or end the launch.
on_exit() {
	wait "$runner" 2>/dev/null
	lock_own
	oe_c=-
	[ -f "$d/rc.$inc" ] && IFS= read -r oe_c <"$d/rc.$inc"
	case $oe_c in '' | *[!0-9]*) oe_c=- ;; esac
	lastexit=$oe_c
	oe_t=$(now)
	case $c_terminal in *" $oe_c "*) oe_term=1 ;; *) oe_term=0 ;; esac
	if [ "$c_restart" = off ] || [ "$oe_c" = 0 ] || [ "$oe_term" = 1 ]; then
		phase=exited since=$oe_t
		save
		unlock
		exit 0
	fi
	oe_keep= oe_n=0 oe_b=
	[ -f "$d/burst" ] && read -r oe_b <"$d/burst"
	for oe_x in $oe_b; do
		if [ $((oe_t - oe_x)) -lt "$c_burst_t" ]; then
			oe_keep="$oe_keep $oe_x"
			oe_n=$((oe_n + 1))
		fi
	done
	if [ "$oe_n" -ge "$c_burst_n" ]; then
		phase=gave_up since=$oe_t why=more_than_${c_burst_n}_restarts_in_${c_burst_t}s
		save
		unlock
		exit 0
	fi
	printf '%s\n' "$oe_keep $oe_t" >"$d/burst"
	phase=restarting since=$oe_t
	save
	unlock
	sleep 0.5
	lock_own
	restarts=$((restarts + 1))
	begin $((inc + 1))
	unlock
}

# asked_restart: a restart was asked for; drain the incarnation as a stop
# does, then start the next one.
asked_restart() {
	lock_own
	phase=restarting since=$(now)
	save
	unlock
	term_drain "$pid" "$pidstart" "$c_grace"
	kill_confirm "$pid" "$pidstart"
	ar_i=0
	while [ ! -f "$d/rc.$inc" ] && [ "$ar_i" -lt 50 ] && alive "$runner" "$runnerstart"; do
		sleep 0.1
		ar_i=$((ar_i + 1))
	done
	wait "$runner" 2>/dev/null
	lock_own
	[ -f "$d/rc.$inc" ] && IFS= read -r lastexit <"$d/rc.$inc"
	restarts=$((restarts + 1))
	begin $((inc + 1))
	rm -f "$d/restart"
	unlock
}

do_supervise() {
	IFS= read -r sec || sec=
	IFS= read -r inp || inp=
	exec </dev/null
	load_config || exit 0
	lock
	load
	if [ -e "$d/stop" ] || { [ "$sup" != "$$" ] && alive "$sup" "$supstart"; }; then
		unlock
		exit 0
	fi
	case $phase in starting | running | restarting) ;; *)
		unlock
		exit 0
		;;
	esac
	sup=$$ supstart=$mystart
	save
	if [ "$phase" = starting ]; then
		begin 1
	fi
	ensure_dog
	unlock
	sv_t=0
	while :; do
		sleep $tick
		[ -e "$d/stop" ] && exit 0
		# A later start has a supervisor of its own.
		load
		[ "$sup" = "$$" ] || exit 0
		if [ -e "$d/restart" ]; then
			asked_restart
			continue
		fi
		if inc_ended; then
			on_exit
			continue
		fi
		sv_t=$((sv_t + 1))
		if [ "$sv_t" -ge 4 ]; then
			sv_t=0
			if ! alive "$dog" "$dogstart"; then
				lock
				load
				[ -e "$d/stop" ] || ensure_dog
				unlock
			fi
		fi
	done
}

do_watchdog() {
	exec </dev/null
	load_config || exit 0
	while :; do
		sleep 1
		[ -e "$d/stop" ] && exit 0
		load
		case $phase in starting | running | restarting) ;; *) exit 0 ;; esac
		[ "$dog" = "$$" ] || exit 0
		alive "$sup" "$supstart" && continue
		lock
		load
		if [ -e "$d/stop" ] || [ "$dog" != "$$" ]; then
			unlock
			exit 0
		fi
		if alive "$sup" "$supstart"; then
			unlock
			continue
		fi
		if [ "$c_secrets" = 1 ]; then
			phase=lost since=$(now) why=its_supervisor_died_and_its_secrets_with_it
			save
			unlock
			exit 0
		fi
		setsid sh "$0" supervise "$spool" "$name" </dev/null >/dev/null 2>&1 &
		unlock
		sleep 1
	done
}

# wait_phase WANT TENTHS: waits until the phase is WANT (or not WANT when
# WANT starts with !).
wait_phase() {
	wp_i=$2
	while [ "$wp_i" -gt 0 ]; do
		load
		case $1 in
		!*) [ "$phase" != "${1#!}" ] && return 0 ;;
		*) [ "$phase" = "$1" ] && return 0 ;;
		esac
		sleep 0.1
		wp_i=$((wp_i - 1))
	done
	return 1
}

# stopper_alive: the stop that claimed stopping/ still runs.
stopper_alive() {
	IFS=' ' read -r so_p so_s 2>/dev/null <"$d/stopping/owner" && alive "$so_p" "$so_s"
}
# stopper_died: stopping/ names an owner, and it is dead.
stopper_died() {
	IFS=' ' read -r so_p so_s 2>/dev/null <"$d/stopping/owner" && ! alive "$so_p" "$so_s"
}

# wait_stop TENTHS: waits until the stop that claimed stopping/ is over:
# the phase moved on, or its owner died (checked at every look, not once:
# a stop killed just before the first look is alive at it).
wait_stop() {
	ws_i=$1
	while [ "$ws_i" -gt 0 ]; do
		load
		[ "$phase" != stopping ] && return 0
		stopper_alive || return 0
		sleep 0.1
		ws_i=$((ws_i - 1))
	done
	return 1
}

# do_start REUSE: starts the launch from the request on stdin (REUSE: from
# its config, with only secrets and stdin on stdin), unless it runs.
do_start() {
	ds_reuse=$1
	req= sec= inp= ds_end=
	while IFS= read -r l; do
		case $l in
		end)
			ds_end=1
			break
			;;
		"secrets "*) sec=${l#secrets } ;;
		"stdin "*) inp=${l#stdin } ;;
		*) req=$req$l$nl ;;
		esac
	done
	[ -n "$ds_end" ] || die 80 "the request ended early"
	if [ ! -d "$d" ]; then
		[ "$ds_reuse" = 1 ] && die 81 "no launch named $name"
		mkdir -m 700 "$d" 2>/dev/null || [ -d "$d" ] || die 86 "cannot make $d"
	fi
	[ -L "$d" ] && die 84 "$d is a symbolic link"
	while :; do
		lock
		load
		case $phase in
		starting | running | restarting)
			if alive "$sup" "$supstart" || alive "$dog" "$dogstart"; then
				unlock
				cat_state
				return
			fi
			;;
		stopping)
			# A stop whose process died (its host went away) is over:
			# the start ends what it left.
			if stopper_alive; then
				unlock
				wait_stop 6000 || die 85 "the launch $name is still stopping"
				continue
			fi
			;;
		esac
		break
	done
	if [ "$ds_reuse" = 1 ]; then
		load_config || { unlock; die 81 "no launch named $name"; }
		if [ "$c_secrets" = 1 ] && [ -z "$sec" ]; then
			unlock
			die 83 "the launch $name had secrets, which went with its supervisor: write them again"
		fi
		if [ -n "$sec" ] && [ "$c_secrets" = 0 ]; then
			printf 'hassecrets 1\n' >>"$d/config"
			load_config
		fi
		ds_more=$(check_request) || { ds_rc=$?; unlock; exit $ds_rc; }
	else
		# The config changes only once the box took the request.
		printf '%s' "$req" >"$d/config.tmp"
		load_config "$d/config.tmp"
		ds_more=$(check_request) || { ds_rc=$?; rm -f "$d/config.tmp"; unlock; exit $ds_rc; }
		[ -n "$ds_more" ] && printf '%s\n' "$ds_more" >>"$d/config.tmp"
		mv -f "$d/config.tmp" "$d/config"
		load_config
	fi
	# What an earlier run left (a lost launch's program) goes first.
	if [ "$phase" != new ] && [ "$pid" != - ] && ! group_empty "$pid" "$pidstart"; then
		kill_confirm "$pid" "$pidstart"
	fi
	set +f
	rm -f "$d/stop" "$d/restart" "$d/prog" "$d/burst" "$d"/rc.*
	set -f
	rm -f "$d/stopping/owner"
	rmdir "$d/stopping" 2>/dev/null
	phase=starting inc=0 restarts=0 lastexit=- pid=- pidstart=- dog=- dogstart=- runner=- runnerstart=- bsexit=- why=-
	started=$(now) since=$started
	{ printf '%s\n%s\n' "$sec" "$inp"; } 2>/dev/null | setsid sh "$0" supervise "$spool" "$name" >/dev/null 2>&1 &
	sup=$!
	pstart "$sup"
	supstart=${ps_start:--}
	save
	unlock
	wait_phase '!starting' 200
	cat_state
}

do_restart() {
	[ -f "$d/vars" ] || die 81 "no launch named $name"
	lock
	load
	case $phase in
	starting | running | restarting)
		if ! alive "$sup" "$supstart"; then
			unlock
			cat_state
			return
		fi
		dr_inc=$inc
		: >"$d/restart"
		unlock
		load_config
		dr_i=$(((c_grace + 20) * 10))
		while [ "$dr_i" -gt 0 ]; do
			load
			[ "$inc" -gt "$dr_inc" ] && [ ! -e "$d/restart" ] && break
			sleep 0.1
			dr_i=$((dr_i - 1))
		done
		cat_state
		return
		;;
	stopping)
		unlock
		die 85 "the launch $name is stopping"
		;;
	esac
	unlock
	do_start 1
}

do_stop() {
	[ -f "$d/vars" ] || die 81 "no launch named $name"
	load_config
	st_g=$1
	case $st_g in '' | *[!0-9]*) st_g=$c_grace ;; esac
	st_try=0
	while :; do
		lock
		load
		case $phase in exited | gave_up | stopped | new)
			unlock
			cat_state
			return
			;;
		esac
		mkdir "$d/stopping" 2>/dev/null && break
		if stopper_died; then
			rm -f "$d/stopping/owner"
			rmdir "$d/stopping" 2>/dev/null
			unlock
			continue
		fi
		unlock
		# Another stop kills: wait for it to end.
		st_w=$(((st_g + c_beforemax + 30) * 10))
		while [ -d "$d/stopping" ] && [ "$st_w" -gt 0 ] && ! stopper_died; do
			sleep 0.1
			st_w=$((st_w - 1))
		done
		st_try=$((st_try + 1))
		[ "$st_try" -gt 3 ] && die 85 "another stop of $name does not end"
	done
	printf '%s %s\n' "$$" "$mystart" >"$d/stopping/owner"
	: >"$d/stop"
	phase=stopping since=$(now)
	save
	unlock
	st_pg=$pid st_ps=$pidstart st_inc=$inc
	term_drain "$st_pg" "$st_ps" "$st_g"
	st_bs=-
	[ -n "$c_before" ] && before_stop
	kill_confirm "$st_pg" "$st_ps"
	st_i=50
	while [ ! -f "$d/rc.$st_inc" ] && [ "$st_i" -gt 0 ] && alive "$runner" "$runnerstart"; do
		sleep 0.1
		st_i=$((st_i - 1))
	done
	lock
	load
	[ -f "$d/rc.$st_inc" ] && IFS= read -r lastexit <"$d/rc.$st_inc"
	phase=stopped since=$(now) bsexit=$st_bs why=-
	save
	rm -f "$d/stopping/owner"
	rmdir "$d/stopping" 2>/dev/null
	unlock
	cat_state
}

# before_stop: runs the before-stop program once, within its bound, its
# output and exit appended to out.log.
before_stop() {
	sec=
	(run_prog "$st_inc" - "$c_before" exec) </dev/null >>"$d/out.log" 2>&1 4>&1 &
	bs_p=$!
	pstart "$bs_p"
	bs_s=$ps_start
	bs_i=$((c_beforemax * 10))
	while [ "$bs_i" -gt 0 ] && alive "$bs_p" "$bs_s"; do
		sleep 0.1
		bs_i=$((bs_i - 1))
	done
	alive "$bs_p" "$bs_s" && kill_confirm "$bs_p" "$bs_s"
	wait "$bs_p"
	st_bs=$?
	printf 'boxfs: before-stop exited %s\n' "$st_bs" >>"$d/out.log"
}

# do_log OFF MAX: "base end" then up to MAX bytes of the output from the
# offset OFF (counted from the first byte ever written).
do_log() {
	lg_off=$1 lg_max=$2
	case $lg_off$lg_max in *[!0-9]*) die 80 "bad log offset" ;; esac
	[ -f "$d/vars" ] || die 81 "no launch named $name"
	if [ ! -f "$d/out.log" ]; then
		printf '0 0\n'
		return
	fi
	lg_i=0
	while :; do
		exec 4<"$d/out.log"
		set -- $(ls -iL "/proc/$$/fd/4")
		lg_fino=$1
		lg_ino=- lg_base=0
		[ -f "$d/out.base" ] && read -r lg_ino lg_base <"$d/out.base"
		[ "$lg_ino" = - ] || [ "$lg_ino" = "$lg_fino" ] && break
		exec 4<&-
		lg_i=$((lg_i + 1))
		[ "$lg_i" -gt 40 ] && die 85 "out.log keeps changing"
		sleep 0.05
	done
	lg_end=$((lg_base + $(wc -c <"/proc/$$/fd/4")))
	printf '%s %s\n' "$lg_base" "$lg_end"
	[ "$lg_off" -lt "$lg_base" ] && lg_off=$lg_base
	[ "$lg_off" -lt "$lg_end" ] || return 0
	[ $((lg_end - lg_off)) -lt "$lg_max" ] && lg_max=$((lg_end - lg_off))
	tail -c +$((lg_off - lg_base + 1)) <&4 | head -c "$lg_max"
}

do_remove() {
	[ -d "$d" ] || die 81 "no launch named $name"
	lock
	load
	case $phase in starting | running | restarting | stopping)
		unlock
		die 85 "the launch $name runs: stop it first"
		;;
	esac
	# The supervisor of a launch just stopped may still be writing its
	# last state or output into $d: tried again while it ends.
	tries=0
	until rm -rf "$d" 2>/dev/null; do
		tries=$((tries + 1))
		[ "$tries" -lt 20 ] || { rm -rf "$d"; return; }
		sleep 0.1
	done
}

if [ "$mode" != list ]; then
	case $name in '' | .* | -* | *[!A-Za-z0-9._-]*) die 80 "bad launch name $name" ;; esac
	[ -L "$d" ] && die 84 "$d is a symbolic link"
fi
case $mode in
start) do_start 0 ;;
restart) do_restart ;;
supervise) do_supervise ;;
watchdog) do_watchdog ;;
stop) do_stop "${1:-}" ;;
state)
	[ -f "$d/state" ] || die 81 "no launch named $name"
	cat_state
	;;
list)
	set +f
	for f in "$spool"/*/state; do
		[ -f "$f" ] && cat "$f"
	done
	:
	;;
log) do_log "$1" "$2" ;;
remove) do_remove ;;
*) die 80 "unknown mode $mode" ;;
esac
