package pathmap

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

func TestUnder(t *testing.T) {
	m := New[int]()
	for i, p := range []string{"", "a", "a/b", "a/b/c", "a/bc", "ab", "x/y/z"} {
		m.Set(p, i)
	}
	assert.Equal(t, 7, m.Len())
	for _, tc := range []struct {
		p    string
		want []string
	}{
		{"a", []string{"a/b", "a/b/c", "a/bc"}},
		{"a/b", []string{"a/b/c"}},
		{"a/b/c", nil},
		{"ab", nil},
		{"x", []string{"x/y/z"}},
		{"x/y", []string{"x/y/z"}},
		{"missing", nil},
		{"", []string{"a", "a/b", "a/b/c", "a/bc", "ab", "x/y/z"}},
	} {
		assert.Equal(t, tc.want, sorted(m.Under(tc.p)), "Under(%q)", tc.p)
		assert.Equal(t, len(tc.want) > 0, m.HasUnder(tc.p), "HasUnder(%q)", tc.p)
	}
	v, ok := m.Get("a/bc")
	assert.True(t, ok)
	assert.Equal(t, 4, v)
}

func TestDelete(t *testing.T) {
	m := New[string]()
	m.Set("a/b/c", "c")
	m.Set("a", "a")
	assert.True(t, m.Delete("a/b/c"))
	assert.False(t, m.Delete("a/b/c"), "deleted twice")
	assert.False(t, m.Delete("a/b"), "a path never kept")
	assert.Empty(t, m.Under("a"))
	assert.False(t, m.HasUnder("a"))
	m.Set("a/b/c", "c2")
	m.Set("a/b", "b")
	assert.Equal(t, []string{"a/b", "a/b/c"}, sorted(m.DeleteUnder("a")))
	assert.Equal(t, 1, m.Len())
	assert.True(t, m.Has("a"))
	assert.True(t, m.Delete("a"))
	assert.Equal(t, 0, m.Len())
	assert.Nil(t, m.root.kids["a"], "an emptied branch is pruned")
}

// A random series of sets and deletes answers Under as a scan of every
// path would.
func TestAgainstScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := New[int]()
	ref := map[string]bool{}
	names := []string{"a", "b", "c"}
	randPath := func() string {
		n := 1 + rng.IntN(4)
		segs := make([]string, n)
		for i := range segs {
			segs[i] = names[rng.IntN(len(names))]
		}
		return strings.Join(segs, "/")
	}
	for i := range 5000 {
		p := randPath()
		switch rng.IntN(3) {
		case 0, 1:
			m.Set(p, i)
			ref[p] = true
		case 2:
			assert.Equal(t, ref[p], m.Delete(p))
			delete(ref, p)
		}
		q := randPath()
		var want []string
		for k := range ref {
			if strings.HasPrefix(k, q+"/") {
				want = append(want, k)
			}
		}
		require.Equal(t, sorted(want), sorted(m.Under(q)), "Under(%q) after %d steps", q, i)
		require.Equal(t, len(ref), m.Len())
	}
}

func TestChildren(t *testing.T) {
	m := New[int]()
	for _, p := range []string{"a", "a/b", "a/c/d", "a/e", "f"} {
		m.Set(p, 1)
	}
	var got []string
	m.Children("a", func(name string) { got = append(got, name) })
	slices.Sort(got)
	if want := []string{"b", "e"}; !slices.Equal(got, want) {
		t.Fatalf("Children(a) = %v, want %v (c is kept only deeper)", got, want)
	}
	got = nil
	m.Children("", func(name string) { got = append(got, name) })
	slices.Sort(got)
	if want := []string{"a", "f"}; !slices.Equal(got, want) {
		t.Fatalf("Children(\"\") = %v, want %v", got, want)
	}
	m.Children("zz", func(string) { t.Fatal("a child of a path not kept") })
}
