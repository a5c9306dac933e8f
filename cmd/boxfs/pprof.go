package main

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
)

// pprofEnv asks a mounting daemon to serve Go's profiles (/debug/pprof/),
// for benchmarks, on a unix socket only its user can open: "1" for
// pprof.sock in the state directory, an absolute path for that socket.
// The profiles show paths and command lines, so they are never served
// over TCP, where every local user and every process of a local box could
// read them.
//
//	BOXFS_PPROF=1 boxfs mount ...
//	curl --unix-socket STATE/pprof.sock -o cpu.pprof 'http://boxfs/debug/pprof/profile?seconds=20'
const pprofEnv = "BOXFS_PPROF"

// pprofSocket is the socket's name in the state directory.
const pprofSocket = "pprof.sock"

// startPprof serves the profiles when BOXFS_PPROF asks for it, and returns
// what removes the socket. The state directory is locked by this daemon,
// so a socket left there by an earlier one is removed first.
func startPprof(log *slog.Logger, state string) (stop func()) {
	val := os.Getenv(pprofEnv)
	path := ""
	switch {
	case val == "":
		return func() {}
	case val == "1":
		path = filepath.Join(state, pprofSocket)
	case filepath.IsAbs(val):
		path = val
	default:
		log.Error(pprofEnv+" must be 1 (a socket in the state directory) or the absolute path of a unix socket; profiles not served", "value", val)
		return func() {}
	}
	os.Remove(path)
	// The state directory is 0700, so no one else reaches the socket
	// before it is made 0600.
	l, err := net.Listen("unix", path)
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		log.Error("profiles not served", "socket", path, "err", err)
		if l != nil {
			l.Close()
		}
		return func() {}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	log.Info("serving Go profiles", "socket", path, "try", "curl --unix-socket "+path+" http://boxfs/debug/pprof/")
	go http.Serve(l, mux)
	return func() { l.Close() }
}
