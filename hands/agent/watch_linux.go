//go:build linux

package agent

import (
	"bufio"
	"context"
	"encoding/hex"
	"io"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/internal/treewatch"
)

// WatchTree watches every directory under root (at most limit of them;
// 0 for treewatch.DefaultLimit) with inotify and writes a record to out
// for each change, flushed with each batch: a ready record once the tree
// is watched, then a path record per changed name, and an overflow record
// when events were lost or the tree outgrew the limit (before the ready
// record when it did at once). Names of boxfs's own temporary files
// (".boxfs-tmp-*") are not reported. It returns when root goes away or
// out fails.
func WatchTree(root string, limit int, out io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bw := bufio.NewWriter(out)
	var werr error
	record := func(typ byte, rel string) {
		bw.WriteByte(typ)
		bw.WriteString(rel)
		bw.WriteByte(0)
	}
	flush := func() {
		if err := bw.Flush(); err != nil && werr == nil {
			werr = err
			cancel()
		}
	}
	err := treewatch.Watch(ctx, root, treewatch.Options{
		Limit: limit,
		Ready: func() { record(watchReady, ""); flush() },
		Changed: func(paths []string, all bool) {
			if all {
				record(watchOverflow, "")
			}
			// Each path goes with its attributes after the change: the
			// host drops the echo of its own change by them, with no
			// round trip (docs/design.md §6, F-echo).
			var st unix.Stat_t
			for _, p := range paths {
				switch err := unix.Lstat(path.Join(root, p), &st); {
				case err == nil:
					record(watchStat, hex.EncodeToString([]byte(statNSOf(&st).marshal()))+p)
				case err == unix.ENOENT || err == unix.ENOTDIR:
					record(watchGone, p)
				default:
					record(watchPath, p)
				}
			}
			flush()
		},
		Skip: func(name string) bool { return strings.HasPrefix(name, ".boxfs-tmp-") },
	})
	if werr != nil {
		return werr
	}
	return err
}
