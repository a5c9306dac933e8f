package boxes_test

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/boxfs/boxfs/boxes"
	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/ledger"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/archil"
	"github.com/boxfs/boxfs/providers/archil/archiltest"
	"github.com/boxfs/boxfs/providers/daytona"
	"github.com/boxfs/boxfs/providers/daytona/daytonatest"
	"github.com/boxfs/boxfs/providers/e2b"
	"github.com/boxfs/boxfs/providers/e2b/e2btest"
	"github.com/boxfs/boxfs/providers/local"
	"github.com/boxfs/boxfs/providers/modal"
	"github.com/boxfs/boxfs/providers/modal/modaltest"
)

var _ boxes.Meter = (*ledger.Ledger)(nil)

// providerRow opens one provider for the tests that run on every provider:
// adding a provider is adding a row.
type providerRow struct {
	name string
	// open returns the provider and the spec its boxes take here.
	open func(t *testing.T) (providers.Provider, providers.Spec)
}

// billedPerCall are the providers that bill a box per call, not per second.
var billedPerCall = map[string]bool{"archil": true}

var providerRows = []providerRow{
	{"local", func(t *testing.T) (providers.Provider, providers.Spec) {
		return local.New(t.TempDir()), providers.Spec{}
	}},
	{"docker", func(t *testing.T) (providers.Provider, providers.Spec) {
		return testbox.Docker(t), providers.Spec{}
	}},
	{"daytona", func(t *testing.T) (providers.Provider, providers.Spec) {
		srv := daytonatest.New(daytonatest.Options{})
		t.Cleanup(srv.Close)
		p, err := daytona.New(providers.Config{Options: map[string]string{"api_url": srv.APIURL(), "api_key": srv.APIKey()}})
		require.NoError(t, err)
		// The fake's sandboxes share this machine's file system.
		return p, providers.Spec{Workspace: t.TempDir()}
	}},
	{"modal", func(t *testing.T) (providers.Provider, providers.Spec) {
		srv, err := modaltest.New(modaltest.Options{})
		require.NoError(t, err)
		t.Cleanup(srv.Close)
		p, err := modal.New(providers.Config{Options: map[string]string{
			"server_url": srv.URL(), "token_id": srv.TokenID(), "token_secret": srv.TokenSecret()}})
		require.NoError(t, err)
		// The fake's sandboxes share this machine's file system.
		return p, providers.Spec{Workspace: t.TempDir()}
	}},
	{"e2b", func(t *testing.T) (providers.Provider, providers.Spec) {
		srv := e2btest.New(e2btest.Options{Dir: t.TempDir()})
		t.Cleanup(srv.Close)
		p, err := e2b.New(providers.Config{Options: map[string]string{
			"api_key": srv.APIKey(), "api_url": srv.APIURL(), "sandbox_url": srv.SandboxURL()}})
		require.NoError(t, err)
		return p, providers.Spec{}
	}},
	{"kubernetes", func(t *testing.T) (providers.Provider, providers.Spec) {
		return testbox.Kubernetes(t, nil), providers.Spec{}
	}},
	{"archil", func(t *testing.T) (providers.Provider, providers.Spec) {
		srv := archiltest.New(archiltest.Options{SharedMode: true})
		t.Cleanup(srv.Close)
		p, err := archil.New(providers.Config{Options: map[string]string{
			"api_url": srv.URL(), "s3_url": srv.URL(), "api_key": srv.APIKey(), "disk": "work", "create_disk": "true",
		}})
		require.NoError(t, err)
		return p, providers.Spec{}
	}},
}

// route is how hands reaches a box: its path and every method the
// provider's box has (its optional interfaces, and the native file
// operations hands looks for one by one).
type route struct {
	via     string
	methods []string
}

// routeOf makes a box named name with the manager and reads its route;
// the box is destroyed before it returns.
func routeOf(t *testing.T, m *boxes.Manager, name string, spec providers.Spec) route {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, m.Create(ctx, name, "", spec))
	b := m.Lookup(name)
	defer func() { assert.NoError(t, b.Destroy(ctx)) }()
	h, err := b.Hands(ctx)
	require.NoError(t, err)
	typ := reflect.TypeOf(h.Box())
	var r route
	r.via = h.Via()
	for i := range typ.NumMethod() {
		r.methods = append(r.methods, typ.Method(i).Name)
	}
	return r
}

// A box made while prices are configured is reached exactly as one made
// without: the same hands path, and hands finds the same methods on it
// (the ledger is a hook the manager calls; it never wraps the box). The
// priced box is metered all the same. No agent binary is given, so hands
// takes the provider's own paths (native files, the native API, a box's
// own file operations), the ones a wrapper would hide.
func TestPricedBoxKeepsItsRoute(t *testing.T) {
	for _, row := range providerRows {
		t.Run("provider="+row.name, func(t *testing.T) {
			p, spec := row.open(t)
			spec.Lifetime = 10 * time.Minute
			manager := func(meter boxes.Meter) *boxes.Manager {
				m, err := boxes.New(boxes.Options{
					StateDir:        t.TempDir(),
					DefaultProvider: p.Name(),
					OpenProvider:    func(string) (providers.Provider, error) { return p, nil },
					Meter:           meter,
					Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
				})
				require.NoError(t, err)
				return m
			}
			state := t.TempDir()
			rate := 0.001
			price := ledger.Price{USDPerSecond: &rate, Source: "test", Priced: "2026-12-01"}
			if billedPerCall[row.name] {
				price = ledger.Price{USDPerCall: &rate, Source: "test", Priced: "2026-12-01"}
			}
			l, err := ledger.Open(ledger.Config{
				StateDir: state,
				Prices:   ledger.Prices{p.Name(): price},
				Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			require.NoError(t, err)

			unpriced := routeOf(t, manager(nil), "plain", spec)
			priced := routeOf(t, manager(l), "priced", spec)
			require.NotEmpty(t, unpriced.via)
			t.Logf("via %s; the box has %d methods", unpriced.via, len(unpriced.methods))
			assert.Equal(t, unpriced.via, priced.via, "hands path")
			assert.Equal(t, unpriced.methods, priced.methods, "methods of the box hands was given")
			for name, iface := range optional {
				assert.Equal(t, has(unpriced, iface), has(priced, iface), name)
			}

			rs, err := ledger.ReadAll(state)
			require.NoError(t, err)
			require.Len(t, rs, 1, "the priced box's receipt")
			assert.Equal(t, p.Name(), rs[0].Provider)
			assert.NotNil(t, rs[0].CostUSD)
			if billedPerCall[row.name] {
				// The box was sent no Exec, yet its create and its removal
				// were billed calls: the receipt counts the box's own calls.
				require.NotNil(t, rs[0].Calls, "a receipt priced per call")
				assert.GreaterOrEqual(t, *rs[0].Calls, int64(2))
				assert.InDelta(t, float64(*rs[0].Calls)*rate, *rs[0].CostUSD, 1e-9)
			}
		})
	}
}

// optional are the providers interfaces a box may have besides Box.
var optional = map[string]reflect.Type{
	"Files":          reflect.TypeFor[providers.Files](),
	"Walker":         reflect.TypeFor[providers.Walker](),
	"Archiver":       reflect.TypeFor[providers.Archiver](),
	"PathStater":     reflect.TypeFor[providers.PathStater](),
	"LinkAttrSetter": reflect.TypeFor[providers.LinkAttrSetter](),
	"Endpointer":     reflect.TypeFor[providers.Endpointer](),
}

// has reports whether r's box has every method of iface.
func has(r route, iface reflect.Type) bool {
	for i := range iface.NumMethod() {
		if !slices.Contains(r.methods, iface.Method(i).Name) {
			return false
		}
	}
	return true
}
