// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=mcpbridge.dev,resources=mcpservers,verbs=get;list;watch

package gateway

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/kubeauth"
)

// ServerNames lists the names of a namespace's McpServers, whatever their
// state: a caller allowed one of them by name may connect before it
// publishes tools, and learn about them through list_changed.
type ServerNames func(ctx context.Context, ns string) ([]string, error)

// CachedServerNames lists McpServers from r, the manager's informer cache.
// Namespaces outside watched (when it is not empty) have none: the cache
// does not hold them, and the manager serves no tools there.
func CachedServerNames(r client.Reader, watched []string) ServerNames {
	return func(ctx context.Context, ns string) ([]string, error) {
		if len(watched) > 0 && !slices.Contains(watched, ns) {
			return nil, nil
		}
		var list v1alpha1.McpServerList
		if err := r.List(ctx, &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		names := make([]string, len(list.Items))
		for i := range list.Items {
			names[i] = list.Items[i].Name
		}
		return names, nil
	}
}

// Access decides what the holder of a bearer token may use in a namespace:
// every McpServer there (verb "use" on mcpservers.mcpbridge.dev in the
// namespace), or some of them by name (RBAC resourceNames). The
// namespace-wide review is asked first, per-server ones only when it is
// denied. See docs/design.md, "Shared-cluster rules".
type Access struct {
	authn   *kubeauth.Authenticator
	authz   *kubeauth.Authorizer
	servers ServerNames
	// some remembers, per token and namespace, whether a caller denied
	// namespace-wide may use at least one server by name. It stands on a
	// namespace-wide denial, so it lives as long as a denial.
	some    *cache.LRUExpireCache
	someTTL time.Duration
	// maxServerReviews bounds the per-server reviews one request may ask
	// for (answers already cached are free): a caller denied namespace-wide
	// in a namespace of many McpServers gets errReviewBound, and its next
	// request goes on where the denials end.
	maxServerReviews int
	// walked remembers, per token and namespace, the name before which
	// every McpServer was denied lately, so that a request goes on from
	// there at a cost of its own reviews, not of the namespace's size; it
	// lives as long as the denials it stands on. found remembers the
	// server the caller was last found to be allowed by name, which is
	// tried first when the "some server" answer has expired.
	walked, found *cache.LRUExpireCache
	// names lists each namespace's McpServers sorted, for at most namesTTL.
	names *cache.LRUExpireCache
}

// DefaultMaxServerReviewsPerRequest is Access's bound of per-server
// SubjectAccessReviews in one request. See docs/design.md, "Limits".
const DefaultMaxServerReviewsPerRequest = 32

// errReviewBound: this request asked for as many per-server reviews as one
// may; the caller is told to try again (429).
var errReviewBound = errors.New("too many McpServers to review in one request (the per-request bound of access reviews); try again shortly")

// NewAccess decides with authn (which holds the audiences), authz and the
// server list; o gives the lifetime and bound of its own cache as for authz.
func NewAccess(authn *kubeauth.Authenticator, authz *kubeauth.Authorizer, servers ServerNames, o kubeauth.Options) *Access {
	ttl := o.DenyTTL
	if ttl <= 0 {
		ttl = kubeauth.DefaultDenyTTL
	}
	return &Access{authn: authn, authz: authz, servers: servers, some: kubeauth.NewCache(o), someTTL: ttl,
		maxServerReviews: DefaultMaxServerReviewsPerRequest, walked: kubeauth.NewCache(o), found: kubeauth.NewCache(o),
		names: kubeauth.NewCache(o)}
}

// namesTTL is how long Access reuses a namespace's list of McpServers:
// listing a namespace of thousands from the informer cache copies every
// object, which a caller's every request must not cost.
const namesTTL = time.Second

// foundTTL is how long Access remembers the server a caller was last
// allowed by name; a stale one costs one review.
const foundTTL = 10 * time.Minute

// WithMaxServerReviewsPerRequest sets the bound of per-server reviews in
// one request (--gateway-max-access-reviews-per-request); 0 keeps
// DefaultMaxServerReviewsPerRequest.
func (a *Access) WithMaxServerReviewsPerRequest(n int) *Access {
	if n > 0 {
		a.maxServerReviews = n
	}
	return a
}

// grant is what one caller may use in one namespace, as of one request.
type grant struct {
	user *kubeauth.User // nil without authentication
	all  bool           // every server of the namespace
}

// errForbidden: the caller may use no McpServer of the namespace.
var errForbidden = errors.New("forbidden")

// grant authenticates token, sent from source (an IP address), and
// returns what it may use in ns, or an error: kubeauth's, errForbidden,
// errReviewBound, or the apiserver's.
func (a *Access) grant(ctx context.Context, token, source, ns string) (grant, error) {
	u, err := a.authn.AuthenticateFrom(ctx, token, source)
	if err != nil {
		return grant{}, err
	}
	all, err := a.authz.Allowed(ctx, u, use(ns, ""))
	if err != nil || all {
		return grant{user: u, all: all}, err
	}
	some, err := a.someServer(ctx, u, ns)
	if err != nil {
		return grant{}, err
	}
	if !some {
		return grant{}, errForbidden
	}
	return grant{user: u}, nil
}

// someServer: u may use at least one of ns's McpServers by name. It stops
// at the first allowed one.
func (a *Access) someServer(ctx context.Context, u *kubeauth.User, ns string) (bool, error) {
	key := u.Key("some", ns)
	if some, ok := a.some.Get(key); ok {
		return some.(bool), nil
	}
	names, err := a.sortedNames(ctx, ns)
	if err != nil {
		return false, err
	}
	some, err := a.anyAllowed(ctx, u, ns, names, key)
	if err != nil {
		return false, err
	}
	a.some.Add(key, some, a.someTTL)
	return some, nil
}

// anyAllowed: u may use one of names (sorted), asking at most
// maxServerReviews reviews. It tries the server u was last allowed first,
// then walks the names from where its last walk in ns stopped (key is u's
// in ns), taking cached answers at no cost. A walk that stops at the bound
// or at an error remembers where, for the next request.
func (a *Access) anyAllowed(ctx context.Context, u *kubeauth.User, ns string, names []string, key [32]byte) (bool, error) {
	reviews := 0
	if v, ok := a.found.Get(key); ok {
		if _, present := slices.BinarySearch(names, v.(string)); present {
			if allowed, err := a.decide(ctx, u, ns, v.(string), &reviews); err != nil || allowed {
				return allowed, err
			}
		}
	}
	from := 0
	if v, ok := a.walked.Get(key); ok {
		from, _ = slices.BinarySearch(names, v.(string))
	}
	for _, name := range names[from:] {
		allowed, err := a.decide(ctx, u, ns, name, &reviews)
		if err != nil {
			a.walked.Add(key, name, a.someTTL)
			return false, err
		}
		if allowed {
			a.found.Add(key, name, foundTTL)
			a.walked.Remove(key)
			return true, nil
		}
	}
	a.walked.Remove(key)
	return false, nil
}

// decide is whether u may use ns/name: the cached answer, or a review
// while *reviews, which it counts, is under the per-request bound, and
// errReviewBound past it.
func (a *Access) decide(ctx context.Context, u *kubeauth.User, ns, name string, reviews *int) (bool, error) {
	if allowed, known := a.authz.Cached(u, use(ns, name)); known {
		return allowed, nil
	}
	if *reviews == a.maxServerReviews {
		return false, errReviewBound
	}
	*reviews++
	return a.authz.Allowed(ctx, u, use(ns, name))
}

// sortedNames is ns's McpServers, sorted, as listed at most namesTTL ago.
func (a *Access) sortedNames(ctx context.Context, ns string) ([]string, error) {
	if v, ok := a.names.Get(ns); ok {
		return v.([]string), nil
	}
	names, err := a.servers(ctx, ns)
	if err != nil {
		return nil, err
	}
	names = slices.Clone(names)
	slices.Sort(names)
	a.names.Add(ns, names, namesTTL)
	return names, nil
}

// namespaceLabel is ns for a refusal by limit in ns, or "" before the
// caller is known (TokenReviews) and for a namespace without McpServers.
func (a *Access) namespaceLabel(ctx context.Context, ns, limit string) string {
	if limit == LimitTokenReviews || limit == LimitTokenReviewsPerSource {
		return ""
	}
	if names, err := a.sortedNames(ctx, ns); err != nil || len(names) == 0 {
		return ""
	}
	return ns
}

// mayUse: g may use the McpServer server of ns.
func (a *Access) mayUse(ctx context.Context, g grant, ns, server string) (bool, error) {
	if a == nil || g.all {
		return true, nil
	}
	if g.user == nil {
		return false, nil
	}
	return a.authz.Allowed(ctx, g.user, use(ns, server))
}

// current is u's grant in ns as of now, for work that no request of u
// carries (a refresh, the SDK's path): namespace-wide or by name.
func (a *Access) current(ctx context.Context, u *kubeauth.User, ns string) (grant, error) {
	switch {
	case a == nil:
		return grant{all: true}, nil // without authentication
	case u == nil:
		return grant{}, nil
	}
	all, err := a.authz.Allowed(ctx, u, use(ns, ""))
	return grant{user: u, all: all}, err
}

// use is verb "use" on the McpServers of ns, or on the one named.
func use(ns, name string) kubeauth.Attributes {
	return kubeauth.Attributes{Verb: "use", Group: v1alpha1.GroupVersion.Group, Resource: "mcpservers", Namespace: ns, Name: name}
}

// identity names whom a view serves: the user and groups a review
// returned (kubeauth's Identity). Two tokens of one ServiceAccount share a
// view and may share its sessions.
func identity(u *kubeauth.User) string {
	if u == nil {
		return ""
	}
	return u.Identity
}

// limitOf names the limit an error of grant is a refusal by, for
// mcpbridge_gateway_refusals_total, or "".
func limitOf(err error) string {
	switch {
	case errors.Is(err, kubeauth.ErrSourceRateLimited):
		return LimitTokenReviewsPerSource
	case errors.Is(err, kubeauth.ErrRateLimited):
		return LimitTokenReviews
	case errors.Is(err, kubeauth.ErrAccessRateLimited):
		return LimitAccessReviewsPerIdentity
	case errors.Is(err, errReviewBound):
		return LimitAccessReviewsPerRequest
	}
	return ""
}

// authStatus is the HTTP status of an error of grant.
func authStatus(err error) int {
	switch {
	case errors.Is(err, kubeauth.ErrInvalidToken):
		return http.StatusUnauthorized
	case errors.Is(err, kubeauth.ErrRateLimited), errors.Is(err, kubeauth.ErrAccessRateLimited), errors.Is(err, errReviewBound):
		return http.StatusTooManyRequests
	case errors.Is(err, errForbidden):
		return http.StatusForbidden
	}
	return http.StatusServiceUnavailable
}

// grantKey carries a request's grant from the HTTP layer to the fast path.
type grantKey struct{}

func withGrant(ctx context.Context, g grant) context.Context {
	return context.WithValue(ctx, grantKey{}, g)
}

func grantFrom(ctx context.Context) grant {
	g, _ := ctx.Value(grantKey{}).(grant)
	return g // the zero grant may use nothing
}
