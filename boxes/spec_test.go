package boxes_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		words    []string
		provider string
		spec     providers.Spec
		bad      string // a word the error must name
	}{
		{words: nil},
		{words: []string{"provider=docker", "image=img:1", "lifetime=90m", "cpus=1.5", "memory=2g", "network=none", "env.A=a=b", "label.team=x", "workspace=/w", "ports=80,443"},
			provider: "docker", spec: providers.Spec{
				Image: "img:1", Lifetime: 90 * time.Minute, CPUs: 1.5, MemoryMB: 2048,
				Network: providers.Network{Mode: providers.NetworkNone}, Env: map[string]string{"A": "a=b"},
				Labels: map[string]string{"team": "x"}, Workspace: "/w", Ports: []int{80, 443}}},
		{words: []string{"lifetime=300", "memory=512"}, spec: providers.Spec{Lifetime: 300 * time.Second, MemoryMB: 512}},
		{words: []string{"network=pypi.org,github.com"}, spec: providers.Spec{Network: providers.Network{Mode: providers.NetworkAllowlist, Allow: []string{"pypi.org", "github.com"}}}},
		{words: []string{"workspace=host"}, spec: providers.Spec{Workspace: boxes.WorkspaceHost}},
		{words: []string{"workspace=rel/dir"}, bad: "absolute"},
		{words: []string{"plain"}, bad: "key=value"},
		{words: []string{"=x"}, bad: "key=value"},
		{words: []string{"colour=red"}, bad: "colour"},
		{words: []string{"image=a", "image=b"}, bad: "twice"},
		{words: []string{"lifetime=-5"}, bad: "positive"},
		{words: []string{"memory=lots"}, bad: "memory"},
		{words: []string{"ports=http"}, bad: "ports"},
		{words: []string{"network="}, bad: "network"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.words, " "), func(t *testing.T) {
			provider, spec, err := boxes.ParseSpec(tt.words)
			if tt.bad != "" {
				require.Error(t, err)
				assert.Equal(t, providers.Invalid, providers.CodeOf(err))
				assert.Contains(t, err.Error(), tt.bad)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.provider, provider)
			assert.Equal(t, tt.spec, spec)
		})
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "dev-1", "with space", "ünï", strings.Repeat("x", 63), "a-", "a\u00a0b"} {
		assert.NoError(t, boxes.CheckName(ok), ok)
	}
	for _, bad := range []string{"", "a/b", ".a", "ctl", "err", "a\nb", "a\x00b", "\xff", strings.Repeat("x", 64),
		"a\x1b[31mred", "a\tb", "a\rb", "a\x7fb", "a\u0085b", "a\u009bb", "-rf", "--help"} {
		err := boxes.CheckName(bad)
		assert.True(t, providers.IsCode(err, providers.Invalid), "CheckName(%q) = %v", bad, err)
	}
}

// A name no ctl message could name ('=' makes a word a key) or that
// displays as another (a Unicode format character) is refused, and the
// error says which character, escaped.
func TestCheckNameRefusesKeysAndFormatCharacters(t *testing.T) {
	tests := []struct{ name, says string }{
		{"a=b", "'='"},
		{"=", "'='"},
		{"key=", "'='"},
		{"evil\u202etxt.exe", "U+202E"},   // RIGHT-TO-LEFT OVERRIDE
		{"a\u200bb", "U+200B"},            // ZERO WIDTH SPACE
		{"\ufeffbom", "U+FEFF"},           // ZERO WIDTH NO-BREAK SPACE
		{"soft\u00adhyphen", "U+00AD"},    // SOFT HYPHEN
		{"iso\u2066late\u2069", "U+2066"}, // LEFT-TO-RIGHT ISOLATE
	}
	for _, tt := range tests {
		err := boxes.CheckName(tt.name)
		require.Error(t, err, "%q", tt.name)
		assert.Equal(t, providers.Invalid, providers.CodeOf(err), "%q", tt.name)
		assert.Contains(t, err.Error(), tt.says)
		assert.NotContains(t, err.Error(), "\u202e", "the error prints the name escaped, never raw")
	}
}

// Create and Attach refuse such names before asking the provider, and a
// record made under the older rule is still read back, so its box is not
// left running unseen.
func TestCreateAttachRefuseKeysAndFormatCharacters(t *testing.T) {
	ctx := context.Background()
	fp := fake.New()
	state := t.TempDir()
	open := func() *boxes.Manager {
		m, err := boxes.New(boxes.Options{
			StateDir:        state,
			DefaultProvider: "fake",
			OpenProvider:    func(string) (providers.Provider, error) { return fp, nil },
		})
		require.NoError(t, err)
		return m
	}
	m := open()
	for _, name := range []string{"a=b", "x\u202ey"} {
		err := m.Create(ctx, name, "", providers.Spec{})
		assert.Equal(t, providers.Invalid, providers.CodeOf(err), "create %q: %v", name, err)
		err = m.Attach(ctx, name, "fake", "any")
		assert.Equal(t, providers.Invalid, providers.CodeOf(err), "attach %q: %v", name, err)
	}
	assert.Empty(t, m.Names())
	assert.Empty(t, fp.Calls(), "nothing was asked of the provider")

	// A box an older boxfs made as "old=name" is still read back.
	require.NoError(t, m.Create(ctx, "old", "", providers.Spec{}))
	rec := filepath.Join(state, "boxes", "old.json")
	b, err := os.ReadFile(rec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(state, "boxes", "old=name.json"),
		[]byte(strings.Replace(string(b), `"name": "old"`, `"name": "old=name"`, 1)), 0o600))
	require.NoError(t, os.Remove(rec))
	assert.Equal(t, []string{"old=name"}, open().Names())
}

// A declared box is made at its first use and recorded; a second manager
// on the same state directory finds it again by its id, and a forgotten
// box is found by neither.
func TestRecordsAndDeclared(t *testing.T) {
	ctx := context.Background()
	fp := fake.New()
	state := t.TempDir()
	open := func() *boxes.Manager {
		m, err := boxes.New(boxes.Options{
			StateDir:        state,
			DefaultProvider: "fake",
			OpenProvider:    func(string) (providers.Provider, error) { return fp, nil },
			Declared:        []boxes.Declared{{Name: "api", Spec: providers.Spec{Labels: map[string]string{"role": "api"}}}},
			Logger:          quiet(),
		})
		require.NoError(t, err)
		t.Cleanup(func() { m.Shutdown(ctx) })
		return m
	}
	first := open()
	assert.Equal(t, boxes.Info{Name: "api", Provider: "fake", State: boxes.StateDeclared}, first.Lookup("api").Info())
	assert.Empty(t, fp.Boxes(), "a declared box is not made before its first use")
	require.NoError(t, first.Create(ctx, "b", "", providers.Spec{}))
	require.NoError(t, first.Create(ctx, "gone-soon", "", providers.Spec{}))
	require.NoError(t, first.Forget(ctx, "gone-soon"))
	_, err := first.Facts(ctx, "api")
	require.NoError(t, err)
	made := first.Lookup("api").Info()
	require.Equal(t, boxes.StateReady, made.State)
	require.Len(t, fp.Boxes(), 3)
	assert.Equal(t, "api", fp.Boxes()[2].Labels()["role"])

	second := open()
	assert.Equal(t, []string{"api", "b"}, second.Names())
	again := second.Lookup("api").Info()
	assert.Equal(t, made.ID, again.ID, "found again by its id")
	_, err = second.Facts(ctx, "api")
	require.NoError(t, err)
	assert.Len(t, fp.Boxes(), 3, "found again, not made again")
	err = second.Create(ctx, "b", "", providers.Spec{})
	assert.True(t, providers.IsCode(err, providers.Exists), "Create of a taken name: %v", err)
}

// ParseNew takes boxfs's own keys (write=, watch=) out of a new message,
// refuses a bad value or a key given twice, and leaves the rest to the
// provider's spec.
func TestParseNewSettings(t *testing.T) {
	for _, tc := range []struct {
		words []string
		want  boxes.Settings
		err   bool
	}{
		{words: []string{"provider=local"}},
		{words: []string{"watch=off", "provider=local"}, want: boxes.Settings{Watch: boxes.WatchOff}},
		{words: []string{"watch=on", "write=behind"}, want: boxes.Settings{Watch: boxes.WatchOn, Write: boxes.WriteBehind}},
		{words: []string{"watch=no"}, err: true},
		{words: []string{"watch=off", "watch=on"}, err: true},
		{words: []string{"write=sometimes"}, err: true},
	} {
		_, _, got, err := boxes.ParseNew(tc.words)
		if tc.err {
			assert.True(t, providers.IsCode(err, providers.Invalid), "%q: %v", tc.words, err)
			continue
		}
		if assert.NoError(t, err, "%q", tc.words) {
			assert.Equal(t, tc.want, got, "%q", tc.words)
		}
	}
}
