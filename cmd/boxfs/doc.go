// Command boxfs mounts boxes — a directory on this machine, a Docker
// container, a cloud sandbox — as directories, and runs commands in them by
// writing to a file.
//
// Usage:
//
//	boxfs mount MOUNTPOINT       serve the namespace at MOUNTPOINT
//	boxfs new NAME               make a box
//	boxfs exec NAME -- CMD...    run a command in a box
//	boxfs ls | rm | release | seed | pull | facts | receipts | umount | version
//
// See docs/cli.md for every command and flag.
package main
