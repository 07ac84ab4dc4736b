package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/internal/kubeauth"
)

// countingReviewer authenticates every agentToken and allows each agent
// only the McpServer named after it; it counts SubjectAccessReviews.
type countingReviewer struct {
	client.Client
	reviews atomic.Int64
	denyAll atomic.Bool // from now on, allow no one anything
}

func (c *countingReviewer) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	switch o := obj.(type) {
	case *authnv1.TokenReview:
		o.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: o.Spec.Audiences,
			User: authnv1.UserInfo{Username: agentOf(o.Spec.Token)}}
	case *authzv1.SubjectAccessReview:
		c.reviews.Add(1)
		o.Status.Allowed = o.Spec.ResourceAttributes.Name == o.Spec.User && !c.denyAll.Load()
	}
	return nil
}

// A caller denied namespace-wide asks at most the per-request bound of
// per-server reviews in one request (the default, or the one set); the
// next request goes on where the cached denials end, until it finds its
// server or none.
func TestServerReviewsAreBoundedPerRequest(t *testing.T) {
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("srv%03d", i)
	}
	servers := func(context.Context, string) ([]string, error) { return names, nil }
	ctx := context.Background()

	for _, tc := range []struct {
		agent string
		bound int     // 0: the default
		want  []error // of each request in turn
	}{
		{"srv070", 0, []error{errReviewBound, errReviewBound, nil}},
		{"nobody", 0, []error{errReviewBound, errReviewBound, errReviewBound, errForbidden}},
		{"srv070", 50, []error{errReviewBound, nil}},
		{"nobody", 50, []error{errReviewBound, errForbidden}},
		{"nobody", 10, []error{errReviewBound, errReviewBound, errReviewBound, errReviewBound, errReviewBound,
			errReviewBound, errReviewBound, errReviewBound, errReviewBound, errForbidden}},
	} {
		t.Run(fmt.Sprintf("%s bound %d", tc.agent, tc.bound), func(t *testing.T) {
			api := &countingReviewer{}
			o := kubeauth.Options{Audiences: []string{"mcpbridge.dev"}, AccessReviewBurst: 1000}
			a := NewAccess(kubeauth.NewAuthenticator(api, o), kubeauth.NewAuthorizer(api, o), servers, o).
				WithMaxServerReviewsPerRequest(tc.bound)
			bound := cmp.Or(tc.bound, DefaultMaxServerReviewsPerRequest)
			for i, want := range tc.want {
				before := api.reviews.Load()
				_, err := a.grant(ctx, agentToken(tc.agent), "", "agents")
				if !errors.Is(err, want) {
					t.Fatalf("request %d: %v, want %v", i+1, err, want)
				}
				// One namespace-wide review, then at most the bound.
				if n := api.reviews.Load() - before; n > int64(1+bound) {
					t.Fatalf("request %d asked %d reviews", i+1, n)
				}
				if want == errReviewBound && (limitOf(err) != LimitAccessReviewsPerRequest || authStatus(err) != 429 ||
					!strings.Contains(err.Error(), "per-request bound")) {
					t.Fatalf("request %d: limit %q, status %d, %q", i+1, limitOf(err), authStatus(err), err)
				}
			}
		})
	}
}

// One identity's reviews are rate-limited; another identity's are not
// touched by it.
func TestAccessReviewsAreLimitedPerIdentity(t *testing.T) {
	var names []string
	for i := range 30 {
		names = append(names, fmt.Sprintf("srv%03d", i))
	}
	servers := func(_ context.Context, ns string) ([]string, error) { return names, nil }
	api := &countingReviewer{}
	o := kubeauth.Options{Audiences: []string{"mcpbridge.dev"}, AccessReviewsPerSecond: 1e-9, AccessReviewBurst: 50}
	a := NewAccess(kubeauth.NewAuthenticator(api, o), kubeauth.NewAuthorizer(api, o), servers, o)
	ctx := context.Background()
	var limited int
	for i := range 20 { // a denied caller looping over namespaces
		_, err := a.grant(ctx, agentToken("nobody"), "", fmt.Sprintf("ns-%d", i))
		switch {
		case errors.Is(err, kubeauth.ErrAccessRateLimited):
			limited++
			if limitOf(err) != LimitAccessReviewsPerIdentity || authStatus(err) != 429 {
				t.Fatalf("limit %q, status %d", limitOf(err), authStatus(err))
			}
		case !errors.Is(err, errForbidden):
			t.Fatalf("namespace %d: %v", i, err)
		}
	}
	if n := api.reviews.Load(); n != 50 || limited != 19 {
		t.Fatalf("%d reviews and %d refusals, want the burst of 50 and 19", n, limited)
	}
	if g, err := a.grant(ctx, agentToken("srv007"), "", "ns-0"); err != nil || g.user == nil {
		t.Fatalf("another identity during the loop: %v", err)
	}
}

// A caller allowed one server by name, deep in a namespace of many, is let
// in again after every cached answer has expired with two reviews (the
// namespace-wide one and that server's), not after another walk through
// the namespace at the per-request bound.
func TestTheServerLastAllowedIsTriedFirst(t *testing.T) {
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("srv%03d", i)
	}
	servers := func(context.Context, string) ([]string, error) { return names, nil }
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	api := &countingReviewer{}
	o := kubeauth.Options{Audiences: []string{"mcpbridge.dev"}, AccessReviewBurst: 1000, Clock: clk}
	a := NewAccess(kubeauth.NewAuthenticator(api, o), kubeauth.NewAuthorizer(api, o), servers, o)
	ctx := context.Background()
	for i := 0; ; i++ {
		_, err := a.grant(ctx, agentToken("srv070"), "", "agents")
		if err == nil {
			break
		}
		if !errors.Is(err, errReviewBound) || i == 3 {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	clk.SetTime(clk.Now().Add(time.Minute)) // past every cached answer
	before := api.reviews.Load()
	if _, err := a.grant(ctx, agentToken("srv070"), "", "agents"); err != nil {
		t.Fatalf("after the answers expired: %v", err)
	}
	if n := api.reviews.Load() - before; n != 2 {
		t.Fatalf("%d reviews, want 2", n)
	}

	// Once that server is denied too, its review counts toward the
	// request's bound.
	api.denyAll.Store(true)
	clk.SetTime(clk.Now().Add(time.Minute))
	before = api.reviews.Load()
	if _, err := a.grant(ctx, agentToken("srv070"), "", "agents"); !errors.Is(err, errReviewBound) {
		t.Fatalf("after the server was denied: %v, want the per-request bound", err)
	}
	if n := api.reviews.Load() - before; n != int64(1+DefaultMaxServerReviewsPerRequest) {
		t.Fatalf("%d reviews, want the namespace's and %d", n, DefaultMaxServerReviewsPerRequest)
	}
}
