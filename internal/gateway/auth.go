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
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Authorizer answers "may this bearer token use namespace ns's tools?" with
// a TokenReview and a SubjectAccessReview, and remembers answers briefly so
// that a call does not cost two apiserver round trips. The zero value with
// a Client works.
type Authorizer struct {
	Client client.Client
	// TTL of a remembered allow; denials are remembered for DenyTTL.
	TTL, DenyTTL time.Duration
	// MaxEntries bounds the memory; past it the least recently used answer
	// is dropped.
	MaxEntries int
	// Clock times the remembered answers; nil is the real clock.
	Clock clock.PassiveClock

	once    sync.Once
	answers *cache.LRUExpireCache // sha256(ns, token) -> HTTP status (200, 401 or 403)
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

// cache is the bounded store of remembered answers, built on first use so
// that a literal Authorizer works.
func (a *Authorizer) cache() *cache.LRUExpireCache {
	a.once.Do(func() {
		var clk clock.PassiveClock = clock.RealClock{}
		if a.Clock != nil {
			clk = a.Clock
		}
		a.answers = cache.NewLRUExpireCacheWithClock(positiveOr(a.MaxEntries, defaultMaxEntries), clk)
	})
	return a.answers
}

func (a *Authorizer) cached(key [sha256.Size]byte) (int, bool) {
	st, ok := a.cache().Get(key)
	if !ok {
		return 0, false
	}
	return st.(int), true
}

func (a *Authorizer) remember(key [sha256.Size]byte, status int) {
	ttl := positiveOr(a.TTL, defaultAllowTTL)
	if status != http.StatusOK {
		ttl = positiveOr(a.DenyTTL, defaultDenyTTL)
	}
	a.cache().Add(key, status, ttl)
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
