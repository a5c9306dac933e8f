package archil_test

import (
	"bytes"
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
// disk in an AWS region (ARCHIL_REGION, else aws-us-east-1), then checks
// the sweep: List finds none of the run's boxes, and the disk holds no
// box's directory, record or command files but those of one last box.
// It deletes the disk at the end and checks that it is gone. It runs only
// when ARCHIL_API_KEY is set, never in CI. ARCHIL_API_URL and
// ARCHIL_S3_URL, when set, point it at another control plane and object
// API (an archiltest fake run on its own).
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
	opts := map[string]string{"api_key": key, "region": region, "disk": name, "create_disk": "true"}
	for env, opt := range map[string]string{"ARCHIL_API_URL": "api_url", "ARCHIL_S3_URL": "s3_url"} {
		if v := os.Getenv(env); v != "" {
			opts[opt] = v
		}
	}
	open := func(t *testing.T) providers.Provider {
		p, err := archil.New(providers.Config{Options: opts})
		require.NoError(t, err)
		return p
	}
	p := open(t)
	t.Cleanup(func() { deleteLiveDisk(t, key, opts["api_url"], region, name) })
	labels := map[string]string{liveLabel: name}
	providertest.Run(t, providertest.Harness{
		Provider:    p,
		Reopen:      open,
		Spec:        providers.Spec{Labels: labels},
		Unsupported: []string{"image", "snapshot", "gpu", "network", "ports", "env", "mounts", "workspace", "user", "capabilities"},
		NoStdin:     true,
		OutputAtEnd: true,
		Serial:      true,
		// Inside one command's bound (about 30 s, less a margin), so that
		// the Lifetime subtest's command meets the box's end, not the bound.
		Lifetime:      15 * time.Second,
		LifetimeSlack: time.Minute,
		LargeOutput:   4 << 20,
	})
	t.Run("Sweep", func(t *testing.T) { liveSweep(t, p, labels) })
}

// liveLabel marks every box the live suite makes, with the disk's name.
const liveLabel = "boxfs-live-test"

// liveSweep destroys whatever box of the run List still finds, checks
// that none is listed then, and that the disk holds the files of no box
// but one made last: List sweeps the directories of boxes without a
// record, and Destroy removes a box's own.
func liveSweep(t *testing.T, p providers.Provider, labels map[string]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	left, err := p.List(ctx, labels)
	require.NoError(t, err, "List")
	for _, b := range left {
		t.Errorf("box %s of the run is still listed after the suite", b.ID())
		assert.NoError(t, b.Destroy(ctx), "Destroy(%s)", b.ID())
	}
	left, err = p.List(ctx, labels)
	require.NoError(t, err, "List")
	assert.Empty(t, left, "boxes of the run listed after their Destroy")
	_, err = p.List(ctx, nil) // sweeps the directories of boxes without a record
	require.NoError(t, err, "List(nil)")

	b, err := p.Create(ctx, providers.Spec{Lifetime: 10 * time.Minute, Labels: labels})
	require.NoError(t, err, "Create")
	defer func() { assert.NoError(t, b.Destroy(ctx), "Destroy") }()
	var out bytes.Buffer
	pr, err := b.Exec(ctx, providers.ExecRequest{
		Argv:   []string{"sh", "-c", `cd .. && for f in boxes/* boxes.cmds/* boxes.records/*; do [ -e "$f" ] && echo "$f"; done; true`},
		Dir:    "..",
		Stdout: &out,
	})
	require.NoError(t, err, "Exec")
	code, err := pr.Wait()
	require.NoError(t, err, "Wait")
	require.Equal(t, 0, code, "the listing's exit")
	want := "boxes/" + b.ID() + "\nboxes.cmds/" + b.ID() + "\nboxes.records/" + b.ID() + ".json\n"
	assert.Equal(t, want, out.String(), "the disk's box files, with one box left")
}

// deleteLiveDisk deletes the suite's disk through the control plane and
// checks that it is gone.
func deleteLiveDisk(t *testing.T, key, base, region, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if base == "" {
		base = map[string]string{
			"aws-us-east-1": "https://control.green.us-east-1.aws.prod.archil.com",
			"aws-us-west-2": "https://control.green.us-west-2.aws.prod.archil.com",
			"aws-eu-west-1": "https://control.green.eu-west-1.aws.prod.archil.com",
		}[region]
	}
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
