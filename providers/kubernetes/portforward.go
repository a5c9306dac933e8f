package kubernetes

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/boxfs/boxfs/providers"
)

var _ providers.Endpointer = (*Box)(nil)

// forward is one port of the box reachable on a loopback port here.
type forward struct {
	addr string
	stop chan struct{}
	done chan struct{} // closed when the forwarder ended
}

// Endpoint returns a loopback address on this machine ("127.0.0.1:N") that
// reaches port of the box, through the pods/portforward subresource
// (WebSocket tunnel first, SPDY when the server refuses it). The forward
// lasts until the box is destroyed, or until its connection breaks: the
// next call then makes a new one.
func (b *Box) Endpoint(ctx context.Context, port int) (string, error) {
	const op = "kubernetes.Endpoint"
	if err := b.gone(op); err != nil {
		return "", err
	}
	if port < 1 || port > 65535 {
		return "", providers.Errorf(providers.Invalid, op, "port %d is outside 1..65535", port).WithBox(b.id)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if f := b.fwd[port]; f != nil {
		select {
		case <-f.done:
		default:
			return f.addr, nil
		}
	}
	f, err := b.startForward(ctx, port)
	if err != nil {
		return "", err
	}
	if b.fwd == nil {
		b.fwd = map[int]*forward{}
	}
	b.fwd[port] = f
	return f.addr, nil
}

// startForward starts a forwarder of port on a free loopback port.
func (b *Box) startForward(ctx context.Context, port int) (*forward, error) {
	const op = "kubernetes.Endpoint"
	u := b.p.core.Post().Namespace(b.p.namespace).Resource("pods").Name(b.id).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(b.p.cfg)
	if err != nil {
		return nil, providers.E(providers.Invalid, op, err).WithBox(b.id)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	tunnel, err := portforward.NewSPDYOverWebsocketDialer(u, b.p.cfg)
	if err != nil {
		return nil, providers.E(providers.Invalid, op, err).WithBox(b.id)
	}
	dialer = portforward.NewFallbackDialer(tunnel, dialer, shouldFallback)
	f := &forward{stop: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan struct{})
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, f.stop, ready, io.Discard, io.Discard)
	if err != nil {
		return nil, providers.E(providers.Invalid, op, err).WithBox(b.id)
	}
	var ferr error
	go func() {
		ferr = pf.ForwardPorts()
		close(f.done)
	}()
	select {
	case <-ready:
	case <-f.done:
		return nil, b.lost(ctx, op, fmt.Errorf("port forward of %d: %w", port, ferr))
	case <-ctx.Done():
		close(f.stop)
		<-f.done
		return nil, providers.E(0, op, ctx.Err()).WithBox(b.id)
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		close(f.stop)
		return nil, providers.Errorf(providers.Unknown, op, "port forward of %d has no local port: %v", port, err).WithBox(b.id)
	}
	f.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local)))
	return f, nil
}

// closeForwards stops every forward of the box.
func (b *Box) closeForwards() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for port, f := range b.fwd {
		select {
		case <-f.done:
		default:
			close(f.stop)
		}
		delete(b.fwd, port)
	}
}
