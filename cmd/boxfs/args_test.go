package main

import (
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestReorderArgs(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	cases := []struct{ in, want string }{
		{"boxfs mount /m --background", "boxfs mount --background /m"},
		{"boxfs mount /m -o allow_other,state=/s", "boxfs mount -o allow_other,state=/s /m"},
		{"boxfs mount /m -oallow_other", "boxfs mount -o allow_other /m"},
		{"boxfs mount /m --state /s", "boxfs --state /s mount /m"},
		{"boxfs ls --json --state=/s", "boxfs --state=/s ls --json"},
		{"boxfs --state /s seed b /d --exclude x --json", "boxfs --state /s seed --exclude x --json b /d"},
		{"boxfs exec b -- ls -la", "boxfs exec b -- ls -la"},
		{"boxfs exec b ls -la --state /x", "boxfs exec b ls -la --state /x"},
		{"boxfs exec --state /s b ls", "boxfs --state /s exec b ls"},
		{"boxfs exec -- ls -la", "boxfs exec -- -- ls -la"},
		{"boxfs sh -c ls --state /x", "boxfs sh -c ls --state /x"},
		{"boxfs ls --nope", "boxfs ls --nope"},
		{"boxfs agent -sha256 abc", "boxfs agent -sha256 abc"},
		{"boxfs rm b --generate-bash-completion", "boxfs rm b --generate-bash-completion"},
		{"boxfs frob --x", "boxfs frob --x"},
	}
	for _, c := range cases {
		got := strings.Join(reorderArgs(app, strings.Fields(c.in)), " ")
		if got != c.want {
			t.Errorf("reorderArgs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestShellLine: the quoted line gives sh back the argv, byte for byte.
func TestShellLine(t *testing.T) {
	argv := []string{"printf", "[%s]", "plain", "a b", "it's", `"dq"`, "$HOME", "`id`", "*", "", "tab\there", "back\\slash", "ünï", "-n", ";&|<>()"}
	line, err := shellLine(argv)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-c", line).Output()
	if err != nil {
		t.Fatalf("sh -c %q: %v", line, err)
	}
	var want strings.Builder
	for _, a := range argv[2:] {
		want.WriteString("[" + a + "]")
	}
	if string(out) != want.String() {
		t.Errorf("sh -c %q printed %q, want %q", line, out, want.String())
	}
	if _, err := shellLine([]string{"echo", "a\nb"}); err == nil {
		t.Errorf("a newline in an argument was quoted, want an error")
	}
}

func TestParseListing(t *testing.T) {
	got := parseListing("web docker abc123 ready\nmy box local 9f unhealthy\napi local - declared\n\n")
	want := []boxRow{
		{Name: "api", Provider: "local", State: "declared"},
		{Name: "my box", Provider: "local", ID: "9f", State: "unhealthy"},
		{Name: "web", Provider: "docker", ID: "abc123", State: "ready"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseListing = %+v, want %+v", got, want)
	}
}

func TestCtlQuote(t *testing.T) {
	cases := map[string]string{
		"plain":      "plain",
		"a b":        "'a b'",
		"it's":       `"it's"`,
		`it's "x"`:   `"it's \"x\""`,
		"":           "''",
		`back\slash`: `'back\slash'`,
	}
	for in, want := range cases {
		if got := ctlQuote(in); got != want {
			t.Errorf("ctlQuote(%q) = %s, want %s", in, got, want)
		}
	}
	if got := ctlQuotePair("env.X=a b"); got != "env.X='a b'" {
		t.Errorf("ctlQuotePair = %s", got)
	}
}
