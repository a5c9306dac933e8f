// Package integration runs ordinary tools (cp, tar, git, grep, sqlite3, an
// editor's save) on boxes mounted through the kernel, against every real
// provider. The mount is served by a separate process (this test binary
// re-executed in serve mode), so no tool ever touches a mount served by
// the process that forked it (go-fuse's fork/exec deadlock).
package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/boxfs/boxfs/boxes"
	boxfs "github.com/boxfs/boxfs/fs"
	"github.com/boxfs/boxfs/providers"
	_ "github.com/boxfs/boxfs/providers/docker"
	_ "github.com/boxfs/boxfs/providers/local"
)

// Serve mode: the environment names the mount point, the state directory
// and the default provider.
const (
	envServe    = "BOXFS_IT_SERVE"    // mount point
	envState    = "BOXFS_IT_STATE"    // state directory
	envProvider = "BOXFS_IT_PROVIDER" // default provider
	envAgent    = "BOXFS_IT_AGENT"    // agent binary
	envOpTime   = "BOXFS_IT_OPTIMEOUT"
	envAttrTime = "BOXFS_IT_ATTRTIMEOUT"
	envWatch    = "BOXFS_IT_WATCH"         // "0": no watch
	envWatchMax = "BOXFS_IT_WATCHMAX"      // the directories one watch covers
	envWrite    = "BOXFS_IT_WRITE"         // the mount's write mode
	envBudget   = "BOXFS_IT_CACHE"         // the content cache's bound, bytes
	envBehind   = "BOXFS_IT_BEHIND_DELAY"  // write-behind's batch delay
	envBound    = "BOXFS_IT_REQUEST_BOUND" // the bound of one request of the mount
	envDebug    = "BOXFS_IT_DEBUG"         // "1": log every FUSE request, as mount --debug does
	// envOptions are provider options, as a config file's
	// [providers.NAME] gives them: "NAME.KEY=VALUE", space-separated.
	envOptions = "BOXFS_IT_OPTIONS"
	// envAllowOther=1 mounts with allow_other: other users get in, as
	// the modes allow.
	envAllowOther = "BOXFS_IT_ALLOW_OTHER"
)

// fakeProviders open the providers whose service is played by an in-process
// fake (a cloud vendor's API): each provider's own file registers its opener
// in init, starting the fake in the serving process, and adds its row to
// providerRows, so rows are added without editing a shared list.
var fakeProviders = map[string]func(cfg providers.Config) (providers.Provider, error){}

func TestMain(m *testing.M) {
	if os.Getenv(envPosixSteps) != "" {
		os.Exit(posixChild(os.Args[1:]))
	}
	if mnt := os.Getenv(envServe); mnt != "" {
		if err := serve(mnt); err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// providerOptions returns envOptions' options of provider name.
func providerOptions(name string) map[string]string {
	var opts map[string]string
	for _, o := range strings.Fields(os.Getenv(envOptions)) {
		kv, ok := strings.CutPrefix(o, name+".")
		if k, v, eq := strings.Cut(kv, "="); ok && eq {
			if opts == nil {
				opts = map[string]string{}
			}
			opts[k] = v
		}
	}
	return opts
}

// serve mounts a namespace and serves it until SIGTERM, then flushes and
// unmounts.
func serve(mnt string) error {
	state := os.Getenv(envState)
	opTimeout := 8 * time.Second
	if d, err := time.ParseDuration(os.Getenv(envOpTime)); err == nil {
		opTimeout = d
	}
	attrTimeout := time.Second
	if d, err := time.ParseDuration(os.Getenv(envAttrTime)); err == nil {
		attrTimeout = d
	}
	budget, _ := strconv.ParseInt(os.Getenv(envBudget), 10, 64)
	watchLimit, _ := strconv.Atoi(os.Getenv(envWatchMax))
	behindDelay, _ := time.ParseDuration(os.Getenv(envBehind))
	bound, _ := time.ParseDuration(os.Getenv(envBound))
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m, err := boxes.New(boxes.Options{
		StateDir:        state,
		DefaultProvider: os.Getenv(envProvider),
		OpenProvider: func(name string) (providers.Provider, error) {
			cfg := providers.Config{StateDir: filepath.Join(state, "providers", name), Logger: logger, Options: providerOptions(name)}
			if open, ok := fakeProviders[name]; ok {
				return open(cfg)
			}
			return providers.Open(name, cfg)
		},
		AttrTimeout: attrTimeout,
		NoWatch:     os.Getenv(envWatch) == "0",
		WatchLimit:  watchLimit,
		WriteBehind: os.Getenv(envWrite) == boxes.WriteBehind,
		BehindDelay: behindDelay,
		CacheBudget: budget,
		OpTimeout:   opTimeout,
		AgentBinary: os.Getenv(envAgent),
		Logger:      logger,
	})
	if err != nil {
		return err
	}
	server, err := boxfs.New(m).Mount(mnt, boxfs.MountOptions{AllowOther: os.Getenv(envAllowOther) == "1", RequestBound: bound,
		Debug: os.Getenv(envDebug) == "1"})
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		logger.Error("shutdown", "err", err)
	}
	err = server.Unmount()
	if err == nil {
		return nil
	}
	// Busy, as the daemon finds a mount with files open on it: say who
	// holds it, then detach it lazily, as the daemon does.
	logger.Warn("unmount failed; detaching lazily", "err", err, "holders", holders(mnt))
	if lerr := syscall.Unmount(mnt, syscall.MNT_DETACH); lerr != nil {
		return fmt.Errorf("%w; lazy unmount: %w", err, lerr)
	}
	return nil
}

// holders names the processes with a working directory or an open file
// under mnt, from /proc.
func holders(mnt string) []string {
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		dir := filepath.Join("/proc", p.Name())
		links := []string{filepath.Join(dir, "cwd")}
		fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
		for _, fd := range fds {
			links = append(links, filepath.Join(dir, "fd", fd.Name()))
		}
		for _, l := range links {
			if t, err := os.Readlink(l); err == nil && (t == mnt || strings.HasPrefix(t, mnt+"/")) {
				comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
				out = append(out, fmt.Sprintf("%s (%s) %s", p.Name(), strings.TrimSpace(string(comm)), t))
				break
			}
		}
	}
	return out
}
