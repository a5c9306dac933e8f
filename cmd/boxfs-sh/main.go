// Command boxfs-sh is boxfs sh as a program of its own: a shell that runs
// in the box its working directory belongs to, for a host to name as its
// shell (pi's shellPath, make SHELL=, $SHELL). It does what `boxfs sh`
// does (see `boxfs sh --help` and docs/agents.md), and starts in a few
// milliseconds: it links none of the providers, whose package
// initialisation the boxfs binary pays at every start (about 30 ms).
package main

import (
	"os"

	"github.com/boxfs/boxfs/internal/boxsh"
)

func main() {
	os.Exit(boxsh.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
