package fs

import (
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPresentTarget(t *testing.T) {
	transform, keep := linkView{transform: true}, linkView{}
	shared := linkView{transform: true, shared: true}
	tests := []struct {
		rel, target, ws string
		lv              linkView
		want            string
	}{
		// Absolute targets.
		{"l", "/etc", "/workspace", transform, "etc"},
		{"a/b/l", "/etc/passwd", "/workspace", transform, "../../etc/passwd"},
		{"a/l", "/workspace/src/x", "/workspace", transform, "../src/x"},
		{"a/l", "/workspace", "/workspace", transform, ".."},
		{"l", "/workspace/", "/workspace", transform, "."},
		{"a/l", "/", "/workspace", transform, ".."},
		{"l", "/workspacex/y", "/workspace", transform, "workspacex/y"},
		{"a/l", "/../../etc", "/workspace", transform, "../etc"},
		{"a/b/l", "/etc/passwd", "/workspace", keep, "/etc/passwd"},

		// Relative targets that stay in work/ read as they are.
		{"l", "rel/x", "/workspace", transform, "rel/x"},
		{"a/b/l", "../x", "/workspace", transform, "../x"},
		{"a/b/l", "../../x", "/workspace", transform, "../../x"},
		{"a/b/l", "../..", "/workspace", transform, "../.."},
		{"a/l", "./x//y/.", "/workspace", transform, "./x//y/."},
		{"a/b/l", "../../x", "/home/u/w", keep, "../../x"},

		// A ".." after a name is resolved lexically, within work/.
		{"l", "d/../x", "/workspace", transform, "x"},
		{"a/b/l", "x/../../c", "/workspace", transform, "../../a/c"},
		{"l", "up/../exec", "/workspace", transform, "exec"},
		{"l", "up/../exec", "/workspace", keep, "exec"},
		{"l", "d/..", "/workspace", transform, "."},

		// Above work/: transformed as the absolute box path it names.
		{"l", "..", "/workspace", transform, "."},
		{"l", "../exec", "/workspace", transform, "exec"},
		{"a/l", "../../other/exec", "/workspace", transform, "../other/exec"},
		{"l", "../../../../etc/passwd", "/home/u/w", transform, "etc/passwd"},
		{"a/b/l", "../../../w/src", "/home/u/w", transform, "../../src"},
		{"l", "../x", "/home/u/w", transform, "home/u/x"},
		{"l", "d/../../x", "/home/u/w", transform, "home/u/x"},
		{"l", "../x", "", transform, "x"},
		// ... or, kept, as that absolute box path (on a local box, the
		// host's own), never a path into the mount.
		{"l", "../../other/exec", "/boxes/local/7f/work", keep, "/boxes/local/other/exec"},
		{"a/l", "../../../etc/passwd", "/srv/b/work", keep, "/srv/etc/passwd"},
		{"l", "../work/x", "/srv/b/work", keep, "x"},
		{"l", "../x", "", keep, "x"},

		// A link with several names: no leading "..".
		{"a/b/l", "../x", "/workspace", shared, "a/x"},
		{"a/b/l", "/workspace/x", "/workspace", shared, "x"},
		{"a/b/l", "/etc", "/workspace", shared, "etc"},
		{"a/b/l", "x/y", "/workspace", shared, "x/y"},
		{"a/b/l", "..", "/workspace", shared, "a"},
		{"a/b/l", "../../..", "/workspace", shared, "."},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, presentTarget(tt.rel, tt.target, tt.ws, tt.lv), "%s -> %s (ws %s, %+v)", tt.rel, tt.target, tt.ws, tt.lv)
	}
}

// Whatever a box makes a link's target, following the presented target
// from the link's directory (from any directory, for a link with several
// names) never leaves work/, unless the mount keeps absolute targets (then
// only an absolute path can leave it).
func TestPresentTargetStaysInWork(t *testing.T) {
	rels := []string{"l", "a/l", "a/b/l", "a/b/c/d/l"}
	parts := []string{"..", ".", "x", "", "work", "w"}
	var targets []string
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		if n == 0 {
			return
		}
		for _, p := range parts {
			t := prefix + "/" + p
			if prefix == "" {
				t = p
			}
			targets = append(targets, t, "/"+t)
			gen(t, n-1)
		}
	}
	gen("", 5)
	for _, ws := range []string{"/workspace", "/home/u/w", "/", ""} {
		for _, lv := range []linkView{{transform: true}, {}, {transform: true, shared: true}, {shared: true}} {
			for _, rel := range rels {
				for _, target := range targets {
					got := presentTarget(rel, target, ws, lv)
					if path.IsAbs(got) {
						if lv.transform {
							t.Fatalf("%s -> %q (ws %s, %+v) reads %q: absolute", rel, target, ws, lv, got)
						}
						continue
					}
					from := []string{path.Dir(rel)}
					if lv.shared {
						from = []string{".", "q", "q/r/s/t/u/v"}
					}
					if _, plain := leadingUps(got); !plain {
						t.Fatalf("%s -> %q (ws %s, %+v) reads %q: a \"..\" after a name", rel, target, ws, lv, got)
					}
					for _, dir := range from {
						if j := path.Join(dir, got); j == ".." || strings.HasPrefix(j, "../") {
							t.Fatalf("%s -> %q (ws %s, %+v) reads %q: from %s it leaves work/", rel, target, ws, lv, got, dir)
						}
					}
				}
			}
		}
	}
}
