package launch_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/launch"
)

func TestParseStart(t *testing.T) {
	grace := 90 * time.Second
	zero := time.Duration(0)
	tests := []struct {
		words []string
		want  launch.Spec
		bad   string
	}{
		{words: []string{"--", "npm", "run", "dev"}, want: launch.Spec{Argv: []string{"npm", "run", "dev"}}},
		{words: []string{"restart=off", "terminal=3,4", "burst=2/10s", "grace=90", "user=www", "dir=/srv", "--", "x"},
			want: launch.Spec{Argv: []string{"x"}, NoRestart: true, Terminal: []int{3, 4}, Burst: 2, BurstWindow: 10 * time.Second, Grace: &grace, User: "www", Dir: "/srv"}},
		{words: []string{"env.MODE=a b", "inherit=TERM,TZ", "before-stop=curl -X POST x", "before-stop-max=5s", "log=512k", "grace=0", "--", "x", ""},
			want: launch.Spec{Argv: []string{"x", ""}, Env: map[string]string{"MODE": "a b"}, Inherit: []string{"TERM", "TZ"},
				BeforeStop: []string{"sh", "-c", "curl -X POST x"}, BeforeStopMax: 5 * time.Second, LogMax: 512 << 10, Grace: &zero}},
		{words: []string{"npm"}, bad: "no program"},
		{words: []string{"--"}, bad: "no program"},
		{words: []string{"restart=maybe", "--", "x"}, bad: "on or off"},
		{words: []string{"grace=601s", "--", "x"}, bad: "grace"},
		{words: []string{"grace=-1s", "--", "x"}, bad: "duration"},
		{words: []string{"burst=5", "--", "x"}, bad: "N/DURATION"},
		{words: []string{"terminal=3,x", "--", "x"}, bad: "exit codes"},
		{words: []string{"terminal=300", "--", "x"}, bad: "0 to 255"},
		{words: []string{"log=1k", "--", "x"}, bad: "log size"},
		{words: []string{"log=big", "--", "x"}, bad: "size"},
		{words: []string{"user=a b", "--", "x"}, bad: "user"},
		{words: []string{"dir=rel", "--", "x"}, bad: "absolute"},
		{words: []string{"frob=1", "--", "x"}, bad: "unknown key"},
		{words: []string{"grace=1", "grace=2", "--", "x"}, bad: "twice"},
		{words: []string{"noequals", "--", "x"}, bad: "key=value"},
		{words: []string{"env.GITHUB_TOKEN=x", "--", "x"}, bad: "secrets"},
		{words: []string{"env.LD_PRELOAD=x", "--", "x"}, bad: "loader"},
		{words: []string{"inherit=AWS_SECRET", "--", "x"}, bad: "inherit"},
		{words: []string{"--", "A=B"}, bad: "'='"},
	}
	for _, tc := range tests {
		got, err := launch.ParseStart(tc.words)
		if tc.bad != "" {
			if assert.Error(t, err, "%q", tc.words) {
				assert.Contains(t, err.Error(), tc.bad, "%q", tc.words)
			}
			continue
		}
		require.NoError(t, err, "%q", tc.words)
		assert.Equal(t, tc.want, got, "%q", tc.words)
	}
}

func TestParseSecrets(t *testing.T) {
	tests := []struct {
		in   string
		want map[string]string
		bad  bool
	}{
		{"A=1\nB=two words\n\n", map[string]string{"A": "1", "B": "two words"}, false},
		{"A=1\r\nB=x=y", map[string]string{"A": "1", "B": "x=y"}, false},
		{"PEM=-----BEGIN\nline\n-----END\x00B=2\x00", map[string]string{"PEM": "-----BEGIN\nline\n-----END", "B": "2"}, false},
		{"", map[string]string{}, false},
		{"novalue\n", nil, true},
		{"A=1\nA=2\n", nil, true},
		{"bad-name=1\n", nil, true},
		{"A=" + strings.Repeat("x", launch.MaxSecrets) + "\n", nil, true},
	}
	for _, tc := range tests {
		got, err := launch.ParseSecrets([]byte(tc.in))
		if tc.bad {
			assert.Error(t, err, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
}

func TestStatusLine(t *testing.T) {
	code := 3
	assert.Equal(t, "phase=restarting incarnation=2 restarts=1 last_exit=3 pid=42 via=sh secrets=yes\n",
		launch.StatusLine(launch.State{Phase: launch.Restarting, Incarnation: 2, Restarts: 1, LastExit: &code, PID: 42, Via: "sh", Secrets: true}))
}
