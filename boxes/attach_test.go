package boxes_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/fake"
)

// A box already presented under one name is not attached under a second:
// the two names would share its cache and command records. The error is
// Exists and names the name it has; once that name is forgotten, the box
// can be attached under the new one.
func TestAttachRefusesATwin(t *testing.T) {
	ctx := context.Background()
	fp := fake.New()
	m, err := boxes.New(boxes.Options{
		StateDir:        t.TempDir(),
		DefaultProvider: "fake",
		OpenProvider:    func(string) (providers.Provider, error) { return fp, nil },
	})
	require.NoError(t, err)
	require.NoError(t, m.Create(ctx, "one", "", providers.Spec{}))
	id := m.Lookup("one").Info().ID
	require.NotEmpty(t, id)

	err = m.Attach(ctx, "two", "fake", id)
	require.Error(t, err)
	assert.Equal(t, providers.Exists, providers.CodeOf(err))
	assert.Contains(t, err.Error(), `already attached as "one"`)
	assert.Equal(t, []string{"one"}, m.Names(), "the second name is not kept")

	// The same name again is the name-taken error, as before.
	err = m.Attach(ctx, "one", "fake", id)
	assert.Equal(t, providers.Exists, providers.CodeOf(err))

	// Another box, or the same box after its first name is forgotten, is
	// attached.
	require.NoError(t, m.Create(ctx, "three", "", providers.Spec{}))
	other := m.Lookup("three").Info().ID
	require.NoError(t, m.Forget(ctx, "three"))
	require.NoError(t, m.Attach(ctx, "four", "fake", other))
	require.NoError(t, m.Forget(ctx, "one"))
	require.NoError(t, m.Attach(ctx, "two", "fake", id))
	assert.Equal(t, []string{"four", "two"}, m.Names())
}

// Two attaches of one box under two names at once: one wins, the other is
// refused.
func TestAttachTwinRace(t *testing.T) {
	ctx := context.Background()
	fp := fake.New()
	m, err := boxes.New(boxes.Options{
		StateDir:        t.TempDir(),
		DefaultProvider: "fake",
		OpenProvider:    func(string) (providers.Provider, error) { return fp, nil },
	})
	require.NoError(t, err)
	require.NoError(t, m.Create(ctx, "made", "", providers.Spec{}))
	id := m.Lookup("made").Info().ID
	require.NoError(t, m.Forget(ctx, "made"))

	errs := make(chan error, 2)
	for _, name := range []string{"x", "y"} {
		go func() { errs <- m.Attach(ctx, name, "fake", id) }()
	}
	var ok, exists int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case providers.IsCode(err, providers.Exists):
			exists++
		default:
			t.Errorf("attach: %v", err)
		}
	}
	assert.Equal(t, 1, ok)
	assert.Equal(t, 1, exists)
	assert.Len(t, m.Names(), 1)
}
