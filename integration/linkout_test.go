package integration

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A link a box made never leads a host tool out of the box's work/ into
// the mount's control files or another box (issue 34, finding 1): links to
// another box's exec, to the root ctl and to a host file, made in the box
// with relative targets that climb out of work/, then followed by host
// tools (cp, a shell's redirection). On a box whose provider isolates it
// (docker) every such link reads inside work/; on a local box (whose
// files are the host's own, so its targets are kept) it reads as the host
// path it names in the box, never as a path into the mount.
func TestBoxLinksStayInWork(t *testing.T) {
	for _, prov := range []string{"local", "docker"} {
		t.Run("provider="+prov, func(t *testing.T) {
			m := startMount(t, prov, 20*time.Second)
			a := m.newBox(t, "a", "provider="+prov)
			b := m.newBox(t, "b", "provider="+prov)
			a.must(t, "mkdir -p d && ln -s ../../b/exec toexec && ln -s ../../ctl toctl && "+
				"ln -s ../exec ownexec && ln -s "+strings.Repeat("../", 12)+"etc/hostname tohost && "+
				"ln -s ../../../b/exec d/deep && ln -s sub/../../b/exec through && ln -s d/../x inwork")
			for _, name := range []string{"toexec", "toctl", "ownexec", "tohost", "d/deep", "through", "inwork"} {
				got, err := os.Readlink(filepath.Join(a.work, name))
				if err != nil {
					t.Fatalf("readlink %s: %v", name, err)
				}
				switch {
				case path.IsAbs(got) && prov == "local":
					if strings.HasPrefix(got, m.mnt+"/") || got == m.mnt {
						t.Errorf("%s reads %q: into the mount", name, got)
					}
				case path.IsAbs(got):
					t.Errorf("%s reads %q: absolute, on a box whose provider isolates it", name, got)
				case strings.HasPrefix(path.Join(path.Dir(name), got), ".."):
					t.Errorf("%s reads %q: out of work/", name, got)
				}
			}
			if got, _ := os.Readlink(filepath.Join(a.work, "inwork")); got != "x" {
				t.Errorf("inwork reads %q, want x", got)
			}

			// Host tools follow them.
			payload := filepath.Join(t.TempDir(), "payload")
			if err := os.WriteFile(payload, []byte("touch /tmp/boxfs-pwned\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"toexec", "d/deep", "through", "ownexec"} {
				hostErr(a.work, "cp", payload, name) // fails or lands inside a's work/
			}
			hostErr(a.work, "sh", "-c", "echo 'new evil provider=local' > toctl")
			for _, box := range []*boxT{a, b} {
				ents, err := os.ReadDir(filepath.Join(box.dir, "cmds"))
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range ents {
					if box == a && e.Name() != "1" && e.Name() != "last" {
						t.Errorf("box a ran a command the host did not start: cmds/%s", e.Name())
					}
					if box == b {
						t.Errorf("box b ran a command: cmds/%s", e.Name())
					}
				}
			}
			if _, err := os.Stat(filepath.Join(m.mnt, "evil")); err == nil {
				t.Errorf("a write through a's link made a box in the root ctl")
			}
		})
	}
}
