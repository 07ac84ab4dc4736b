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
}

// NewAccess decides with authn (which holds the audiences), authz and the
// server list; o gives the lifetime and bound of its own cache as for authz.
func NewAccess(authn *kubeauth.Authenticator, authz *kubeauth.Authorizer, servers ServerNames, o kubeauth.Options) *Access {
	ttl := o.DenyTTL
	if ttl <= 0 {
		ttl = kubeauth.DefaultDenyTTL
	}
	size := o.MaxEntries
	if size <= 0 {
		size = kubeauth.DefaultMaxEntries
	}
	return &Access{authn: authn, authz: authz, servers: servers, some: cache.NewLRUExpireCache(size), someTTL: ttl}
}

// grant is what one caller may use in one namespace, as of one request.
type grant struct {
	user *kubeauth.User // nil without authentication
	all  bool           // every server of the namespace
}

// errForbidden: the caller may use no McpServer of the namespace.
var errForbidden = errors.New("forbidden")

// grant authenticates token and returns what it may use in ns, or an
// error: kubeauth's, errForbidden, or the apiserver's.
func (a *Access) grant(ctx context.Context, token, ns string) (grant, error) {
	u, err := a.authn.Authenticate(ctx, token)
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
	names, err := a.servers(ctx, ns)
	if err != nil {
		return false, err
	}
	some := false
	for _, name := range names {
		if some, err = a.authz.Allowed(ctx, u, use(ns, name)); err != nil {
			return false, err
		}
		if some {
			break
		}
	}
	a.some.Add(key, some, a.someTTL)
	return some, nil
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

// authStatus is the HTTP status of an error of grant.
func authStatus(err error) int {
	switch {
	case errors.Is(err, kubeauth.ErrInvalidToken):
		return http.StatusUnauthorized
	case errors.Is(err, kubeauth.ErrRateLimited):
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
