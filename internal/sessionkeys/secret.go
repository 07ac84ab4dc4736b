package sessionkeys

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// dataKey is the Secret's one data item: the ring as JSON.
const dataKey = "keys.json"

// key is one key of the ring as the Secret holds it.
type key struct {
	ID uint32 `json:"id"`
	// Secret is the AES-256 key (base64 in JSON).
	Secret []byte `json:"secret"`
	// NotBefore: the key is current from then until the next key's
	// NotBefore; it is honoured from the moment the ring holds it.
	NotBefore time.Time `json:"notBefore"`
}

// newKey makes a key current from notBefore, with an id none of ring has.
func newKey(ring []key, notBefore time.Time) (key, error) {
	k := key{Secret: make([]byte, 32), NotBefore: notBefore.UTC().Truncate(time.Second)}
	var id [4]byte
	for {
		if _, err := rand.Read(id[:]); err != nil {
			return key{}, err
		}
		if _, err := rand.Read(k.Secret); err != nil {
			return key{}, err
		}
		k.ID = binary.BigEndian.Uint32(id[:])
		if !slices.ContainsFunc(ring, func(o key) bool { return o.ID == k.ID }) {
			return k, nil
		}
	}
}

// decode reads a ring from the Secret's data: its keys by NotBefore.
func decode(data map[string][]byte) ([]key, error) {
	raw, ok := data[dataKey]
	if !ok {
		return nil, fmt.Errorf("no %s", dataKey)
	}
	var ring []key
	if err := json.Unmarshal(raw, &ring); err != nil {
		return nil, fmt.Errorf("%s is not a key ring", dataKey) // never the bytes: they are keys
	}
	if len(ring) == 0 {
		return nil, errors.New("the ring has no key")
	}
	for _, k := range ring {
		if len(k.Secret) != 32 {
			return nil, fmt.Errorf("key %d is not an AES-256 key", k.ID)
		}
	}
	slices.SortFunc(ring, func(a, b key) int { return a.NotBefore.Compare(b.NotBefore) })
	return ring, nil
}

func encode(ring []key) (map[string][]byte, error) {
	raw, err := json.Marshal(ring)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{dataKey: raw}, nil
}
