package agent

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"syscall"
)

// maxPacket is the largest READ or WRITE payload the client asks for and
// the server answers (pkg/sftp accepts packets up to 256 KiB).
const maxPacket = 128 << 10

// Main runs "boxfs agent": it serves the box's files on stdin and stdout
// until stdin closes, then returns nil. It writes nothing but protocol to
// stdout, and little to stderr.
//
// Flags:
//
//	-sha256 HEX   refuse to serve unless this binary's SHA-256 is HEX (the
//	              host names the binary it uploaded, so a stale or partly
//	              written file never serves)
//	-direct       before serving, follow the host's direct-channel
//	              handshake on stdin (see directHandshake): serve a
//	              connection the host dials, or stdin and stdout
//	-commands     run commands for the host (ServeCommands) instead of
//	              serving files
//	-watch ROOT   report the changes under ROOT on stdout as they happen
//	              (WatchTree) until ROOT goes away
//	-watch-limit N  watch at most N directories (0: the default)
//	-tar ROOT     write one tar of the NUL-separated names on stdin,
//	              relative to ROOT, to stdout (WriteTar) and exit: 0, 2
//	              when some names were left out, 64+errno when ROOT
//	              cannot be archived
func Main(args []string) error {
	fs := flag.NewFlagSet("boxfs agent", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	sum := fs.String("sha256", "", "refuse to serve unless this binary's SHA-256 is `hex`")
	direct := fs.Bool("direct", false, "follow the host's direct-channel handshake on stdin first")
	commands := fs.Bool("commands", false, "run commands for the host instead of serving files")
	tarRoot := fs.String("tar", "", "write a tar of the names on stdin, relative to `root`, and exit")
	watchRoot := fs.String("watch", "", "report the changes under `root` on stdout")
	watchLimit := fs.Int("watch-limit", 0, "watch at most `n` directories (0: the default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("agent: unexpected arguments %q", fs.Args())
	}
	if *tarRoot != "" {
		tarMain(*tarRoot)
	}
	if *watchRoot != "" {
		return WatchTree(*watchRoot, *watchLimit, os.Stdout)
	}
	if *sum != "" {
		if err := verifySelf(*sum); err != nil {
			return err
		}
	}
	in, out, err := protocolStreams()
	if err != nil {
		return err
	}
	if *commands {
		return ServeCommands(in, out)
	}
	if *direct {
		br := bufio.NewReader(in)
		r, w, err := negotiateDirect(br, out)
		if err != nil {
			return err
		}
		if r != nil {
			go watchLifeline(br, w)
			return Serve(r, w)
		}
		in = br
	}
	return Serve(in, out)
}

// tarMain runs "boxfs agent -tar ROOT" and exits with its status.
func tarMain(root string) {
	err := WriteTar(os.Stdin, os.Stdout, root, os.Stderr)
	if err == nil {
		os.Exit(0)
	}
	fmt.Fprintf(os.Stderr, "boxfs agent: tar: %v\n", err)
	var errno syscall.Errno
	if !errors.Is(err, errPartial) && errors.As(err, &errno) && errno > 0 && errno < 128 {
		os.Exit(tarErrnoBase + int(errno))
	}
	os.Exit(tarPartial)
}
