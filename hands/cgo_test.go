package hands_test

import (
	"bytes"
	"context"
	"debug/elf"
	"io"
	"path"
	"strings"
	"testing"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
)

// TestCgoAgent: boxfs built the usual way with a C compiler at hand (cgo
// on: dynamically linked) serves as the agent in a box whose C library
// runs it (boxfs-base, Debian's glibc): files and commands go through the
// agent. In a box without glibc (boxfs-busybox, as an Alpine box would
// be) nothing is uploaded, the box is reached without the agent, and
// AgentOff says why and how to build an agent for every box.
func TestCgoAgent(t *testing.T) {
	bin := boxfsbin.CgoPath(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	dynamic := false
	for _, p := range f.Progs {
		dynamic = dynamic || p.Type == elf.PT_INTERP
	}
	f.Close()
	if !dynamic {
		t.Fatalf("%s built with CGO_ENABLED=1 is static: this test wants the dynamic build", bin)
	}
	ctx := context.Background()

	t.Run("box=boxfs-base", func(t *testing.T) {
		box := testbox.NewDocker(t)
		h, err := hands.New(ctx, box, hands.Options{AgentBinary: bin})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		if h.Via() != hands.ViaAgent {
			t.Fatalf("a dynamic boxfs in a glibc box: via %q (agentOff %q), want the agent", h.Via(), h.AgentOff())
		}
		name := path.Join(h.Facts().Workspace, "cgo.txt")
		if err := h.WriteFile(ctx, name, strings.NewReader("through a cgo agent"), 0o644); err != nil {
			t.Fatal(err)
		}
		rc, err := h.ReadFile(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || string(got) != "through a cgo agent" {
			t.Fatalf("read back %q, %v", got, err)
		}
		var out bytes.Buffer
		p, err := h.Run(ctx, hands.Command{Argv: []string{"cat", name}, Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		if code, err := p.Wait(); code != 0 || err != nil || out.String() != "through a cgo agent" {
			t.Fatalf("command through the agent: exit %d, %v, %q", code, err, out.String())
		}
		if st, ok := h.AgentStats(); !ok || !st.Up || st.Uploads != 1 {
			t.Errorf("agent stats %+v (ok %v), want up after one upload", st, ok)
		}
	})

	t.Run("box=boxfs-busybox", func(t *testing.T) {
		box := newBusyboxBox(t)
		var execs int
		h, err := hands.New(ctx, box, hands.Options{AgentBinary: bin, OnExec: func(error) { execs++ }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		if h.Via() == hands.ViaAgent {
			t.Fatal("a dynamic boxfs took the agent path in a box without glibc")
		}
		why := h.AgentOff()
		for _, want := range []string{"dynamically linked", "CGO_ENABLED=0", "ld-linux"} {
			if !strings.Contains(why, want) {
				t.Errorf("AgentOff() = %q, want it to say %q", why, want)
			}
		}
		if execs != 1 {
			t.Errorf("%d execs to learn the box cannot run the agent, want 1 (no upload)", execs)
		}
		if _, err := h.Stat(ctx, h.Facts().Workspace); err != nil {
			t.Errorf("the box without the agent: %v", err)
		}
	})
}
