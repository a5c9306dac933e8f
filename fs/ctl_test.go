package fs

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
)

func TestTokenize(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		bad  bool
	}{
		{"new a", []string{"new", "a"}, false},
		{"  new\ta  b ", []string{"new", "a", "b"}, false},
		{`new a env.X='hello world'`, []string{"new", "a", "env.X=hello world"}, false},
		{`new a env.X="say \"hi\""`, []string{"new", "a", `env.X=say "hi"`}, false},
		{`new a env.X=''`, []string{"new", "a", "env.X="}, false},
		{`new a 'unterminated`, nil, true},
		{`new a "unterminated`, nil, true},
	}
	for _, tt := range tests {
		got, err := tokenize(tt.in)
		if (err != nil) != tt.bad {
			t.Errorf("tokenize(%q) err = %v", tt.in, err)
			continue
		}
		if !tt.bad && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("tokenize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseRootCtl(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []rootCmd
		bad  string // a word the error must name
	}{
		{name: "new defaults", in: "new a\n", want: []rootCmd{{verb: "new", name: "a"}}},
		{name: "no newline", in: "new a", want: []rootCmd{{verb: "new", name: "a"}}},
		{name: "two messages", in: "new a\nforget b\n", want: []rootCmd{{verb: "new", name: "a"}, {verb: "forget", name: "b"}}},
		{name: "new full", in: "new dev provider=docker image=img:1 lifetime=90m cpus=1.5 memory=2g network=none env.A=1 label.team=x workspace=/w\n",
			want: []rootCmd{{verb: "new", name: "dev", provider: "docker", spec: providers.Spec{
				Image: "img:1", Lifetime: 90 * time.Minute, CPUs: 1.5, MemoryMB: 2048,
				Network: providers.Network{Mode: providers.NetworkNone}, Env: map[string]string{"A": "1"},
				Labels: map[string]string{"team": "x"}, Workspace: "/w"}}}},
		{name: "lifetime seconds", in: "new a lifetime=300", want: []rootCmd{{verb: "new", name: "a", spec: providers.Spec{Lifetime: 300 * time.Second}}}},
		{name: "allowlist", in: "new a network=pypi.org,github.com", want: []rootCmd{{verb: "new", name: "a",
			spec: providers.Spec{Network: providers.Network{Mode: providers.NetworkAllowlist, Allow: []string{"pypi.org", "github.com"}}}}}},
		{name: "attach", in: "attach b provider=docker id=abc", want: []rootCmd{{verb: "attach", name: "b", provider: "docker", id: "abc"}}},
		{name: "attach resume", in: "attach b provider=docker id=abc resume=auto", want: []rootCmd{{verb: "attach", name: "b", provider: "docker", id: "abc", resumeAuto: true}}},
		{name: "new resume", in: "new a resume=auto snapshot=sha256:1", want: []rootCmd{{verb: "new", name: "a", resumeAuto: true, spec: providers.Spec{Snapshot: "sha256:1"}}}},
		{name: "bad resume", in: "new a resume=later", bad: "resume"},
		{name: "attach unknown key", in: "attach b provider=docker id=abc colour=red", bad: "colour"},
		{name: "bad verb", in: "frob a", bad: "frob"},
		{name: "bad verb fails all", in: "new a\nfrob b\n", bad: "frob"},
		{name: "unknown key", in: "new a colour=red", bad: "colour"},
		{name: "reserved label", in: "new a label.boxfs.x=1", bad: "reserved"},
		{name: "bad lifetime", in: "new a lifetime=forever", bad: "lifetime"},
		{name: "bad memory", in: "new a memory=lots", bad: "memory"},
		{name: "bad cpus", in: "new a cpus=-1", bad: "cpus"},
		{name: "no name", in: "new", bad: "one box name"},
		{name: "two names", in: "new a b", bad: "one box name"},
		{name: "slash", in: "new a/b", bad: "'/'"},
		{name: "dot", in: "new .a", bad: "'.'"},
		{name: "long", in: "new " + strings.Repeat("x", 64), bad: "63"},
		{name: "reserved name", in: "new ctl", bad: "root"},
		{name: "attach missing id", in: "attach b provider=docker", bad: "id="},
		{name: "forget keys", in: "forget b x=1", bad: "no keys"},
		{name: "empty", in: "\n\n", bad: "no message"},
		{name: "dup key", in: "new a image=x image=y", bad: "twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRootCtl(tt.in)
			if tt.bad != "" {
				if err == nil {
					t.Fatalf("parsed %q, want an error naming %q", tt.in, tt.bad)
				}
				if providers.CodeOf(err) != providers.Invalid {
					t.Errorf("code %v, want invalid", providers.CodeOf(err))
				}
				if !strings.Contains(err.Error(), tt.bad) {
					t.Errorf("error %q does not name %q", err, tt.bad)
				}
				return
			}
			require.NoError(t, err)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseBoxCtl(t *testing.T) {
	got, err := parseBoxCtl("flush\nsync\nsuspend\nsuspend force\nresume\nsnapshot before-upgrade\n")
	require.NoError(t, err)
	require.Equal(t, []boxCmd{{verb: "flush"}, {verb: "sync"}, {verb: "suspend"}, {verb: "suspend", arg: "force"},
		{verb: "resume"}, {verb: "snapshot", arg: "before-upgrade"}}, got)
	for _, bad := range []string{"frob\n", "flush now\n", "flush\nfrob\n", "", "suspend now\n", "suspend force force\n",
		"resume now\n", "snapshot\n", "snapshot a b\n", "snapshot 'a b'\n", "snapshot .hidden\n", "suspend x=1\n"} {
		if _, err := parseBoxCtl(bad); providers.CodeOf(err) != providers.Invalid {
			t.Errorf("parseBoxCtl(%q) = %v, want invalid", bad, err)
		}
	}
}

func TestQuoteMessage(t *testing.T) {
	tests := []struct{ in, want string }{
		{"new x env.TOKEN=sekrit lifetime=-5", `"new x env.TOKEN=<redacted> lifetime=-5"`},
		{`new x env.A='s e c' env.B="q\"r" label.k=v`, `"new x env.A=<redacted> env.B=<redacted> label.k=v"`},
		{`new x env.A='unterminated sekrit`, `"new x env.<redacted>"`},
		{`new x "env.A=sekrit"`, `"new x env.A=<redacted>"`},
		// Quoting cannot hide a key: it is judged as the parser reads it.
		{`new x 'env'.TOKEN=sekrit`, `"new x env.TOKEN=<redacted>"`},
		{`new x env."TOKEN"='s e c' e'nv.B'=sekrit`, `"new x env.TOKEN=<redacted> env.B=<redacted>"`},
		{`new x ENV.Token=sekrit Env.B=sekrit`, `"new x ENV.Token=<redacted> Env.B=<redacted>"`},
		{`new 'my box' image="a b" label.k="it's"`, `"new 'my box' image='a b' label.k=\"it's\""`},
		// A line the parser cannot read is cut at its first env.
		{`new x 'env'.TOKEN=sekrit "open`, `"new x env.<redacted>"`},
		{`new x "e"nv.A=sekrit 'open`, `"new x env.<redacted>"`},
		{`new x 'open`, `"new x open"`},
		{"new " + strings.Repeat("x", 1000), `"new ` + strings.Repeat("x", 252) + `"... (1004 bytes)`},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, quoteMessage(tt.in), tt.in)
	}
}
