package ledger_test

import "github.com/boxfs/boxfs/providers"

// compose returns a box with b's Box methods and exactly the optional
// interfaces has names (Files, Walker, Archiver, PathStater), taken from b.
func compose(b providers.Box, has [4]bool) providers.Box {
	f, _ := b.(providers.Files)
	w, _ := b.(providers.Walker)
	a, _ := b.(providers.Archiver)
	s, _ := b.(providers.PathStater)
	type (
		B = providers.Box
		F = providers.Files
		W = providers.Walker
		A = providers.Archiver
		S = providers.PathStater
	)
	switch has {
	case [4]bool{false, false, false, false}:
		return struct {
			B
		}{b}
	case [4]bool{true, false, false, false}:
		return struct {
			B
			F
		}{b, f}
	case [4]bool{false, true, false, false}:
		return struct {
			B
			W
		}{b, w}
	case [4]bool{true, true, false, false}:
		return struct {
			B
			F
			W
		}{b, f, w}
	case [4]bool{false, false, true, false}:
		return struct {
			B
			A
		}{b, a}
	case [4]bool{true, false, true, false}:
		return struct {
			B
			F
			A
		}{b, f, a}
	case [4]bool{false, true, true, false}:
		return struct {
			B
			W
			A
		}{b, w, a}
	case [4]bool{true, true, true, false}:
		return struct {
			B
			F
			W
			A
		}{b, f, w, a}
	case [4]bool{false, false, false, true}:
		return struct {
			B
			S
		}{b, s}
	case [4]bool{true, false, false, true}:
		return struct {
			B
			F
			S
		}{b, f, s}
	case [4]bool{false, true, false, true}:
		return struct {
			B
			W
			S
		}{b, w, s}
	case [4]bool{true, true, false, true}:
		return struct {
			B
			F
			W
			S
		}{b, f, w, s}
	case [4]bool{false, false, true, true}:
		return struct {
			B
			A
			S
		}{b, a, s}
	case [4]bool{true, false, true, true}:
		return struct {
			B
			F
			A
			S
		}{b, f, a, s}
	case [4]bool{false, true, true, true}:
		return struct {
			B
			W
			A
			S
		}{b, w, a, s}
	case [4]bool{true, true, true, true}:
		return struct {
			B
			F
			W
			A
			S
		}{b, f, w, a, s}
	}
	panic("unreachable")
}
