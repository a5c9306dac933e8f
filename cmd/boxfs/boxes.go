package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
)

// createTimeout bounds making a box (a cloud sandbox can take a while).
const createTimeout = 5 * time.Minute

// withTarget runs fn on the command's target, closing it after.
func withTarget(c *cli.Context, fn func(ctx context.Context, e *env, t *target) error) error {
	e, err := newEnv(c, false)
	if err != nil {
		return err
	}
	ctx := c.Context
	t, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer t.close()
	return namedOp(c.Command.Name, fn(ctx, e, t))
}

// namedOp names the command in an error from the layers below, which call
// their operation "boxes" (direct) or "boxfs" (through the mount): the user
// ran `boxfs exec`, so the line says "exec BOX: ...".
func namedOp(cmd string, err error) error {
	var pe *providers.Error
	if cmd == "" || !errors.As(err, &pe) || err != error(pe) || (pe.Op != "boxes" && pe.Op != "boxfs") {
		return err
	}
	named := *pe
	named.Op = cmd
	return &named
}

func newCommand() *cli.Command {
	return &cli.Command{
		Name:      "new",
		Usage:     "make a box and present it as NAME",
		ArgsUsage: "NAME [key=value ...]",
		Description: `Keys: provider, image, lifetime, cpus, memory, network, workspace, user,
isolation, gpu, region, snapshot, ports, env.NAME, label.NAME, and resume=auto
(a use of work/ resumes the box when it is suspended) (docs/namespace.md).
--env takes an environment of the configuration; keys given here replace its.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "env", Aliases: []string{"e"}, Usage: "start from the configuration's environment `ENV`"},
		},
		BashComplete: completeNothing,
		Action: func(c *cli.Context) error {
			name, err := needName(c.Args().Slice(), "new", -1)
			if err != nil {
				return err
			}
			return withTarget(c, func(ctx context.Context, e *env, t *target) error {
				var pairs []string
				if envName := c.String("env"); envName != "" {
					en, ok := e.cfg.Environments[envName]
					if !ok {
						return usagef("new: no environment %q in the configuration%s", envName, inFile(e.cfg))
					}
					pairs = en.pairs()
				}
				pairs = mergePairs(pairs, c.Args().Slice()[1:])
				auto, specPairs, err := boxes.SplitResume(pairs)
				if err != nil {
					return usagef("new %s: %v", name, specError(err))
				}
				prov, spec, set, err := boxes.ParseNew(specPairs)
				if err != nil {
					return usagef("new %s: %v", name, specError(err))
				}
				if t.mounted() {
					words := []string{"new", ctlQuote(name)}
					for _, p := range pairs {
						words = append(words, ctlQuotePair(p))
					}
					return t.writeCtl(t.path("ctl"), t.path("err"), name, strings.Join(words, " "))
				}
				ctx, cancel := context.WithTimeout(ctx, createTimeout)
				defer cancel()
				if err := t.m.CreateWith(ctx, name, prov, spec, set); err != nil || !auto {
					return err
				}
				b, err := t.m.Box(name)
				if err != nil {
					return err
				}
				return b.SetResumeAuto(true)
			})
		},
	}
}

func inFile(cfg *Config) string {
	if cfg.file == "" {
		return " (none read)"
	}
	return " " + cfg.file
}

// boxRow is one line of `boxfs ls`.
type boxRow = boxes.Info

func lsCommand() *cli.Command {
	return &cli.Command{
		Name:  "ls",
		Usage: "list the boxes: name, provider, id, state",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print a JSON array"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("ls takes no arguments (see boxfs ls --help)")
			}
			return withTarget(c, func(ctx context.Context, e *env, t *target) error {
				var rows []boxRow
				if t.mounted() {
					b, err := readAll(t.path("ctl"), t.path("err"), "")
					if err != nil {
						return err
					}
					rows = parseListing(string(b))
				} else {
					rows = t.m.List()
				}
				if rows == nil {
					rows = []boxRow{}
				}
				if c.Bool("json") {
					enc := json.NewEncoder(e.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(rows)
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tPROVIDER\tID\tSTATE")
				for _, r := range rows {
					id := r.ID
					if id == "" {
						id = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, r.Provider, id, r.State)
				}
				return tw.Flush()
			})
		},
	}
}

// parseListing parses the root ctl: "name provider id state" per line. A
// name may hold blanks; the other three never do.
func parseListing(s string) []boxRow {
	var rows []boxRow
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		n := len(f)
		id := f[n-2]
		if id == "-" {
			id = ""
		}
		rows = append(rows, boxRow{Name: strings.Join(f[:n-3], " "), Provider: f[n-3], ID: id, State: f[n-1]})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows
}

// boxVerbCommand is a command that writes one verb to a box's ctl when
// mounted, or calls direct when not.
func boxVerbCommand(name, usage, verb string, direct func(ctx context.Context, t *target, box string) error) *cli.Command {
	return &cli.Command{
		Name:         name,
		Usage:        usage,
		ArgsUsage:    "NAME",
		BashComplete: completeBoxNames,
		Action: func(c *cli.Context) error {
			box, err := needName(c.Args().Slice(), name, 1)
			if err != nil {
				return err
			}
			return withTarget(c, func(ctx context.Context, e *env, t *target) error {
				// A declared box never made has nothing to end or push:
				// ending it would make it first.
				if st, ok := t.boxState(box); ok && st == boxes.StateDeclared {
					fmt.Fprintf(e.stderr, "boxfs: %s: box %q was never made (the configuration declares it); nothing to do\n", name, box)
					return nil
				}
				if t.mounted() {
					dir, err := t.boxDir(box)
					if err != nil {
						return err
					}
					if err := t.writeCtl(filepath.Join(dir, "ctl"), filepath.Join(dir, "err"), box, verb); err != nil {
						return err
					}
					if verb == "destroy" {
						return t.writeCtl(t.path("ctl"), t.path("err"), box, "forget "+ctlQuote(box))
					}
					return nil
				}
				ctx, cancel := context.WithTimeout(ctx, createTimeout)
				defer cancel()
				return direct(ctx, t, box)
			})
		},
	}
}

// boxState returns the box's state as ls shows it, if it is listed.
func (t *target) boxState(box string) (string, bool) {
	var rows []boxRow
	if t.mounted() {
		b, err := readAll(t.path("ctl"), "", "")
		if err != nil {
			return "", false
		}
		rows = parseListing(string(b))
	} else {
		rows = t.m.List()
	}
	r, ok := findBoxRow(rows, box)
	return r.State, ok
}

func findBoxRow(rows []boxRow, name string) (boxRow, bool) {
	for _, r := range rows {
		if r.Name == name {
			return r, true
		}
	}
	return boxRow{}, false
}

func rmCommand() *cli.Command {
	return boxVerbCommand("rm", "destroy a box (end it and everything it runs) and drop its name", "destroy",
		func(ctx context.Context, t *target, box string) error {
			if err := t.m.Destroy(ctx, box); err != nil {
				return err
			}
			return t.m.Forget(ctx, box)
		})
}

func releaseCommand() *cli.Command {
	return boxVerbCommand("release", "push a box's dirty files, then stop presenting it (it runs on until its lifetime)", "release",
		func(ctx context.Context, t *target, box string) error {
			return t.m.Release(ctx, box)
		})
}

func factsCommand() *cli.Command {
	return &cli.Command{
		Name:         "facts",
		Usage:        "print what a box is and has (facts.json)",
		ArgsUsage:    "NAME",
		BashComplete: completeBoxNames,
		Action: func(c *cli.Context) error {
			box, err := needName(c.Args().Slice(), "facts", 1)
			if err != nil {
				return err
			}
			return withTarget(c, func(ctx context.Context, e *env, t *target) error {
				var b []byte
				if t.mounted() {
					dir, err := t.boxDir(box)
					if err != nil {
						return err
					}
					if b, err = readAll(filepath.Join(dir, "facts.json"), filepath.Join(dir, "err"), box); err != nil {
						return err
					}
				} else {
					ctx, cancel := context.WithTimeout(ctx, createTimeout)
					defer cancel()
					if b, err = t.m.Facts(ctx, box); err != nil {
						return err
					}
				}
				_, err := e.stdout.Write(b)
				return err
			})
		},
	}
}

// boxNames lists the names recorded in the state directory and declared
// by the configuration, for completion. It takes no lock.
func boxNames(e *env) []string {
	seen := map[string]bool{}
	ents, _ := os.ReadDir(filepath.Join(e.state, "boxes"))
	for _, en := range ents {
		if n, ok := strings.CutSuffix(en.Name(), ".json"); ok {
			seen[n] = true
		}
	}
	for n := range e.cfg.Boxes {
		seen[n] = true
	}
	return sortedKeys(seen)
}
