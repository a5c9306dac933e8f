package fs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	boxfs "github.com/boxfs/boxfs/fs"
)

// The namespace keeps the inode numbers of the work/ paths the kernel
// holds, not of every path ever looked up: once the kernel forgets the
// nodes, their paths and numbers go, and a path looked up again gets its
// number back.
func TestInoTableFollowsKernel(t *testing.T) {
	mnt, f := mountFS(t, boxfs.MountOptions{})
	work := filepath.Join(newBox(t, mnt, "a"), "work")
	dir := filepath.Join(work, "d")
	require.NoError(t, os.Mkdir(dir, 0o755))
	const n = 300
	inos := map[string]uint64{}
	for i := 0; i < n; i++ {
		name := filepath.Join(dir, fmt.Sprintf("f%03d", i))
		require.NoError(t, os.WriteFile(name, nil, 0o644))
		inos[name] = ino(t, name)
	}
	// A watch report taken of a file (a local box reports its writes)
	// drops the kernel's name of it, and the kernel may then forget its
	// node: each file is looked up again until the kernel holds all.
	for deadline := time.Now().Add(10 * time.Second); ; {
		for name, want := range inos {
			require.Equal(t, want, ino(t, name), name)
		}
		paths, _ := f.InoCount("a")
		if paths >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d paths kept while the kernel holds %d", paths, n)
		}
	}

	// Dropping d's name makes the kernel forget d and what is below it.
	f.DropEntry("a", "d")
	deadline := time.Now().Add(10 * time.Second)
	for {
		paths, numbers := f.InoCount("a")
		if paths < 10 && numbers < 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the kernel forgot d: %d paths, %d numbers kept", paths, numbers)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for name, want := range inos {
		if got := ino(t, name); got != want {
			t.Errorf("%s: number %d, was %d", name, got, want)
		}
	}
}

func ino(t *testing.T, name string) uint64 {
	t.Helper()
	fi, err := os.Stat(name)
	require.NoError(t, err)
	return fi.Sys().(*syscall.Stat_t).Ino
}

// A renamed file keeps its inode number after the kernel forgets its node
// (a watch's report of a changed file drops its name) and looks it up
// again, as on a disk; go-fuse's posix test RenameOverwriteDestExist
// checks the number after a rename over another file.
func TestRenamedKeepsInoAfterForget(t *testing.T) {
	mnt, f := mountFS(t, boxfs.MountOptions{})
	work := filepath.Join(newBox(t, mnt, "a"), "work")
	src, dst := filepath.Join(work, "src"), filepath.Join(work, "dst")
	require.NoError(t, os.WriteFile(src, []byte("hello"), 0o644))
	require.NoError(t, os.WriteFile(dst, []byte("xx"), 0o644))
	want := ino(t, src)
	require.NoError(t, os.Rename(src, dst))
	require.Equal(t, want, ino(t, dst))

	f.DropEntry("a", "dst")
	deadline := time.Now().Add(10 * time.Second)
	for f.Parked("a") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the kernel did not forget the renamed file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, want, ino(t, dst), "the renamed file's number after the kernel forgot it")
	require.Zero(t, f.Parked("a"))

	// Removed and made again, the path has a number of its own.
	require.NoError(t, os.Remove(dst))
	require.NoError(t, os.WriteFile(dst, nil, 0o644))
	require.NotEqual(t, want, ino(t, dst))
}
