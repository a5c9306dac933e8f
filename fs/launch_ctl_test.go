package fs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
)

func TestParseLaunchCtl(t *testing.T) {
	msgs, err := parseLaunchCtl("start grace=2s -- sh -c 'echo a b'\nstop grace=1s\nrestart\nstop\nremove\n")
	require.NoError(t, err)
	require.Len(t, msgs, 5)
	assert.Equal(t, "remove", msgs[4].verb)
	assert.Equal(t, []string{"sh", "-c", "echo a b"}, msgs[0].spec.Argv)
	require.NotNil(t, msgs[1].grace)
	assert.Equal(t, time.Second, *msgs[1].grace)
	assert.Equal(t, "restart", msgs[2].verb)
	assert.Nil(t, msgs[3].grace)
	for _, bad := range []string{"", "start\n", "stop now\n", "stop grace=1 grace=2\n", "restart x\n", "remove x\n", "kill\n", "stop\nfrob\n", "start -- 'x\n"} {
		_, err := parseLaunchCtl(bad)
		assert.True(t, providers.IsCode(err, providers.Invalid), "%q: %v", bad, err)
	}
}

func TestParseBoxMsgs(t *testing.T) {
	msgs, err := parseBoxMsgs("flush\nlaunch web grace=1 -- npm start\nsync\n")
	require.NoError(t, err)
	require.Len(t, msgs, 3)
	assert.Equal(t, "flush", msgs[0].cmd.verb)
	assert.Equal(t, "web", msgs[1].launch)
	assert.Equal(t, []string{"npm", "start"}, msgs[1].spec.Argv)
	assert.Equal(t, "sync", msgs[2].cmd.verb)
	for _, bad := range []string{"launch\n", "launch web\n", "launch ../x -- y\n", "launch web frob=1 -- y\n", "flush\nlaunch\n", "flush x\n"} {
		_, err := parseBoxMsgs(bad)
		assert.True(t, providers.IsCode(err, providers.Invalid), "%q: %v", bad, err)
	}
}
