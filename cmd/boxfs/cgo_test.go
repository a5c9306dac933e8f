package main

import (
	"debug/elf"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/boxfs/boxfs/internal/boxfsbin"
	"github.com/boxfs/boxfs/internal/testbox"
)

// TestCgoBuild: boxfs built the usual way with a C compiler at hand is
// dynamically linked. Its mount says so on the terminal, once, even with
// --background: the agent runs only in boxes whose C library runs it. A
// Docker box of boxfs-base (glibc) is reached through the agent; one of
// boxfs-busybox (no C library, as an Alpine box has none that fits) is
// not, and its facts.json says why and how to build for every box.
func TestCgoBuild(t *testing.T) {
	needMount(t)
	testbox.Docker(t)
	h := newHarness(t)
	h.bin = boxfsbin.CgoPath(t)
	f, err := elf.Open(h.bin)
	if err != nil {
		t.Fatal(err)
	}
	dynamic := false
	for _, p := range f.Progs {
		dynamic = dynamic || p.Type == elf.PT_INTERP
	}
	f.Close()
	if !dynamic {
		t.Fatalf("%s built with CGO_ENABLED=1 is static: this test wants the dynamic build", h.bin)
	}

	mnt := filepath.Join(t.TempDir(), "mnt")
	h.cleanup(mnt)
	r := h.run("mount", mnt, "--background")
	if r.code != 0 {
		t.Fatalf("mount --background: exit %d\nstderr: %s", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "dynamically linked"); n != 1 || !strings.Contains(r.stderr, "CGO_ENABLED=0") {
		t.Errorf("mount --background of a dynamic boxfs said %d times that it is dynamically linked, want once with how to build static:\n%s", n, r.stderr)
	}

	type facts struct {
		Via      string          `json:"via"`
		Agent    json.RawMessage `json:"agent"`
		AgentOff string          `json:"agentOff"`
	}
	read := func(box string) facts {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join(mnt, box, "facts.json"))
		if err != nil {
			t.Fatal(err)
		}
		var f facts
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatalf("facts.json: %v\n%s", err, raw)
		}
		return f
	}
	h.ok("new", "dk", "provider=docker", "lifetime=10m")
	if f := read("dk"); f.Via != "agent" || f.Agent == nil || f.AgentOff != "" {
		t.Errorf("facts.json of a boxfs-base box under a dynamic boxfs: via %q, agent %s, agentOff %q; want the agent", f.Via, f.Agent, f.AgentOff)
	}
	if got := h.ok("exec", "dk", "--", "echo", "ran"); got != "ran\n" {
		t.Errorf("exec in the box through the agent: %q", got)
	}
	h.ok("new", "bb", "provider=docker", "image=boxfs-busybox:latest", "lifetime=10m")
	if f := read("bb"); f.Agent != nil || !strings.Contains(f.AgentOff, "dynamically linked") || !strings.Contains(f.AgentOff, "CGO_ENABLED=0") {
		t.Errorf("facts.json of a busybox box under a dynamic boxfs: via %q, agent %s, agentOff %q; want no agent and why", f.Via, f.Agent, f.AgentOff)
	}
}
