package providers_test

import (
	"context"
	"testing"

	"github.com/boxfs/boxfs/providers"
)

type nopProvider struct{ name string }

func (p nopProvider) Name() string { return p.name }
func (nopProvider) Create(context.Context, providers.Spec) (providers.Box, error) {
	return nil, providers.Errorf(providers.Unsupported, "nop.Create", "no")
}
func (nopProvider) Attach(context.Context, string) (providers.Box, error) {
	return nil, providers.Errorf(providers.NotFound, "nop.Attach", "no")
}
func (nopProvider) List(context.Context, map[string]string) ([]providers.Box, error) { return nil, nil }

func TestRegistry(t *testing.T) {
	providers.Register("test-nop", func(cfg providers.Config) (providers.Provider, error) {
		if err := providers.CheckOptions("nop.Open", cfg.Options, "root"); err != nil {
			return nil, err
		}
		return nopProvider{"test-nop"}, nil
	})
	p, err := providers.Open("test-nop", providers.Config{})
	if err != nil || p.Name() != "test-nop" {
		t.Fatalf("Open = %v, %v", p, err)
	}
	if _, err := providers.Open("test-nop", providers.Config{Options: map[string]string{"bogus": "1"}}); providers.CodeOf(err) != providers.Invalid {
		t.Errorf("unknown option: %v, want invalid", err)
	}
	if _, err := providers.Open("test-missing", providers.Config{}); providers.CodeOf(err) != providers.NotFound {
		t.Errorf("missing provider: %v, want not_found", err)
	}
	for _, bad := range []func(){
		func() {
			providers.Register("test-nop", func(providers.Config) (providers.Provider, error) { return nil, nil })
		},
		func() { providers.Register("", func(providers.Config) (providers.Provider, error) { return nil, nil }) },
		func() { providers.Register("test-nil", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("Register did not panic")
				}
			}()
			bad()
		}()
	}
}
