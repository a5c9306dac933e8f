package providers

import (
	"crypto/rand"
	"encoding/hex"
)

// NewID returns n random bytes as lowercase hex: the one way boxfs names
// things it makes (box ids of the local provider, command ids, temporary
// names in a box). crypto/rand never fails on Linux, so neither does NewID.
func NewID(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
