package kubeauth

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Errors of Authenticate; any other error means that the apiserver did not
// answer (503).
var (
	// ErrInvalidToken: the apiserver does not accept the token, or not for
	// any of the audiences asked for (401).
	ErrInvalidToken = errors.New("the bearer token is not valid here")
	// ErrRateLimited: the token is not in the cache and the TokenReviews of
	// new tokens are over their rate (429): all of them, or those from the
	// caller's address (ErrSourceRateLimited, which is also ErrRateLimited).
	ErrRateLimited = errors.New("too many new bearer tokens; try again shortly")
	// ErrSourceRateLimited: the TokenReviews of new tokens from the
	// caller's address are over their rate (429).
	ErrSourceRateLimited error = &rateLimitError{"too many new bearer tokens from this address; try again shortly"}
	// ErrAccessRateLimited: the SubjectAccessReviews of the caller's
	// identity are over their rate (429).
	ErrAccessRateLimited = errors.New("too many access reviews for this identity (its SubjectAccessReview rate limit); try again shortly")
)

// rateLimitError is a more precise ErrRateLimited.
type rateLimitError struct{ msg string }

func (e *rateLimitError) Error() string        { return e.msg }
func (e *rateLimitError) Is(target error) bool { return target == ErrRateLimited }

// Defaults of Options.
const (
	DefaultAllowTTL   = 30 * time.Second
	DefaultDenyTTL    = 5 * time.Second
	DefaultMaxEntries = 4096
	// DefaultReviewsPerSecond and DefaultReviewBurst bound the TokenReviews
	// of tokens not in the cache: enough for many agents starting at once,
	// little for an apiserver.
	DefaultReviewsPerSecond = 20
	DefaultReviewBurst      = 50
	// DefaultReviewsPerSourcePerSecond and DefaultReviewSourceBurst bound
	// them per source address: one address gets a quarter of the global
	// rate, so that a flood from it leaves the rest to everyone else.
	DefaultReviewsPerSourcePerSecond = 5
	DefaultReviewSourceBurst         = 10
	// DefaultAccessReviewsPerSecond and DefaultAccessReviewBurst bound the
	// SubjectAccessReviews of one identity (user and groups) whose answer
	// is not cached: an agent's first request in a namespace of many
	// McpServers fits in the burst; a loop over namespaces and servers
	// does not.
	DefaultAccessReviewsPerSecond = 10
	DefaultAccessReviewBurst      = 100
	// validTTL is how long a token that was valid is exempt from the rate
	// limit: a ServiceAccount token's usual lifetime.
	validTTL = time.Hour
)

// Options tune an Authenticator or an Authorizer; zero values take the
// defaults.
type Options struct {
	// Audiences the TokenReview asks for (Authenticator only); the answer
	// must name one of them. Empty asks for the apiserver's own audiences.
	Audiences []string
	// AllowTTL and DenyTTL: how long an answer that lets the caller in, and
	// one that does not, is remembered.
	AllowTTL, DenyTTL time.Duration
	// MaxEntries bounds the cache; past it the least recently used answer
	// is dropped.
	MaxEntries int
	// ReviewsPerSecond and ReviewBurst limit the TokenReviews of tokens not
	// in the cache (Authenticator only).
	ReviewsPerSecond float64
	ReviewBurst      int
	// ReviewsPerSourcePerSecond and ReviewSourceBurst limit them per
	// source address as well (AuthenticateFrom).
	ReviewsPerSourcePerSecond float64
	ReviewSourceBurst         int
	// AccessReviewsPerSecond and AccessReviewBurst limit the
	// SubjectAccessReviews of one identity (Authorizer only).
	AccessReviewsPerSecond float64
	AccessReviewBurst      int
	// Clock times the cache; nil is the real clock.
	Clock clock.PassiveClock
}

// User is whom a TokenReview says a token belongs to.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string]authnv1.ExtraValue
	// Identity is the name and the sorted groups, which is what RBAC
	// decides on: two tokens of one ServiceAccount have the same.
	Identity string
	// token is the SHA-256 of the token, which keys every decision about
	// this caller.
	token [sha256.Size]byte
}

// Authenticator reviews bearer tokens with TokenReviews.
type Authenticator struct {
	client    client.Client
	audiences []string
	allowTTL  time.Duration
	denyTTL   time.Duration
	answers   *cache.LRUExpireCache // token hash -> *User (nil: invalid)
	// valid remembers, for much longer than an answer, which tokens were
	// valid: their reviews when the answer expires are not limited, so that
	// agents keep working through a flood of random tokens that lasts longer
	// than AllowTTL. They are reviewed all the same, so a revoked token stops
	// working as before.
	valid   *cache.LRUExpireCache // token hash -> struct{}
	limit   *rate.Limiter
	sources *keyedLimits
	flight  singleflight.Group
	clock   clock.PassiveClock
}

// NewAuthenticator reviews tokens with c, which must reach the apiserver
// (a TokenReview is never cached by controller-runtime).
func NewAuthenticator(c client.Client, o Options) *Authenticator {
	return &Authenticator{
		client:    c,
		audiences: slices.Clone(o.Audiences),
		allowTTL:  cmp.Or(o.AllowTTL, DefaultAllowTTL),
		denyTTL:   cmp.Or(o.DenyTTL, DefaultDenyTTL),
		answers:   NewCache(o),
		valid:     NewCache(o),
		limit:     rate.NewLimiter(rate.Limit(cmp.Or(o.ReviewsPerSecond, DefaultReviewsPerSecond)), cmp.Or(o.ReviewBurst, DefaultReviewBurst)),
		sources: newKeyedLimits(o, cmp.Or(o.ReviewsPerSourcePerSecond, DefaultReviewsPerSourcePerSecond),
			cmp.Or(o.ReviewSourceBurst, DefaultReviewSourceBurst)),
		clock: clockOf(o),
	}
}

// Authenticate returns the token's user, ErrInvalidToken, ErrRateLimited,
// or the error of a TokenReview the apiserver did not answer.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (*User, error) {
	return a.AuthenticateFrom(ctx, token, "")
}

// AuthenticateFrom is Authenticate for a caller at source (its IP
// address), whose new tokens are also limited per address
// (ErrSourceRateLimited). With audiences, a token not in the cache that no
// TokenReview for them could accept is ErrInvalidToken at once, before
// either limit. See docs/design.md, "Authentication and authorization".
func (a *Authenticator) AuthenticateFrom(ctx context.Context, token, source string) (*User, error) {
	key := tokenKey(token)
	if u, ok := a.answers.Get(key); ok {
		return known(u.(*User))
	}
	if len(a.audiences) > 0 && !mayPassReview(token, a.audiences, a.clock.Now()) {
		return nil, ErrInvalidToken
	}
	u, err, _ := a.flight.Do(string(key[:]), func() (any, error) {
		if u, ok := a.answers.Get(key); ok {
			return u, nil // answered while this call waited for the flight
		}
		if err := a.admit(key, source); err != nil {
			return nil, err
		}
		u, err := a.review(ctx, token)
		if err != nil {
			return nil, err
		}
		if u == nil {
			a.answers.Add(key, u, a.denyTTL)
		} else {
			u.token = key
			a.answers.Add(key, u, a.allowTTL)
			a.valid.Add(key, struct{}{}, validTTL)
		}
		return u, nil
	})
	if err != nil {
		return nil, err
	}
	return known(u.(*User))
}

// tokenKey is the SHA-256 of token, the key of its cached answer. The
// token is hashed through a buffer on the stack: converting it to bytes
// allocated and cleared a copy of it (a ServiceAccount token is about
// 1 kB) on every request.
func tokenKey(token string) [sha256.Size]byte {
	h := sha256.New()
	var buf [512]byte
	for len(token) > 0 {
		n := copy(buf[:], token)
		h.Write(buf[:n])
		token = token[n:]
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return key
}

// admit lets the review of a new token through both limits; a token that
// was valid lately is exempt from them.
func (a *Authenticator) admit(key [sha256.Size]byte, source string) error {
	if _, seen := a.valid.Get(key); seen {
		return nil
	}
	if !a.sources.allow(source) {
		return ErrSourceRateLimited
	}
	if !a.limit.Allow() {
		return ErrRateLimited
	}
	return nil
}

func known(u *User) (*User, error) {
	if u == nil {
		return nil, ErrInvalidToken
	}
	return u, nil
}

// review asks the apiserver; a nil User means the token is not valid for
// the audiences.
func (a *Authenticator) review(ctx context.Context, token string) (*User, error) {
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: a.audiences}}
	if err := a.client.Create(ctx, tr); err != nil {
		return nil, fmt.Errorf("token review: %w", err)
	}
	st := tr.Status
	if !st.Authenticated || !a.audienceMatches(st.Audiences) {
		return nil, nil
	}
	groups := slices.Clone(st.User.Groups)
	slices.Sort(groups)
	return &User{Name: st.User.Username, UID: st.User.UID, Groups: st.User.Groups, Extra: st.User.Extra,
		Identity: st.User.Username + "\x00" + strings.Join(groups, "\x00")}, nil
}

// audienceMatches: the apiserver answers with the audiences of the request
// that the token is valid for; without audiences asked, its own.
func (a *Authenticator) audienceMatches(got []string) bool {
	if len(a.audiences) == 0 {
		return true
	}
	for _, aud := range got {
		if slices.Contains(a.audiences, aud) {
			return true
		}
	}
	return false
}

// NewCache is a cache of decisions bounded and timed as o says (MaxEntries,
// Clock), as the Authenticator's and Authorizer's are.
func NewCache(o Options) *cache.LRUExpireCache {
	return cache.NewLRUExpireCacheWithClock(cmp.Or(o.MaxEntries, DefaultMaxEntries), clockOf(o))
}

func clockOf(o Options) clock.PassiveClock {
	if o.Clock != nil {
		return o.Clock
	}
	return clock.RealClock{}
}
