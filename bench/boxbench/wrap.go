package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/boxfs/boxfs/bench/internal/delay"
)

// sftpServer is sftp-server's path in the bench image (boxfs-base).
const sftpServer = "/usr/lib/openssh/sftp-server"

// sftpWrapperMain is `boxbench sftp-wrapper CONTAINER DELAY [ignored...]`:
// what sshfs runs as its ssh_command and the ssh gate runs for rclone. It
// runs `docker exec -i CONTAINER sftp-server` and passes its stdin through
// at once and its stdout back DELAY late (delay.Copy), so every sftp round
// trip costs DELAY more. Arguments after DELAY (ssh's, which sshfs appends)
// are ignored.
func sftpWrapperMain(args []string) error {
	if len(args) < 2 {
		return errors.New("usage: boxbench sftp-wrapper CONTAINER DELAY [ignored ssh arguments]")
	}
	d, err := time.ParseDuration(args[1])
	if err != nil {
		return fmt.Errorf("delay %q: %v", args[1], err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	cmd := exec.CommandContext(ctx, "docker", "exec", "-i", args[0], sftpServer)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdin = os.Stdin
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	// stdout is closed when sftp-server ends: then the wait below returns.
	copied := make(chan error, 1)
	go func() {
		_, err := delay.Copy(os.Stdout, out, d)
		copied <- err
	}()
	cerr := <-copied
	werr := cmd.Wait()
	if werr != nil {
		return werr
	}
	return cerr
}

// sshGateMain is `boxbench ssh-gate -listen ADDR -key FILE -- WRAPPER...`:
// an SSH server on a loopback address that accepts the one client key in
// FILE.pub and serves the "sftp" subsystem of each session by running
// WRAPPER (the sftp wrapper above), with no shell, exec or forwarding. It
// exists because Debian's rclone (1.60) has no option to run an external
// ssh command; rclone reaches the same container through the same wrapper
// this way, with one local SSH hop more than sshfs. It writes the
// client's private key to FILE and its host key is made new at start.
func sshGateMain(args []string) error {
	var listen, keyFile string
	var wrapper []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-listen":
			i++
			listen = args[i]
		case "-key":
			i++
			keyFile = args[i]
		case "--":
			wrapper = args[i+1:]
			i = len(args)
		default:
			return fmt.Errorf("ssh-gate: unknown argument %q", args[i])
		}
	}
	if listen == "" || keyFile == "" || len(wrapper) == 0 {
		return errors.New("usage: boxbench ssh-gate -listen ADDR -key FILE -- WRAPPER ARGS...")
	}
	clientPub, err := writeClientKey(keyFile)
	if err != nil {
		return err
	}
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	hostSigner, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		return err
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
			if string(k.Marshal()) == string(clientPub.Marshal()) {
				return nil, nil
			}
			return nil, errors.New("unknown key")
		},
	}
	cfg.AddHostKey(hostSigner)
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	context.AfterFunc(ctx, func() { l.Close() })
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveSSH(ctx, c, cfg, wrapper)
		}()
	}
}

// writeClientKey makes the client's key pair, writes the private half to
// file (OpenSSH PEM, 0600) and returns the public half.
func writeClientKey(file string) (ssh.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "boxbench")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	return ssh.NewPublicKey(pub)
}

func serveSSH(ctx context.Context, nc net.Conn, cfg *ssh.ServerConfig, wrapper []string) {
	defer nc.Close()
	conn, chans, reqs, err := ssh.NewServerConn(nc, cfg)
	if err != nil {
		log.Printf("ssh-gate: handshake: %v", err)
		return
	}
	defer conn.Close()
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	defer wg.Wait()
	for nch := range chans {
		if nch.ChannelType() != "session" {
			nch.Reject(ssh.UnknownChannelType, "sessions only")
			continue
		}
		ch, creqs, err := nch.Accept()
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveSession(ctx, ch, creqs, wrapper)
		}()
	}
}

// serveSession runs the wrapper for a "subsystem sftp" request and refuses
// every other request that would start something (exec, shell).
func serveSession(ctx context.Context, ch ssh.Channel, reqs <-chan *ssh.Request, wrapper []string) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "subsystem" || len(req.Payload) < 4 || string(req.Payload[4:]) != "sftp" {
			req.Reply(false, nil)
			continue
		}
		req.Reply(true, nil)
		go ssh.DiscardRequests(reqs)
		status := runWrapper(ctx, ch, wrapper)
		ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(status)}))
		return
	}
}

func runWrapper(ctx context.Context, ch ssh.Channel, wrapper []string) int {
	cmd := exec.CommandContext(ctx, wrapper[0], wrapper[1:]...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Stderr = ch.Stderr()
	in, err := cmd.StdinPipe()
	if err != nil {
		return 255
	}
	cmd.Stdout = ch
	if err := cmd.Start(); err != nil {
		log.Printf("ssh-gate: %v", err)
		return 255
	}
	go func() {
		io.Copy(in, ch)
		in.Close()
	}()
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		return 255
	}
	return 0
}
