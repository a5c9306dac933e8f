package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/boxfs/boxfs/boxes"
)

func suspendCommand() *cli.Command {
	return &cli.Command{
		Name:      "suspend",
		Usage:     "suspend a box: it stops costing what a running box costs, and keeps what its provider keeps",
		ArgsUsage: "NAME",
		Description: `A box with a command running, or a file of its work/ open, is refused
unless --force, which kills its commands first. Dirty files are pushed
first; a suspend that fails leaves the box running. facts.json's suspend
says what the box keeps: memory, filesystem, or a snapshot.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "kill the box's running commands first"},
		},
		BashComplete: completeBoxNames,
		Action: func(c *cli.Context) error {
			box, err := needName(c.Args().Slice(), "suspend", 1)
			if err != nil {
				return err
			}
			msg := "suspend"
			if c.Bool("force") {
				msg = "suspend force"
			}
			return boxCtl(c, box, msg, func(ctx context.Context, t *target) error {
				return t.m.Suspend(ctx, box, c.Bool("force"))
			})
		},
	}
}

func resumeCommand() *cli.Command {
	return &cli.Command{
		Name:         "resume",
		Usage:        "resume a suspended box",
		ArgsUsage:    "NAME",
		BashComplete: completeBoxNames,
		Action: func(c *cli.Context) error {
			box, err := needName(c.Args().Slice(), "resume", 1)
			if err != nil {
				return err
			}
			return boxCtl(c, box, "resume", func(ctx context.Context, t *target) error {
				return t.m.Resume(ctx, box)
			})
		},
	}
}

func snapshotCommand() *cli.Command {
	return &cli.Command{
		Name:      "snapshot",
		Usage:     "save a box's filesystem as a snapshot new boxes start from; print its line",
		ArgsUsage: "NAME [SNAPSHOT]",
		Description: `SNAPSHOT names the snapshot (default snap-YYYYMMDD-HHMMSS, UTC). The line
printed is the box's snapshots file's: name, id, time. Make a box from it
with: boxfs new NEWNAME snapshot=ID.`,
		BashComplete: completeBoxNames,
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			if len(args) == 2 {
				args = args[:1]
			}
			box, err := needName(args, "snapshot", 1)
			if err != nil {
				return err
			}
			snap := c.Args().Get(1)
			if snap == "" {
				snap = "snap-" + time.Now().UTC().Format("20060102-150405")
			}
			if err := boxes.CheckSnapshotName(snap); err != nil {
				return usagef("snapshot: %v", specError(err))
			}
			return withTarget(c, func(ctx context.Context, e *env, t *target) error {
				line, err := takeSnapshot(ctx, t, box, snap)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(e.stdout, line)
				return err
			})
		},
	}
}

// takeSnapshot snapshots box as snap, through the mount or directly, and
// returns the line of the box's snapshots file that records it.
func takeSnapshot(ctx context.Context, t *target, box, snap string) (string, error) {
	if !t.mounted() {
		ctx, cancel := context.WithTimeout(ctx, createTimeout)
		defer cancel()
		s, err := t.m.Snapshot(ctx, box, snap)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s %s %s", s.Name, s.ID, s.At.UTC().Format(time.RFC3339)), nil
	}
	dir, err := t.boxDir(box)
	if err != nil {
		return "", err
	}
	errFile := filepath.Join(dir, "err")
	if err := t.writeCtl(filepath.Join(dir, "ctl"), errFile, box, "snapshot "+snap); err != nil {
		return "", err
	}
	b, err := readAll(filepath.Join(dir, "snapshots"), errFile, box)
	if err != nil {
		return "", err
	}
	return findSnapshot(string(b), snap), nil
}

// findSnapshot returns the line of a snapshots file naming snap.
func findSnapshot(file, snap string) string {
	for _, l := range strings.Split(file, "\n") {
		if name, _, _ := strings.Cut(l, " "); name == snap {
			return l
		}
	}
	return ""
}

// boxCtl writes msg to the box's ctl when mounted, or calls direct (within
// the create bound) when not.
func boxCtl(c *cli.Context, box, msg string, direct func(ctx context.Context, t *target) error) error {
	return withTarget(c, func(ctx context.Context, e *env, t *target) error {
		if t.mounted() {
			dir, err := t.boxDir(box)
			if err != nil {
				return err
			}
			return t.writeCtl(filepath.Join(dir, "ctl"), filepath.Join(dir, "err"), box, msg)
		}
		ctx, cancel := context.WithTimeout(ctx, createTimeout)
		defer cancel()
		return direct(ctx, t)
	})
}
