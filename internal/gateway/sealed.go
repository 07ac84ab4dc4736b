package gateway

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Sealed session ids. A 2025-11-25 session's id carries the session's
// state, encrypted and authenticated with a key every replica holds, so that
// any replica can take the session up where another left it: the id is
// base64url(keyID || nonce || AES-256-GCM(state)), the additional data binds
// the namespace. See docs/design.md, "Sessions on every replica".

// SessionKeys is the ring of AES-256 keys session ids are sealed with,
// shared by the replicas (internal/sessionkeys keeps one in a Secret).
type SessionKeys interface {
	// Current is the key new ids are sealed with; ok is false while the
	// ring has no key yet.
	Current() (id uint32, key cipher.AEAD, ok bool)
	// Key is the key with id, while ids sealed with it are honoured.
	Key(id uint32) (cipher.AEAD, bool)
}

// DefaultSessionMaxAge: a sealed id is taken up by another replica (or by
// this one after it ended the session) for this long after its session
// began, if its key is still honoured.
const DefaultSessionMaxAge = 7 * 24 * time.Hour

const (
	keyIDLen = 4
	// maxSealedState bounds the sealed JSON, so that ids stay well within
	// any proxy's header limits: a client's initialize params beyond it are
	// sealed without what the gateway never reads (see sealedParams).
	maxSealedState = 1536
	// maxSessionIDLen is the longest id that can open: longer ones are not
	// even decoded.
	maxSessionIDLen = (keyIDLen+12+maxSealedState+16)*4/3 + 4
	// clockSkew: an id issued up to this far in the future (by a replica
	// whose clock is ahead) still opens.
	clockSkew = 5 * time.Minute
	sealAAD   = "mcp-bridge session v1\x00"
)

// sealedState is what a session id carries.
type sealedState struct {
	// Identity is the SHA-256 of the caller's identity (view.identity).
	Identity  []byte `json:"i"`
	Namespace string `json:"n"`
	// Params are the client's initialize params (protocol version,
	// capabilities, client info), replayed to take the session up.
	Params   *mcp.InitializeParams `json:"p"`
	IssuedAt int64                 `json:"t"` // Unix seconds
}

// sealer mints and opens the session ids of all endpoints.
type sealer struct {
	keys   SessionKeys
	maxAge time.Duration
	now    func() time.Time
	ended  endedSessions
	tell   func(keys []string, until time.Time) // Gateway.SessionsEnded
}

// end records that this gateway ended the sessions of ids, so that it does
// not take them up again while they could be, nor, when everywhere is set
// (a DELETE), another replica once told.
func (s *sealer) end(everywhere bool, ids ...string) {
	until := s.now().Add(s.maxAge + clockSkew)
	keys := make([]string, len(ids))
	for i, id := range ids {
		k := endedKey(id)
		s.ended.addKey(k, until)
		keys[i] = hex.EncodeToString(k[:])
	}
	if everywhere && s.tell != nil && len(keys) > 0 {
		s.tell(keys, until)
	}
}

func identityHash(id string) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:]
}

// seal returns the sealed id of st, or ok false when there is no key yet
// or st does not fit.
func (s *sealer) seal(st *sealedState) (string, bool) {
	id, key, ok := s.keys.Current()
	if !ok {
		return "", false
	}
	plain, err := json.Marshal(st)
	if err != nil || len(plain) > maxSealedState {
		return "", false
	}
	out := make([]byte, keyIDLen+key.NonceSize(), keyIDLen+key.NonceSize()+len(plain)+key.Overhead())
	binary.BigEndian.PutUint32(out, id)
	if _, err := rand.Read(out[keyIDLen:]); err != nil {
		return "", false
	}
	out = key.Seal(out, out[keyIDLen:], plain, []byte(sealAAD+st.Namespace))
	return base64.RawURLEncoding.EncodeToString(out), true
}

// open returns the state sealed in sid for namespace ns, or ok false when
// sid is not one of ours (forged, of another namespace, sealed with a key
// no longer honoured) or is expired.
func (s *sealer) open(sid, ns string) (*sealedState, bool) {
	if len(sid) > maxSessionIDLen {
		return nil, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(sid)
	if err != nil || len(raw) < keyIDLen {
		return nil, false
	}
	key, ok := s.keys.Key(binary.BigEndian.Uint32(raw))
	if !ok || len(raw) < keyIDLen+key.NonceSize()+key.Overhead() {
		return nil, false
	}
	nonce, box := raw[keyIDLen:keyIDLen+key.NonceSize()], raw[keyIDLen+key.NonceSize():]
	plain, err := key.Open(nil, nonce, box, []byte(sealAAD+ns))
	if err != nil {
		return nil, false
	}
	var st sealedState
	if json.Unmarshal(plain, &st) != nil || st.Namespace != ns || st.Params == nil {
		return nil, false
	}
	issued, now := time.Unix(st.IssuedAt, 0), s.now()
	if now.Sub(issued) > s.maxAge || issued.Sub(now) > clockSkew {
		return nil, false
	}
	return &st, true
}

// sealedParams is what of a client's initialize params is sealed: all but
// _meta when that fits, else what the SDK keeps of a session's client
// (protocol version, the capabilities the spec defines, the client's name
// and version), cut.
func sealedParams(p *mcp.InitializeParams, full bool) *mcp.InitializeParams {
	out := &mcp.InitializeParams{ProtocolVersion: cut(p.ProtocolVersion), Capabilities: p.Capabilities, ClientInfo: p.ClientInfo}
	if full {
		return out
	}
	if p.Capabilities != nil {
		c := *p.Capabilities
		c.Experimental, c.Extensions = nil, nil
		out.Capabilities = &c
	}
	if p.ClientInfo != nil {
		out.ClientInfo = &mcp.Implementation{Name: cut(p.ClientInfo.Name), Version: cut(p.ClientInfo.Version)}
	}
	return out
}

// localKeys is the ring of a gateway without SessionKeys (one process,
// tests): one random key, so that ids are sealed the same way.
type localKeys struct {
	id  uint32
	key cipher.AEAD
}

func newLocalKeys() *localKeys {
	var b [keyIDLen + 32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail
	}
	block, _ := aes.NewCipher(b[keyIDLen:])
	aead, _ := cipher.NewGCM(block)
	return &localKeys{id: binary.BigEndian.Uint32(b[:]), key: aead}
}

func (k *localKeys) Current() (uint32, cipher.AEAD, bool) { return k.id, k.key, true }

func (k *localKeys) Key(id uint32) (cipher.AEAD, bool) { return k.key, id == k.id }

// endedSessions remembers the sealed ids of the sessions this gateway or
// another replica ended (DELETE, idle), by a hash, until they expire, so
// that it does not take them up again. See docs/design.md, "Sessions on
// every replica".
type endedSessions struct {
	mu  sync.Mutex
	ids map[[16]byte]time.Time // SHA-256 prefix of the id -> when it expires
}

// maxEnded bounds what endedSessions holds (about 40 bytes an entry).
const maxEnded = 1 << 18

func endedKey(sid string) [16]byte {
	h := sha256.Sum256([]byte(sid))
	return [16]byte(h[:16])
}

// parseEndedKey reads a key as sealer.end writes it.
func parseEndedKey(s string) ([16]byte, bool) {
	var k [16]byte
	if hex.DecodedLen(len(s)) != len(k) {
		return k, false
	}
	_, err := hex.Decode(k[:], []byte(s))
	return k, err == nil
}

func (e *endedSessions) addKey(k [16]byte, until time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ids == nil {
		e.ids = map[[16]byte]time.Time{}
	}
	cur, ok := e.ids[k]
	if ok && !until.After(cur) {
		return
	}
	if ok || len(e.ids) < maxEnded {
		e.ids[k] = until
	}
}

func (e *endedSessions) has(sid string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.ids[endedKey(sid)]
	return ok
}

// prune forgets the ids expired at now.
func (e *endedSessions) prune(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, until := range e.ids {
		if now.After(until) {
			delete(e.ids, k)
		}
	}
}
