package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/boxfs/boxfs/hands/agent"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	app := &cli.App{
		Name:    "boxfs",
		Usage:   "boxes as directories",
		Version: version,
		Commands: []*cli.Command{
			{
				Name:   "agent",
				Usage:  "serve this box's files over SFTP on stdin/stdout (run by boxfs inside a box)",
				Hidden: true,
				// agent.Main parses its own flags (-sha256).
				SkipFlagParsing: true,
				Action: func(c *cli.Context) error {
					return agent.Main(c.Args().Slice())
				},
			},
		},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "boxfs:", err)
		os.Exit(1)
	}
}
