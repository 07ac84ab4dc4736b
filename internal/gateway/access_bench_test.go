package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/internal/kubeauth"
)

// What the authorization of one request costs once the answers are cached
// (the apiserver is asked only on the first request here), for a caller
// allowed the namespace and one allowed 5 of 20 McpServers by name: the
// token's review, the namespace-wide decision and, for the second, the
// cached "some server" answer and the called server's decision
// (docs/benchmarks.md, "Gateway in a shared cluster"):
//
//	go test -run XXX -bench AccessCached -benchmem ./internal/gateway/

// reviewer answers every token as valid for the gateway's audience and
// allows use of the namespace to "wide" and of fx00..fx04 to everyone.
type reviewer struct{ client.Client }

func (reviewer) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	switch o := obj.(type) {
	case *authnv1.TokenReview:
		o.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: o.Spec.Audiences,
			User: authnv1.UserInfo{Username: "system:serviceaccount:bench:" + strings.TrimRight(agentOf(o.Spec.Token), "x"), Groups: []string{"system:serviceaccounts"}}}
	case *authzv1.SubjectAccessReview:
		ra := o.Spec.ResourceAttributes
		o.Status.Allowed = (ra.Name == "" && strings.HasSuffix(o.Spec.User, ":wide")) || ra.Name < "fx05"
	}
	return nil
}

func BenchmarkAccessCached(b *testing.B) {
	names := make([]string, 20)
	for i := range names {
		names[i] = fmt.Sprintf("fx%02d", i)
	}
	servers := func(context.Context, string) ([]string, error) { return names, nil }
	for _, caller := range []string{"wide", "narrow"} {
		b.Run(caller, func(b *testing.B) {
			o := kubeauth.Options{Audiences: []string{"mcpbridge.dev"}}
			a := NewAccess(kubeauth.NewAuthenticator(reviewer{}, o), kubeauth.NewAuthorizer(reviewer{}, o), servers, o)
			ctx := context.Background()
			// A ServiceAccount token is about 1 kB.
			token := agentToken(caller + strings.Repeat("x", 1000-len(caller)))
			b.ReportAllocs()
			for b.Loop() {
				g, err := a.grant(ctx, token, "", "bench")
				if err != nil {
					b.Fatal(err)
				}
				if ok, err := a.mayUse(ctx, g, "bench", "fx00"); err != nil || !ok {
					b.Fatal("fx00 refused", err)
				}
			}
		})
	}
}

// What one request costs a caller that may use none of a namespace's 5,000
// McpServers once its per-identity reviews are spent (a prober in a loop,
// docs/benchmarks.md "Gateway in a shared cluster"): it must not grow with
// the namespace.
//
//	go test -run XXX -bench AccessDeniedInALargeNamespace -benchmem ./internal/gateway/
func BenchmarkAccessDeniedInALargeNamespace(b *testing.B) {
	names := make([]string, 5000)
	for i := range names {
		names[i] = fmt.Sprintf("srv%05d", i)
	}
	servers := func(context.Context, string) ([]string, error) { return names, nil }
	o := kubeauth.Options{Audiences: []string{"mcpbridge.dev"}, AccessReviewsPerSecond: 1e-9, AccessReviewBurst: 100}
	api := &countingReviewer{} // allows no one the namespace, nor any of its servers to "prober"
	a := NewAccess(kubeauth.NewAuthenticator(api, o), kubeauth.NewAuthorizer(api, o), servers, o)
	ctx := context.Background()
	token := agentToken("prober")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.grant(ctx, token, "", "bench"); err == nil {
			b.Fatal("the prober was let in")
		}
	}
}
