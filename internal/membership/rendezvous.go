package membership

import "github.com/cespare/xxhash/v2"

// rendezvous returns the member with the highest weight for key, or ""
// for no members: highest-random-weight hashing, so that adding a member
// moves to it only the keys it now wins, and removing one moves only the
// keys it held. Ties, which need a 64-bit collision, go to the smaller
// name, so every replica agrees. See docs/design.md, "Replicas and
// ownership".
func rendezvous(key string, members []string) string {
	var best string
	var bestWeight uint64
	for _, m := range members {
		w := weight(key, m)
		if best == "" || w > bestWeight || (w == bestWeight && m < best) {
			best, bestWeight = m, w
		}
	}
	return best
}

// weight hashes the pair with a separator no replica name contains, so
// that ("ab", "c") and ("a", "bc") differ.
func weight(key, member string) uint64 {
	d := xxhash.New()
	_, _ = d.WriteString(member)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(key)
	return d.Sum64()
}
