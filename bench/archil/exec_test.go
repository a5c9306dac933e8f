// Package archil measures what the Archil provider adds to one command on
// the in-process fake: the provider's Exec of "true" (its wrapper, the
// box's checkout, output through the answer) against one raw exec request
// of "true" to the same fake.
package archil

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/archil"
	"github.com/boxfs/boxfs/providers/archil/archiltest"
)

func setup(b testing.TB) (*archiltest.Server, providers.Box) {
	srv := archiltest.New(archiltest.Options{SharedMode: true})
	b.Cleanup(srv.Close)
	p, err := archil.New(providers.Config{Options: map[string]string{
		"api_url": srv.URL(), "s3_url": srv.URL(), "api_key": srv.APIKey(), "disk": "work", "create_disk": "true",
	}})
	require.NoError(b, err)
	box, err := p.Create(context.Background(), providers.Spec{})
	require.NoError(b, err)
	b.Cleanup(func() { box.Destroy(context.Background()) })
	return srv, box
}

// BenchmarkExec runs "true" through the provider.
func BenchmarkExec(b *testing.B) {
	_, box := setup(b)
	ctx := context.Background()
	for b.Loop() {
		p, err := box.Exec(ctx, providers.ExecRequest{Argv: []string{"true"}})
		require.NoError(b, err)
		code, err := p.Wait()
		require.NoError(b, err)
		require.Equal(b, 0, code)
	}
}

// BenchmarkRawExec sends the fake one exec request of "true".
func BenchmarkRawExec(b *testing.B) {
	srv, _ := setup(b)
	ids := srv.DiskIDs()
	require.Len(b, ids, 1)
	body, err := json.Marshal(map[string]string{"command": "true"})
	require.NoError(b, err)
	for b.Loop() {
		req, err := http.NewRequest(http.MethodPost, srv.URL()+"/api/disks/"+ids[0]+"/exec", bytes.NewReader(body))
		require.NoError(b, err)
		req.Header.Set("Authorization", "key-"+srv.APIKey())
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(b, err)
		var env struct {
			Success bool `json:"success"`
		}
		require.NoError(b, json.NewDecoder(resp.Body).Decode(&env))
		resp.Body.Close()
		require.True(b, env.Success)
	}
}
