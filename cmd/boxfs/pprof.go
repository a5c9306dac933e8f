package main

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
)

// pprofEnv names a loopback address (e.g. 127.0.0.1:6060) on which a
// mounting daemon serves Go's profiles (/debug/pprof/), for benchmarks:
// BOXFS_PPROF=127.0.0.1:6060 boxfs mount ...
const pprofEnv = "BOXFS_PPROF"

// startPprof serves the profiles when BOXFS_PPROF asks for it. Only
// loopback addresses are taken: the profiles show paths and command lines.
func startPprof(log *slog.Logger) {
	addr := os.Getenv(pprofEnv)
	if addr == "" {
		return
	}
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		log.Error(pprofEnv+" must be a loopback address:port; profiles not served", "addr", addr)
		return
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("profiles not served", "addr", addr, "err", err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	log.Info("serving Go profiles", "addr", "http://"+addr+"/debug/pprof/")
	go http.Serve(l, mux)
}
