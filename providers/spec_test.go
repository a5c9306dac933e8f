package providers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/boxfs/boxfs/providers"
)

func TestLabelRules(t *testing.T) {
	tests := []struct {
		labels map[string]string
		ok     bool
	}{
		{nil, true},
		{map[string]string{"team": "infra", "app.kubernetes.io/name": "x"}, true},
		{map[string]string{"boxfs": "1"}, false},
		{map[string]string{"boxfs.name": "a"}, false},
		{map[string]string{"boxfsx": "a"}, true},
		{map[string]string{"my.boxfs": "a"}, true},
		{map[string]string{"": "a"}, false},
		{map[string]string{"a b": "a"}, false},
		{map[string]string{"k=v": "a"}, false},
		{map[string]string{strings.Repeat("k", 129): "a"}, false},
		{map[string]string{"k": "line\nbreak"}, false},
		{map[string]string{"k": strings.Repeat("v", 1025)}, false},
	}
	for _, tt := range tests {
		err := providers.CheckLabels(tt.labels)
		if (err == nil) != tt.ok {
			t.Errorf("CheckLabels(%v) = %v, want ok=%v", tt.labels, err, tt.ok)
		}
		if err != nil && providers.CodeOf(err) != providers.Invalid {
			t.Errorf("CheckLabels(%v) code %v, want invalid", tt.labels, providers.CodeOf(err))
		}
		if err2 := (providers.Spec{Labels: tt.labels}).Validate(); (err2 == nil) != tt.ok {
			t.Errorf("Spec.Validate with labels %v = %v", tt.labels, err2)
		}
	}
	if !providers.MatchLabels(map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "1"}) {
		t.Error("MatchLabels subset")
	}
	if providers.MatchLabels(map[string]string{"a": "1"}, map[string]string{"a": "2"}) {
		t.Error("MatchLabels different value")
	}
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name string
		spec providers.Spec
		ok   bool
	}{
		{"zero", providers.Spec{}, true},
		{"lifetime", providers.Spec{Lifetime: time.Minute}, true},
		{"negative lifetime", providers.Spec{Lifetime: -1}, false},
		{"huge lifetime", providers.Spec{Lifetime: 30 * 24 * time.Hour}, false},
		{"negative cpus", providers.Spec{CPUs: -1}, false},
		{"port 0", providers.Spec{Ports: []int{0}}, false},
		{"allowlist empty", providers.Spec{Network: providers.Network{Mode: providers.NetworkAllowlist}}, false},
		{"allow with none", providers.Spec{Network: providers.Network{Mode: providers.NetworkNone, Allow: []string{"x"}}}, false},
		{"network bogus", providers.Spec{Network: providers.Network{Mode: "bogus"}}, false},
		{"isolation bogus", providers.Spec{Isolation: "bogus"}, false},
		{"env name", providers.Spec{Env: map[string]string{"1A": "x"}}, false},
		{"env ok", providers.Spec{Env: map[string]string{"A_1": "x y"}}, true},
		{"env nul", providers.Spec{Env: map[string]string{"A": "x\x00"}}, false},
		{"relative workspace", providers.Spec{Workspace: "work"}, false},
		{"mount relative target", providers.Spec{Mounts: []providers.Mount{{Source: "/a", Target: "b"}}}, false},
		{"user", providers.Spec{User: "1000:1000"}, true},
		{"user name", providers.Spec{User: "root"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && providers.CodeOf(err) != providers.Invalid {
				t.Fatalf("code %v, want invalid", providers.CodeOf(err))
			}
		})
	}
}

func TestCheckSupported(t *testing.T) {
	s := providers.Spec{Image: "x", Lifetime: time.Minute, Env: map[string]string{"A": "b"}}
	if got := s.Fields(); strings.Join(got, ",") != "image,lifetime,env" {
		t.Errorf("Fields() = %v", got)
	}
	if err := s.CheckSupported("op", "lifetime", "env"); providers.CodeOf(err) != providers.Unsupported || !strings.Contains(err.Error(), `"image"`) {
		t.Errorf("CheckSupported = %v, want unsupported naming image", err)
	}
	if err := s.CheckSupported("op", "image", "lifetime", "env"); err != nil {
		t.Errorf("CheckSupported = %v", err)
	}
	if strings.Contains(s.String(), "b") && strings.Contains(s.String(), "A=b") {
		t.Errorf("Spec.String leaks an env value: %s", s)
	}
}

func TestFactsFailClosed(t *testing.T) {
	var absent providers.Facts
	if absent.HasLiveProcesses() || absent.HasStdin() || absent.HasFUSE() || absent.NetworkIsolated() ||
		absent.PtraceRestricted() || absent.Runs("linux", "amd64") || absent.HasShell() {
		t.Error("an absent fact granted something")
	}
	no := providers.Facts{LiveProcesses: providers.Bool(false), FUSE: providers.Bool(false), Stdin: providers.Bool(false),
		PtraceScope: providers.Int(0), Network: providers.NetworkOpen, OS: "linux"}
	if no.HasLiveProcesses() || no.HasFUSE() || no.HasStdin() || no.PtraceRestricted() || no.NetworkIsolated() || no.Runs("linux", "amd64") {
		t.Error("a false fact granted something")
	}
	yes := providers.Facts{LiveProcesses: providers.Bool(true), FUSE: providers.Bool(true), Stdin: providers.Bool(true),
		PtraceScope: providers.Int(1), Network: providers.NetworkNone, OS: "linux", Arch: "amd64", Shell: "/bin/sh"}
	if !yes.HasLiveProcesses() || !yes.HasFUSE() || !yes.HasStdin() || !yes.PtraceRestricted() || !yes.NetworkIsolated() ||
		!yes.Runs("linux", "amd64") || yes.Runs("linux", "arm64") || !yes.HasShell() {
		t.Error("a true fact was not granted")
	}
}

func TestUnixModeRoundTrip(t *testing.T) {
	for _, u := range []uint32{0o100644, 0o100755, 0o040755, 0o120777, 0o010600, 0o140700, 0o020666, 0o060660, 0o104755, 0o102755, 0o041777} {
		if got := providers.UnixMode(providers.FileModeFromUnix(u)); got != u {
			t.Errorf("round trip of %o gave %o", u, got)
		}
	}
}

func TestParseUser(t *testing.T) {
	for _, tc := range []struct {
		in       string
		uid, gid int
		ok       bool
	}{
		{"1000:1000", 1000, 1000, true}, {"0:0", 0, 0, true},
		{"", 0, 0, false}, {"1000", 0, 0, false}, {"a:b", 0, 0, false}, {"-1:2", 0, 0, false}, {"1:2:3", 0, 0, false},
	} {
		uid, gid, ok := providers.ParseUser(tc.in)
		assert.Equal(t, tc.ok, ok, tc.in)
		if tc.ok {
			assert.Equal(t, []int{tc.uid, tc.gid}, []int{uid, gid}, tc.in)
		}
	}
}
