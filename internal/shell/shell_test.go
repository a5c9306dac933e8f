package shell_test

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"plain/path with space": "plain/path with space",
		"%s $x":                 "%s $x",
		"a\nb":                  `a\0012b`,
		`back\slash`:            `back\0134slash`,
		`it's "quoted"`:         `it\0047s \0042quoted\0042`,
		"\xff\n":                `\0377\0012`,
		"é":                     `\0303\0251`,
	} {
		assert.Equal(t, want, shell.Escape(in), "Escape(%q)", in)
	}
}

// What Escape writes, printf %b in sh gives back, every byte value.
func TestEscapeRoundTrip(t *testing.T) {
	var all []byte
	for c := 1; c < 256; c++ {
		all = append(all, byte(c))
	}
	out, err := exec.Command("sh", "-c", `a=$(printf '%bx' "$1"); printf '%s' "${a%x}"`, "sh", shell.Escape(string(all))).Output()
	require.NoError(t, err)
	assert.Equal(t, all, out)
}

func TestOctal(t *testing.T) {
	assert.Equal(t, "00755", shell.Octal(0o755))
	assert.Equal(t, "04755", shell.Octal(0o755|providers.FileMode(os.ModeSetuid)))
	assert.Equal(t, "01777", shell.Octal(0o777|providers.FileMode(os.ModeSticky)))
}

// killgroup ends a whole group, a member that ignores TERM included, and
// says so; a group that is already gone is gone at once.
func TestKillGroup(t *testing.T) {
	cmd := exec.Command("sh", "-c", `trap '' TERM; sleep 60 & sleep 60 & wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	pg := strconv.Itoa(cmd.Process.Pid)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() // reaps the leader; the sleeps are the group's
	out, err := exec.Command("sh", "-c", shell.KillGroup+`killgroup "$1" && echo gone`, "sh", pg).Output()
	require.NoError(t, err)
	assert.Equal(t, "gone\n", string(out))
	<-done
	// "gone" allows zombies, which their new parent reaps soon after.
	assert.Eventually(t, func() bool {
		return syscall.Kill(-cmd.Process.Pid, 0) == syscall.ESRCH
	}, 10*time.Second, 10*time.Millisecond, "a process of the group is left")

	// A caller's variables survive the functions.
	out, err = exec.Command("sh", "-c", shell.KillGroup+`f=a s=b l=c q=d g=e; killgroup "$1" && echo gone $f$s$l$q$g`, "sh", pg).Output()
	require.NoError(t, err)
	assert.Equal(t, "gone abcde\n", string(out))
}

func TestKillExit(t *testing.T) {
	gone := providers.Errorf(providers.Gone, "x.run", "box destroyed")
	lost := providers.Errorf(providers.TransportLost, "x.run", "stream broke")
	for _, tc := range []struct {
		code int
		err  error
		want providers.Code
	}{
		{0, nil, 0}, {3, nil, 0}, {-1, gone, 0},
		{4, nil, providers.Liveness}, {2, nil, providers.Unknown}, {-1, lost, providers.TransportLost},
	} {
		err := shell.KillExit("x.Kill", "b", tc.code, []byte("out\n"), tc.err)
		assert.Equal(t, tc.want, providers.CodeOf(err), "exit %d, err %v: %v", tc.code, tc.err, err)
	}
}

func TestUnescape(t *testing.T) {
	var all []byte
	for c := 0; c < 256; c++ {
		all = append(all, byte(c))
	}
	got, err := shell.Unescape(shell.Escape(string(all)))
	require.NoError(t, err)
	assert.Equal(t, string(all), got, "Unescape(Escape(x)) == x for every byte")
	for _, bad := range []string{`a\`, `\n`, `\0400`} {
		_, err := shell.Unescape(bad)
		assert.Error(t, err, "Unescape(%q)", bad)
	}
}
