package boxes_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/providers"
)

// rowsNamed returns the provider rows of the names given.
func rowsNamed(names ...string) []providerRow {
	var rows []providerRow
	for _, row := range providerRows {
		if slices.Contains(names, row.name) {
			rows = append(rows, row)
		}
	}
	return rows
}

// managerOn opens a manager whose one provider is p, metering nothing.
func managerOn(t *testing.T, p providers.Provider) *boxes.Manager {
	t.Helper()
	m, err := boxes.New(boxes.Options{
		StateDir:        t.TempDir(),
		DefaultProvider: p.Name(),
		OpenProvider:    func(string) (providers.Provider, error) { return p, nil },
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m
}

// readOut reads r from off to the end of the command's output.
func readOut(ctx context.Context, t *testing.T, r interface {
	ReadAt(context.Context, []byte, int64) (int, int64, error)
}, off int64) string {
	t.Helper()
	var out []byte
	buf := make([]byte, 7) // small reads, to cross the note's end
	for {
		n, at, err := r.ReadAt(ctx, buf, off)
		require.NoError(t, err)
		if n == 0 {
			return string(out)
		}
		out = append(out, buf[:n]...)
		off = at + int64(n)
	}
}

// cmds/N/out opened while a command runs on a box whose output arrives
// when the command ends says so first, then gives the output; opened on a
// box that streams output, or after the command ended, it is the output
// alone, as the exec file's is.
func TestOutputAtEndSaysSo(t *testing.T) {
	for _, row := range rowsNamed("local", "archil") {
		t.Run("provider="+row.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			p, spec := row.open(t)
			m := managerOn(t, p)
			require.NoError(t, m.Create(ctx, "a", "", spec))
			b := m.Lookup("a")
			defer func() { assert.NoError(t, b.Destroy(ctx)) }()

			c, err := b.Commands().Start(ctx, "echo hi; sleep 300")
			require.NoError(t, err)
			running := c.Output() // opened while it runs: it runs until killed
			first := make([]byte, len(boxes.AtEndNote))
			n, at, err := running.ReadAt(ctx, first, 0)
			require.NoError(t, err)
			assert.Zero(t, at)
			note := ""
			if row.name == "archil" {
				note = boxes.AtEndNote
				assert.Equal(t, note, string(first[:n]), "the first read of a running command's out")
			} else {
				assert.Equal(t, "hi\n", string(first[:n]), "the first read of a running command's out: its output")
			}
			require.NoError(t, c.Kill(ctx))
			out := readOut(ctx, t, c, 0) // the output itself, as the exec file gives it
			assert.Equal(t, note+out, readOut(ctx, t, running, 0), "out opened while the command ran")
			assert.Equal(t, out, readOut(ctx, t, c.Output(), 0), "out opened after the command ended")
			if note == "" {
				assert.Equal(t, "hi\n", out)
			}
		})
	}
}
