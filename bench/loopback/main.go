// Command loopback mounts a host directory through go-fuse's loopback file
// system: the benchmarks' FUSE ceiling (what any go-fuse file system pays
// per operation before doing any work of its own).
//
// Usage:
//
//	loopback [-debug] DIR MOUNTPOINT
//
// It uses go-fuse's defaults (1 s entry and attribute timeouts) with a
// direct mount, serves until SIGINT or SIGTERM, then unmounts.
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	debug := flag.Bool("debug", false, "print the FUSE protocol on stderr")
	flag.Parse()
	if flag.NArg() != 2 {
		log.Fatal("usage: loopback [-debug] DIR MOUNTPOINT")
	}
	root, err := fs.NewLoopbackRoot(flag.Arg(0))
	if err != nil {
		log.Fatal(err)
	}
	sec := time.Second
	server, err := fs.Mount(flag.Arg(1), root, &fs.Options{
		AttrTimeout:  &sec,
		EntryTimeout: &sec,
		MountOptions: fuse.MountOptions{
			FsName:      "loopback",
			Name:        "loopback",
			DirectMount: true,
			Debug:       *debug,
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		if err := server.Unmount(); err != nil {
			log.Printf("unmount: %v", err)
		}
	}()
	server.Wait()
}
