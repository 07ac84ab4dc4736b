package kubeauth

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"golang.org/x/sync/singleflight"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Attributes are what a SubjectAccessReview asks about: a resource when
// Resource is set, otherwise the non-resource Path.
type Attributes struct {
	Verb      string
	Group     string
	Resource  string
	Namespace string
	Name      string
	Path      string
}

// Authorizer asks SubjectAccessReviews for users that an Authenticator
// returned.
type Authorizer struct {
	client   client.Client
	allowTTL time.Duration
	denyTTL  time.Duration
	answers  *cache.LRUExpireCache // hash(token, attributes) -> bool
	flight   singleflight.Group
	limits   *keyedLimits // per identity
}

// NewAuthorizer asks with c, which must reach the apiserver.
func NewAuthorizer(c client.Client, o Options) *Authorizer {
	return &Authorizer{
		client:   c,
		allowTTL: cmp.Or(o.AllowTTL, DefaultAllowTTL),
		denyTTL:  cmp.Or(o.DenyTTL, DefaultDenyTTL),
		answers:  NewCache(o),
		limits: newKeyedLimits(o, cmp.Or(o.AccessReviewsPerSecond, DefaultAccessReviewsPerSecond),
			cmp.Or(o.AccessReviewBurst, DefaultAccessReviewBurst)),
	}
}

// Cached is the remembered answer for u and at, if there is one: what
// Allowed would answer without a review.
func (z *Authorizer) Cached(u *User, at Attributes) (allowed, ok bool) {
	v, ok := z.answers.Get(at.key(u))
	if !ok {
		return false, false
	}
	return v.(bool), true
}

// Allowed reports whether u may do at, ErrAccessRateLimited when u's
// identity is over its rate of reviews whose answer is not cached, or the
// error of a review the apiserver did not answer.
func (z *Authorizer) Allowed(ctx context.Context, u *User, at Attributes) (bool, error) {
	key := at.key(u)
	if ok, found := z.answers.Get(key); found {
		return ok.(bool), nil
	}
	ok, err, _ := z.flight.Do(string(key[:]), func() (any, error) {
		if ok, found := z.answers.Get(key); found {
			return ok, nil // answered while this call waited for the flight
		}
		if !z.limits.allow(u.Identity) {
			return false, ErrAccessRateLimited
		}
		ok, err := z.review(ctx, u, at)
		if err != nil {
			return false, err
		}
		ttl := z.denyTTL
		if ok {
			ttl = z.allowTTL
		}
		z.answers.Add(key, ok, ttl)
		return ok, nil
	})
	if err != nil {
		return false, err
	}
	return ok.(bool), nil
}

func (z *Authorizer) review(ctx context.Context, u *User, at Attributes) (bool, error) {
	extra := make(map[string]authzv1.ExtraValue, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	spec := authzv1.SubjectAccessReviewSpec{User: u.Name, UID: u.UID, Groups: u.Groups, Extra: extra}
	if at.Resource != "" {
		spec.ResourceAttributes = &authzv1.ResourceAttributes{
			Namespace: at.Namespace, Verb: at.Verb, Group: at.Group, Resource: at.Resource, Name: at.Name,
		}
	} else {
		spec.NonResourceAttributes = &authzv1.NonResourceAttributes{Path: at.Path, Verb: at.Verb}
	}
	sar := &authzv1.SubjectAccessReview{Spec: spec}
	if err := z.client.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("subject access review: %w", err)
	}
	return sar.Status.Allowed, nil
}

func (at Attributes) key(u *User) [sha256.Size]byte {
	return u.Key("sar", at.Verb, at.Group, at.Resource, at.Namespace, at.Name, at.Path)
}

// Key hashes the user's token hash with parts, each ended by a NUL so that
// no two lists share a key: a cache key for a decision about this caller
// that does not keep the token.
func (u *User) Key(parts ...string) [sha256.Size]byte {
	h := sha256.New()
	h.Write(u.token[:])
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return key
}
