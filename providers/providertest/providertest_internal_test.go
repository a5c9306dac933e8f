package providertest

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/boxfs/boxfs/providers"
)

func TestOverlay(t *testing.T) {
	base := providers.Spec{
		Image:    "base-image",
		Lifetime: time.Minute,
		Network:  providers.Network{Mode: providers.NetworkOpen},
		Labels:   map[string]string{"a": "1"},
	}
	got := overlay(base, providers.Spec{
		Network: providers.Network{Mode: providers.NetworkNone},
		Labels:  map[string]string{"b": "2"},
	})
	if got.Image != "base-image" || got.Lifetime != time.Minute {
		t.Errorf("overlay lost base fields: %+v", got)
	}
	if got.Network.Mode != providers.NetworkNone {
		t.Errorf("overlay kept the base network: %+v", got.Network)
	}
	if !maps.Equal(got.Labels, map[string]string{"a": "1", "b": "2"}) {
		t.Errorf("labels %v", got.Labels)
	}
}

// Every spec field has a sample, and every sample passes Validate, so a
// refusal the suite sees comes from the provider's support check.
func TestSamples(t *testing.T) {
	for _, f := range providers.SpecFields {
		set, ok := samples[f]
		if !ok {
			t.Errorf("no sample for spec field %q", f)
			continue
		}
		sp := providers.Spec{Labels: map[string]string{}}
		set(&sp)
		if err := sp.Validate(); err != nil {
			t.Errorf("sample for %q: %v", f, err)
		}
		if !slices.Contains(sp.Fields(), f) {
			t.Errorf("sample for %q sets %v", f, sp.Fields())
		}
	}
}

func TestLineWriter(t *testing.T) {
	w := newLineWriter()
	go func() {
		w.Write([]byte("1\n2"))
		time.Sleep(10 * time.Millisecond)
		w.Write([]byte("\n3\n"))
	}()
	got, err := w.lines(3, 10*time.Second)
	if err != nil || !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Errorf("lines = %q, %v", got, err)
	}
	if _, err := newLineWriter().lines(1, 10*time.Millisecond); err == nil {
		t.Error("lines of nothing returned without error")
	}
}
