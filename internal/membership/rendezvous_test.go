package membership

import (
	"fmt"
	"testing"
)

func uids(n int) []string {
	out := make([]string, n)
	for i := range out {
		// Shaped as the apiserver's UIDs are.
		out[i] = fmt.Sprintf("%08x-1c2d-4e5f-8a9b-%012x", i*7919, i)
	}
	return out
}

func owners(keys, members []string) map[string]string {
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k] = rendezvous(k, members)
	}
	return out
}

func TestRendezvousIsDeterministicAndOrderFree(t *testing.T) {
	for _, tc := range []struct {
		name    string
		a, b    []string
		wantAll string // every key's owner, when there is only one choice
	}{
		{"no members", nil, []string{}, ""},
		{"one member", []string{"manager-0"}, []string{"manager-0"}, "manager-0"},
		{"three, reordered", []string{"a", "b", "c"}, []string{"c", "a", "b"}, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range uids(500) {
				x, y := rendezvous(k, tc.a), rendezvous(k, tc.b)
				if x != y || x != rendezvous(k, tc.a) {
					t.Fatalf("key %s: owner %q with %v, %q with %v", k, x, tc.a, y, tc.b)
				}
				if tc.wantAll != "-" && x != tc.wantAll {
					t.Fatalf("key %s: owner %q, want %q", k, x, tc.wantAll)
				}
			}
		})
	}
}

// TestRendezvousSpreadsEvenly: 3,000 servers over 3 replicas, each within
// 10% of its 1,000.
func TestRendezvousSpreadsEvenly(t *testing.T) {
	for _, members := range [][]string{
		{"mcpbridge-manager-7d9f8b6c5-abcde", "mcpbridge-manager-7d9f8b6c5-fghij", "mcpbridge-manager-7d9f8b6c5-klmno"},
		{"a", "b", "c"},
		{"replica-0", "replica-1", "replica-2"},
	} {
		t.Run(members[0], func(t *testing.T) {
			count := map[string]int{}
			for _, o := range owners(uids(3000), members) {
				count[o]++
			}
			for _, m := range members {
				if count[m] < 900 || count[m] > 1100 {
					t.Errorf("%s owns %d of 3000, want 1000 ± 100 (%v)", m, count[m], count)
				}
			}
		})
	}
}

// TestRendezvousMovesOnlyTheChangedShare: a replica added takes about a
// quarter, from every other; a replica removed gives away only its own.
func TestRendezvousMovesOnlyTheChangedShare(t *testing.T) {
	three := []string{"replica-a", "replica-b", "replica-c"}
	keys := uids(3000)
	before := owners(keys, three)
	for _, tc := range []struct {
		name               string
		after              []string
		changed            string // the replica that joined or left
		joined             bool
		minMoved, maxMoved int
	}{
		{"a fourth joins", append(three[:3:3], "replica-d"), "replica-d", true, 650, 850},
		{"one leaves", []string{"replica-a", "replica-c"}, "replica-b", false, 900, 1100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			moved := 0
			for k, now := range owners(keys, tc.after) {
				was := before[k]
				if now == was {
					continue
				}
				moved++
				if tc.joined && now != tc.changed {
					t.Fatalf("key %s moved from %s to %s, not to the replica that joined", k, was, now)
				}
				if !tc.joined && was != tc.changed {
					t.Fatalf("key %s moved from %s to %s, though its owner stayed", k, was, now)
				}
			}
			if moved < tc.minMoved || moved > tc.maxMoved {
				t.Errorf("%d of 3000 moved, want %d..%d", moved, tc.minMoved, tc.maxMoved)
			}
		})
	}
}

func TestWeightSeparatesNameFromKey(t *testing.T) {
	if weight("c", "ab") == weight("bc", "a") {
		t.Fatal("(ab, c) and (a, bc) weigh the same")
	}
}
