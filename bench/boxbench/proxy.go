package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/bench/internal/delay"
)

// delayProxyMain is `boxbench delay-proxy -listen SOCK -upstream SOCK
// -delay D`: a unix socket in front of the Docker daemon's whose answers
// come D late (delay.Proxy). boxfs's daemon gets DOCKER_HOST=unix://SOCK,
// so every Docker API call, and every round trip on a hijacked exec stream
// (the agent channel), costs D more.
func delayProxyMain(args []string) error {
	fl := flag.NewFlagSet("delay-proxy", flag.ContinueOnError)
	listen := fl.String("listen", "", "unix socket to listen on")
	upstream := fl.String("upstream", "/var/run/docker.sock", "unix socket of the daemon")
	d := fl.Duration("delay", 0, "delay added to every answer")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *listen == "" {
		return errors.New("delay-proxy: -listen is required")
	}
	os.Remove(*listen)
	l, err := net.Listen("unix", *listen)
	if err != nil {
		return err
	}
	defer os.Remove(*listen)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	p := &delay.Proxy{Delay: *d, Dial: func(ctx context.Context) (net.Conn, error) {
		dl := net.Dialer{Timeout: 10 * time.Second}
		return dl.DialContext(ctx, "unix", *upstream)
	}}
	return p.Serve(ctx, l)
}
