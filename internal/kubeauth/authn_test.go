package kubeauth

import (
	"crypto/sha256"
	"strings"
	"testing"
)

// The cache key of a token is its SHA-256, whatever its length against the
// buffer it is hashed through.
func TestTokenKeyIsTheTokensSHA256(t *testing.T) {
	for _, n := range []int{0, 1, 511, 512, 513, 1024, 1500, 4096} {
		token := strings.Repeat("eyJhbGciOiJSUzI1NiJ9.", n/21+1)[:n]
		if got, want := tokenKey(token), sha256.Sum256([]byte(token)); got != want {
			t.Errorf("tokenKey of a %d-byte token = %x, want its SHA-256 %x", n, got, want)
		}
	}
}
