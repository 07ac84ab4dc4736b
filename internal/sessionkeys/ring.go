package sessionkeys

import (
	"cmp"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Defaults of a Ring's periods (docs/design.md, "Sessions on every
// replica").
const (
	DefaultSecretName  = "mcpbridge-session-keys"
	DefaultRotateEvery = 24 * time.Hour
	DefaultHonourFor   = 7 * 24 * time.Hour
	DefaultRefresh     = time.Minute
)

// skew is how far apart the replicas' clocks may be: a new key becomes
// current only after every replica has had two reads to learn it, and that
// much more.
const skew = time.Minute

// Ring is the key ring in a Secret, for the gateway's SessionKeys. Start
// loads it and keeps it current; until the first load it has no key.
type Ring struct {
	client client.Client
	reader client.Reader
	key    client.ObjectKey
	// RotateEvery: a new key is current this long after the last one;
	// HonourFor: a key is honoured this long after its successor became
	// current; Refresh: how often the Secret is read again. Zero means the
	// default.
	RotateEvery, HonourFor, Refresh time.Duration
	// Labels go on the Secret the Ring creates.
	Labels map[string]string

	now func() time.Time // a test's clock

	mu     sync.RWMutex
	keys   []key // by NotBefore
	aeads  map[uint32]cipher.AEAD
	loaded bool
}

// New returns a Ring kept in the Secret namespace/name (DefaultSecretName is
// the operator's), read and written with c. Zero periods are the defaults.
// Pass a client that reads from the apiserver, or set WithReader: the
// manager caches no Secret of its own namespace.
func New(c client.Client, namespace, name string, rotateEvery, honourFor time.Duration) *Ring {
	return &Ring{client: c, reader: c, key: client.ObjectKey{Namespace: namespace, Name: name},
		RotateEvery: rotateEvery, HonourFor: honourFor,
		Labels: map[string]string{"app.kubernetes.io/name": "mcpbridge", "app.kubernetes.io/component": "session-keys"},
		now:    time.Now}
}

// WithReader reads the Secret with rd (e.g. the manager's APIReader).
func (r *Ring) WithReader(rd client.Reader) *Ring {
	r.reader = rd
	return r
}

func (r *Ring) rotateEvery() time.Duration { return cmp.Or(r.RotateEvery, DefaultRotateEvery) }
func (r *Ring) honourFor() time.Duration   { return cmp.Or(r.HonourFor, DefaultHonourFor) }
func (r *Ring) refresh() time.Duration     { return cmp.Or(r.Refresh, DefaultRefresh) }

// activation: how long after it is written a new key becomes current.
func (r *Ring) activation() time.Duration { return 2*r.refresh() + skew }

// NeedLeaderElection is false: every replica's gateway seals and opens.
func (r *Ring) NeedLeaderElection() bool { return false }

// Start loads the ring, then reads it again every Refresh (rotating,
// retiring and recreating as due) until ctx ends.
func (r *Ring) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("sessionkeys").WithValues("secret", r.key.String())
	for {
		wait := r.refresh()
		if err := r.sync(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "session keys not read or written; retrying")
			if r.Check(nil) != nil {
				wait = min(wait, startRetry) // the replica is not ready until it has keys
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// startRetry: how soon a ring that has no keys yet tries again.
const startRetry = 5 * time.Second

// Check is a readiness check: the ring has been loaded.
func (r *Ring) Check(*http.Request) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if !r.loaded {
		return errors.New("the session keys are not loaded yet")
	}
	return nil
}

// Current is the key new ids are sealed with: the latest whose NotBefore
// has come (the first one on a replica whose clock is behind).
func (r *Ring) Current() (uint32, cipher.AEAD, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.keys) == 0 {
		return 0, nil, false
	}
	now, cur := r.now(), r.keys[0]
	for _, k := range r.keys[1:] {
		if !k.NotBefore.After(now) {
			cur = k
		}
	}
	return cur.ID, r.aeads[cur.ID], true
}

// Key is the key with id while it is honoured: held, and not retired.
func (r *Ring) Key(id uint32) (cipher.AEAD, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	now := r.now()
	for i, k := range r.keys {
		if k.ID == id {
			if r.retired(i, now) {
				return nil, false
			}
			return r.aeads[id], true
		}
	}
	return nil, false
}

// retired: keys[i] has a successor current for longer than HonourFor.
func (r *Ring) retired(i int, now time.Time) bool {
	return i+1 < len(r.keys) && now.Sub(r.keys[i+1].NotBefore) > r.honourFor()
}

// sync reads the Secret (creating it when absent), writes it back rotated
// and without retired keys when due, and holds what it holds then. A
// write that loses to another replica's reads again.
func (r *Ring) sync(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		s, err := r.load(ctx)
		if err != nil {
			return err
		}
		ring, err := decode(s.Data)
		if err != nil {
			return fmt.Errorf("the Secret %s: %w", r.key, err) // left as it is: someone must look
		}
		next, changed, err := r.maintain(ring, r.now())
		if err != nil {
			return err
		}
		if changed {
			if s.Data, err = encode(next); err != nil {
				return err
			}
			err = r.client.Update(ctx, s)
			if apierrors.IsConflict(err) && attempt < 3 {
				continue
			}
			if err != nil {
				// The keys read are still good to seal and open with.
				return errors.Join(fmt.Errorf("update the Secret %s: %w", r.key, err), r.hold(ring))
			}
			log.FromContext(ctx).WithName("sessionkeys").Info("session key ring changed",
				"secret", r.key.String(), "keys", len(next), "newest", next[len(next)-1].ID)
		}
		return r.hold(next)
	}
}

// load reads the Secret, creating a ring of one key current now when there
// is none; a create that loses the race reads the winner's.
func (r *Ring) load(ctx context.Context) (*corev1.Secret, error) {
	var s corev1.Secret
	err := r.reader.Get(ctx, r.key, &s)
	if err == nil {
		return &s, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("read the Secret %s: %w", r.key, err)
	}
	k, err := newKey(nil, r.now())
	if err != nil {
		return nil, err
	}
	data, err := encode([]key{k})
	if err != nil {
		return nil, err
	}
	created := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.key.Namespace, Name: r.key.Name, Labels: r.Labels},
		Type: corev1.SecretTypeOpaque, Data: data}
	err = r.client.Create(ctx, created)
	switch {
	case err == nil:
		log.FromContext(ctx).WithName("sessionkeys").Info("session key ring created", "secret", r.key.String())
		return created, nil
	case apierrors.IsAlreadyExists(err):
		if err := r.reader.Get(ctx, r.key, &s); err != nil {
			return nil, fmt.Errorf("read the Secret %s: %w", r.key, err)
		}
		return &s, nil
	default:
		return nil, fmt.Errorf("create the Secret %s: %w", r.key, err)
	}
}

// maintain is ring at now: without its retired keys, and with a new key
// when the newest has been current for RotateEvery less the activation
// (the new one is current from then on).
func (r *Ring) maintain(ring []key, now time.Time) ([]key, bool, error) {
	var next []key
	for i, k := range ring {
		if i+1 < len(ring) && now.Sub(ring[i+1].NotBefore) > r.honourFor() {
			continue
		}
		next = append(next, k)
	}
	changed := len(next) != len(ring)
	newest := next[len(next)-1]
	if now.Add(r.activation()).Sub(newest.NotBefore) >= r.rotateEvery() {
		k, err := newKey(next, now.Add(r.activation()))
		if err != nil {
			return nil, false, err
		}
		next, changed = append(next, k), true
	}
	return next, changed, nil
}

// hold makes ring the keys this replica seals and opens with: keys it no
// longer holds (retired, or gone with a deleted Secret) open nothing.
func (r *Ring) hold(ring []key) error {
	aeads := make(map[uint32]cipher.AEAD, len(ring))
	for _, k := range ring {
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return fmt.Errorf("key %d: %w", k.ID, err)
		}
		if aeads[k.ID], err = cipher.NewGCM(block); err != nil {
			return fmt.Errorf("key %d: %w", k.ID, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys, r.aeads, r.loaded = ring, aeads, true
	return nil
}
