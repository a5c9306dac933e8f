package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/syncengine"
	"github.com/boxfs/boxfs/syncengine/safetar"
)

// syncTimeout bounds one seed or pull.
const syncTimeout = 6 * time.Hour

func seedCommand() *cli.Command {
	return &cli.Command{
		Name:      "seed",
		Usage:     "copy a host directory into a box's workspace (one tar)",
		ArgsUsage: "NAME DIR",
		Description: `Copies DIR's regular files and directories into the box's workspace, replacing
files there and deleting nothing. Links, fifos, sockets and devices on the host
are skipped and counted. Through a mount, the mount is told afterwards (sync),
so its listing shows the new files at once.`,
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "exclude", Usage: "leave out paths matching `PATTERN` (repeatable)"},
			&cli.StringSliceFlag{Name: "read-only", Usage: "seed paths matching `PATTERN` without write bits (repeatable)"},
			&cli.BoolFlag{Name: "json", Usage: "print the receipt as JSON"},
		},
		BashComplete: completeBoxNames,
		Action: func(c *cli.Context) error {
			box, dir, err := boxAndDir(c, "seed")
			if err != nil {
				return err
			}
			if fi, err := os.Stat(dir); err != nil {
				return providers.E(0, "seed", unwrapPathError(err)).WithPath(dir)
			} else if !fi.IsDir() {
				return providers.Errorf(providers.Invalid, "seed", "not a directory").WithPath(dir)
			}
			opts := syncengine.SeedOptions{Exclude: c.StringSlice("exclude"), ReadOnly: c.StringSlice("read-only")}
			if err := opts.Exclude.Check(); err != nil {
				return usagef("seed --exclude: %v", specError(err))
			}
			if err := opts.ReadOnly.Check(); err != nil {
				return usagef("seed --read-only: %v", specError(err))
			}
			return withSync(c, box, func(ctx context.Context, e *env, f *boxes.Manager) (syncengine.Receipt, error) {
				p := newProgress(e.stderr, "seed "+box, tarSize(dir))
				defer p.finish()
				return f.SeedProgress(ctx, box, dir, opts, p.update)
			}, "seeded")
		},
	}
}

func pullCommand() *cli.Command {
	return &cli.Command{
		Name:      "pull",
		Usage:     "bring a box's workspace into a host directory (incremental, one tar)",
		ArgsUsage: "NAME DIR",
		Description: `Brings what changed in the box's workspace since the last pull into DIR (made
if missing): one listing, then one tar of the new and changed files. The box's
tar is untrusted: regular files and directories only, safe names, modes capped.
Through a mount, the mount's dirty files are pushed to the box first (sync).`,
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "exclude", Usage: "never pull (nor delete) paths matching `PATTERN` (repeatable)"},
			&cli.StringSliceFlag{Name: "read-only", Usage: "never replace the host's copy of paths matching `PATTERN` (repeatable)"},
			&cli.BoolFlag{Name: "mirror-deletes", Usage: "remove from DIR what the box removed since the last pull"},
			&cli.StringFlag{Name: "overwrite", Value: "always", Usage: "host files the box changed: always, if_unchanged (since the last pull), never"},
			&cli.BoolFlag{Name: "json", Usage: "print the receipt as JSON"},
		},
		BashComplete: completeBoxNames,
		Action: func(c *cli.Context) error {
			box, dir, err := boxAndDir(c, "pull")
			if err != nil {
				return err
			}
			opts := syncengine.PullOptions{
				Exclude:       c.StringSlice("exclude"),
				ReadOnly:      c.StringSlice("read-only"),
				MirrorDeletes: c.Bool("mirror-deletes"),
				Overwrite:     syncengine.Overwrite(c.String("overwrite")),
			}
			switch opts.Overwrite {
			case syncengine.OverwriteAlways, syncengine.OverwriteIfUnchanged, syncengine.OverwriteNever:
			default:
				return usagef("pull --overwrite %q: want always, if_unchanged or never", opts.Overwrite)
			}
			if err := opts.Exclude.Check(); err != nil {
				return usagef("pull --exclude: %v", specError(err))
			}
			if err := opts.ReadOnly.Check(); err != nil {
				return usagef("pull --read-only: %v", specError(err))
			}
			return withSync(c, box, func(ctx context.Context, e *env, f *boxes.Manager) (syncengine.Receipt, error) {
				p := newProgress(e.stderr, "pull "+box, 0)
				defer p.finish()
				return f.PullProgress(ctx, box, dir, opts, p.update)
			}, "pulled")
		},
	}
}

func boxAndDir(c *cli.Context, cmd string) (box, dir string, err error) {
	args := c.Args().Slice()
	if len(args) != 2 {
		return "", "", usagef("%s: takes a box name and a host directory (boxfs %s NAME DIR)", cmd, cmd)
	}
	if box, err = needName(args[:1], cmd, 1); err != nil {
		return "", "", err
	}
	if dir, err = filepath.Abs(args[1]); err != nil {
		return "", "", usagef("%s: %v", cmd, err)
	}
	return box, dir, nil
}

// withSync runs a seed or pull in this process: directly when nothing is
// mounted; when mounted, next to the mount (bulk data does not go one
// file at a time through the kernel), with `sync` written to the box's ctl
// before (the box is made if only declared, the mount's dirty files
// pushed) and after (the mount sees what changed).
func withSync(c *cli.Context, box string, move func(ctx context.Context, e *env, f *boxes.Manager) (syncengine.Receipt, error), verb string) error {
	e, err := newEnv(c, false)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, syncTimeout)
	defer cancel()
	t, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer t.close()
	f := t.m
	var boxDir string
	if t.mounted() {
		if boxDir, err = t.boxDir(box); err != nil {
			return err
		}
		if err := t.writeCtl(filepath.Join(boxDir, "ctl"), filepath.Join(boxDir, "err"), box, "sync"); err != nil {
			return err
		}
		opts, err := e.boxOptions(false)
		if err != nil {
			return err
		}
		if f, err = boxes.New(opts); err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			f.Shutdown(sctx)
		}()
	}
	rc, err := move(ctx, e, f)
	if t.mounted() && rc.Archives > 0 {
		if serr := t.writeCtl(filepath.Join(boxDir, "ctl"), filepath.Join(boxDir, "err"), box, "sync"); serr != nil {
			e.log.Warn("the mount was not told of the change; it shows it within its attribute timeout", "box", box, "err", serr)
		}
	}
	if err != nil {
		if rc.Files > 0 || rc.Dirs > 0 {
			fmt.Fprintf(e.stderr, "boxfs: %s before the error: %s\n", verb, summary(rc))
		}
		return err
	}
	if c.Bool("json") {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rc)
	}
	fmt.Fprintf(e.stdout, "%s %s: %s\n", verb, box, summary(rc))
	return nil
}

// summary is a receipt in one line.
func summary(rc syncengine.Receipt) string {
	parts := []string{
		plural(rc.Files, "file", "files") + ", " + plural(rc.Dirs, "dir", "dirs") + ", " + sizeString(rc.Bytes),
		plural(rc.Archives, "archive", "archives"),
		rc.Duration.Round(time.Millisecond).String(),
	}
	if rc.Unchanged > 0 {
		parts = append(parts, fmt.Sprintf("%d unchanged", rc.Unchanged))
	}
	if n := len(rc.HostChanged); n > 0 {
		parts = append(parts, fmt.Sprintf("%d left alone (changed on the host)", n))
	}
	if n := len(rc.Deleted); n > 0 {
		parts = append(parts, fmt.Sprintf("%d deleted", n))
	}
	if len(rc.SkipsBy) > 0 {
		var why []string
		total := 0
		var reasons []string
		for k := range rc.SkipsBy {
			reasons = append(reasons, string(k))
		}
		slices.Sort(reasons)
		for _, r := range reasons {
			n := rc.SkipsBy[safetar.Reason(r)]
			total += n
			why = append(why, fmt.Sprintf("%s %d", r, n))
		}
		parts = append(parts, fmt.Sprintf("%d skipped (%s)", total, strings.Join(why, ", ")))
	}
	if rc.Masked > 0 {
		parts = append(parts, fmt.Sprintf("%d modes capped", rc.Masked))
	}
	if rc.Stopped != "" {
		parts = append(parts, "archive stopped early: "+string(rc.Stopped))
	}
	for _, w := range rc.Warnings {
		parts = append(parts, "warning: "+w)
	}
	return strings.Join(parts, "; ")
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// tarSize estimates the size of a tar of dir: a header per entry, file
// data in 512-byte blocks, the end marker. It is the progress bar's total.
func tarSize(dir string) int64 {
	var n int64 = 1024
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		switch {
		case d.Type().IsRegular():
			if fi, err := d.Info(); err == nil {
				n += 512 + (fi.Size()+511)/512*512
			}
		case d.IsDir():
			n += 512
		}
		return nil
	})
	return n
}

// progress shows a seed's or pull's bytes: a bar redrawn in place on a
// terminal, a plain line every few seconds otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	label string
	total int64 // 0: unknown

	mu    sync.Mutex
	start time.Time
	last  time.Time
	moved int64
	drawn bool
}

func newProgress(w io.Writer, label string, total int64) *progress {
	now := time.Now()
	return &progress{w: w, tty: isTerminal(w), label: label, total: total, start: now, last: now}
}

func (p *progress) update(moved int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.moved = moved
	now := time.Now()
	every := 3 * time.Second
	if p.tty {
		every = 100 * time.Millisecond
	}
	if now.Sub(p.last) < every {
		return
	}
	p.last = now
	p.draw(now)
}

func (p *progress) draw(now time.Time) {
	rate := ""
	if secs := now.Sub(p.start).Seconds(); secs > 0.2 {
		rate = sizeString(int64(float64(p.moved)/secs)) + "/s"
	}
	if !p.tty {
		if p.total > 0 {
			fmt.Fprintf(p.w, "%s: %s of ~%s (%d%%) %s\n", p.label, sizeString(p.moved), sizeString(p.total), p.percent(), rate)
		} else {
			fmt.Fprintf(p.w, "%s: %s %s\n", p.label, sizeString(p.moved), rate)
		}
		return
	}
	if p.total > 0 {
		const width = 30
		fill := p.percent() * width / 100
		bar := strings.Repeat("=", fill) + strings.Repeat(" ", width-fill)
		fmt.Fprintf(p.w, "\r\033[K%s [%s] %3d%% %s %s", p.label, bar, p.percent(), sizeString(p.moved), rate)
	} else {
		fmt.Fprintf(p.w, "\r\033[K%s %s %s", p.label, sizeString(p.moved), rate)
	}
	p.drawn = true
}

func (p *progress) percent() int {
	if p.total <= 0 {
		return 0
	}
	return int(min(100, p.moved*100/p.total))
}

// finish clears the bar.
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
