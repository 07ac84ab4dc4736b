package gateway

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Authorizer answers "may this bearer token use namespace ns's tools?" with
// a TokenReview and a SubjectAccessReview, and remembers answers briefly so
// that a call does not cost two apiserver round trips.
type Authorizer struct {
	Client client.Client
	// TTL of a remembered allow; denials are remembered for DenyTTL.
	TTL, DenyTTL time.Duration
	// MaxEntries bounds the memory; past it the oldest half is dropped.
	MaxEntries int

	mu    sync.Mutex
	cache map[[sha256.Size]byte]decision
}

// decision is a remembered answer: an HTTP status (200, 401 or 403).
type decision struct {
	status  int
	expires time.Time
}

// Defaults for a zero Authorizer.
const (
	defaultAllowTTL   = 30 * time.Second
	defaultDenyTTL    = 5 * time.Second
	defaultMaxEntries = 4096
)

// Check returns 200, 401 (no valid token) or 403 (no permission).
func (a *Authorizer) Check(ctx context.Context, token, ns string) (int, error) {
	// The key hashes the token: the token itself is never kept.
	key := sha256.Sum256([]byte(ns + "\x00" + token))
	if st, ok := a.cached(key); ok {
		return st, nil
	}
	st, err := a.review(ctx, token, ns)
	if err != nil {
		return http.StatusServiceUnavailable, err
	}
	a.remember(key, st)
	return st, nil
}

func (a *Authorizer) review(ctx context.Context, token, ns string) (int, error) {
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}
	if err := a.Client.Create(ctx, tr); err != nil {
		return 0, fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		return http.StatusUnauthorized, nil
	}
	u := tr.Status.User
	extra := make(map[string]authzv1.ExtraValue, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		ResourceAttributes: &authzv1.ResourceAttributes{
			Namespace: ns, Verb: "use", Group: "mcpbridge.dev", Resource: "mcpservers",
		},
	}}
	if err := a.Client.Create(ctx, sar); err != nil {
		return 0, fmt.Errorf("subject access review: %w", err)
	}
	if !sar.Status.Allowed {
		return http.StatusForbidden, nil
	}
	return http.StatusOK, nil
}

func (a *Authorizer) cached(key [sha256.Size]byte) (int, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	d, ok := a.cache[key]
	if !ok || time.Now().After(d.expires) {
		return 0, false
	}
	return d.status, true
}

func (a *Authorizer) remember(key [sha256.Size]byte, status int) {
	ttl := positiveOr(a.TTL, defaultAllowTTL)
	if status != http.StatusOK {
		ttl = positiveOr(a.DenyTTL, defaultDenyTTL)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cache == nil {
		a.cache = map[[sha256.Size]byte]decision{}
	}
	if len(a.cache) >= positiveOr(a.MaxEntries, defaultMaxEntries) {
		a.evictLocked()
	}
	a.cache[key] = decision{status: status, expires: time.Now().Add(ttl)}
}

// evictLocked drops expired answers, then the older half if still full.
func (a *Authorizer) evictLocked() {
	now := time.Now()
	var oldest []time.Time
	for k, d := range a.cache {
		if now.After(d.expires) {
			delete(a.cache, k)
		} else {
			oldest = append(oldest, d.expires)
		}
	}
	limit := positiveOr(a.MaxEntries, defaultMaxEntries)
	if len(a.cache) < limit {
		return
	}
	cut := meanTime(oldest)
	for k, d := range a.cache {
		if !d.expires.After(cut) {
			delete(a.cache, k)
		}
	}
}

// meanTime is a rough middle of the expiries: enough to halve the cache.
func meanTime(ts []time.Time) time.Time {
	var sum int64
	for _, t := range ts {
		sum += t.UnixNano() / int64(len(ts))
	}
	return time.Unix(0, sum)
}

// positiveOr is v when it is set (positive), else def.
func positiveOr[T int | int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// bearerToken extracts the token of an "Authorization: Bearer" header.
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", false
	}
	return strings.TrimSpace(token), true
}
