// Command boxfs mounts boxes — a directory on this machine, a Docker
// container, a cloud sandbox — as directories, and runs commands in them by
// writing to a file.
//
// Usage:
//
//	boxfs mount MOUNTPOINT [--background] [-o opts]   serve the namespace at MOUNTPOINT
//	boxfs umount MOUNTPOINT                          push dirty files, unmount
//	boxfs new NAME [key=value ...] [--env ENV]       make a box
//	boxfs ls [--json]                                list the boxes
//	boxfs exec NAME [--] CMD [ARG ...]               run a command in a box, exit with its status
//	boxfs launch NAME PROG [flags] -- ARGV...        keep a program running in a box
//	boxfs launch stop|restart|status|logs NAME PROG  control and read it; launch ls NAME
//	boxfs rm NAME | release NAME | facts NAME        destroy, stop presenting, describe a box
//	boxfs suspend [--force] NAME | resume NAME       suspend a box, resume it
//	boxfs snapshot NAME [SNAPSHOT]                   save a box's filesystem as a snapshot
//	boxfs seed NAME DIR | pull NAME DIR              move a host tree in or out, one tar
//	boxfs receipts | version | completion SHELL
//
// One mount serves one state directory (--state, default /var/lib/boxfs for
// root, else $XDG_STATE_HOME/boxfs): it holds an exclusive lock on
// STATE/lock and records itself in STATE/mount.json. The other commands
// find it there and work through the mount's files (MOUNT/ctl,
// MOUNT/NAME/exec ...); with nothing mounted they open the state directory
// themselves under a shared lock. Bad flags, arguments and configuration
// exit 2 with one line; a failed operation exits 1; exec exits with its
// command's status.
//
// Build it static (CGO_ENABLED=0 go build ./cmd/boxfs): the binary is also
// the agent boxfs uploads into boxes, in every Linux box; a dynamic build
// (cgo on) is the agent only in boxes with the glibc it needs, and mount
// says so. See docs/cli.md for every command and
// flag, docs/config.md for the configuration file.
package main
