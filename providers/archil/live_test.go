package archil_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/archil"
	"github.com/boxfs/boxfs/providers/providertest"
)

// TestLive runs the conformance suite against Archil itself, on a new
// disk in an AWS region (ARCHIL_REGION, else aws-us-east-1), and checks
// that the disk is deleted at the end. It runs only when ARCHIL_API_KEY is
// set, never in CI.
func TestLive(t *testing.T) {
	key := os.Getenv("ARCHIL_API_KEY")
	if key == "" {
		t.Skip("ARCHIL_API_KEY is not set: the live suite is not configured")
	}
	region := os.Getenv("ARCHIL_REGION")
	if region == "" {
		region = "aws-us-east-1"
	}
	name := "boxfs-live-" + providers.NewID(4)
	p, err := archil.New(providers.Config{Options: map[string]string{"api_key": key, "region": region, "disk": name, "create_disk": "true"}})
	require.NoError(t, err)
	t.Cleanup(func() { deleteLiveDisk(t, key, region, name) })
	providertest.Run(t, providertest.Harness{
		Provider:      p,
		Unsupported:   []string{"image", "snapshot", "gpu", "network", "ports", "env", "mounts", "workspace", "user", "capabilities"},
		NoStdin:       true,
		OutputAtEnd:   true,
		Serial:        true,
		Lifetime:      30 * time.Second,
		LifetimeSlack: time.Minute,
		LargeOutput:   4 << 20,
	})
}

// deleteLiveDisk deletes the suite's disk through the control plane and
// checks that it is gone.
func deleteLiveDisk(t *testing.T, key, region, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := map[string]string{
		"aws-us-east-1": "https://control.green.us-east-1.aws.prod.archil.com",
		"aws-us-west-2": "https://control.green.us-west-2.aws.prod.archil.com",
		"aws-eu-west-1": "https://control.green.eu-west-1.aws.prod.archil.com",
	}[region]
	id := liveDiskID(t, ctx, key, base, name)
	if id == "" {
		t.Errorf("the live disk %s was not found to delete", name)
		return
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, base+"/api/disks/"+id, nil)
	req.Header.Set("Authorization", "key-"+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "deleting disk %s", id)
	assert.Empty(t, liveDiskID(t, ctx, key, base, name), "the live disk is still listed after its delete")
}

func liveDiskID(t *testing.T, ctx context.Context, key, base, name string) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/disks?name="+url.QueryEscape(name), nil)
	req.Header.Set("Authorization", "key-"+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var env struct {
		Data []struct {
			ID, Name, Status string
		} `json:"data"`
	}
	require.NoError(t, jsonDecode(resp, &env))
	for _, d := range env.Data {
		if d.Name == name && d.Status != "deleted" && d.Status != "deleting" {
			return d.ID
		}
	}
	return ""
}
