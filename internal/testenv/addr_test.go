package testenv

import "testing"

// FreeAddr never hands out one address twice, though the kernel may offer
// a port just closed again.
func TestFreeAddrHandsOutEachAddressOnce(t *testing.T) {
	seen := map[string]bool{}
	for range 2000 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
	}
}
