package kubeauth

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The apiserver's answers are tested against a real apiserver in
// internal/controller and test/manager; these tests cover what this package
// adds around them (caching, bounds, the rate limit, sharing a review), with
// a stand-in that answers and counts the reviews.

// apiserver answers TokenReviews for the tokens in valid (with their
// audiences) and SubjectAccessReviews by allow; it counts both.
type apiserver struct {
	client.Client // nil: only Create is called

	mu        sync.Mutex
	valid     map[string][]string // token -> the audiences it was made for
	allow     func(authzv1.SubjectAccessReviewSpec) bool
	fail      error
	tokens    int
	accesses  int
	audiences [][]string // spec.audiences of each TokenReview
	gate      chan struct{}
}

func (a *apiserver) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	if a.gate != nil {
		<-a.gate
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail != nil {
		return a.fail
	}
	switch o := obj.(type) {
	case *authnv1.TokenReview:
		a.tokens++
		a.audiences = append(a.audiences, o.Spec.Audiences)
		name := subOf(o.Spec.Token)
		auds, ok := a.valid[name]
		if !ok {
			return nil
		}
		want := o.Spec.Audiences
		if len(want) == 0 {
			want = []string{"https://kubernetes.default.svc"}
		}
		for _, aud := range want {
			if slices.Contains(auds, aud) {
				o.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{aud},
					User: authnv1.UserInfo{Username: "system:serviceaccount:agents:" + name, Groups: []string{"system:serviceaccounts"}}}
			}
		}
	case *authzv1.SubjectAccessReview:
		a.accesses++
		o.Status.Allowed = a.allow != nil && a.allow(o.Spec)
	default:
		return fmt.Errorf("unexpected %T", obj)
	}
	return nil
}

func (a *apiserver) counts() (tokens, accesses int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tokens, a.accesses
}

const gatewayAudience = "mcpbridge.dev"

func TestAuthenticateChecksTheAudience(t *testing.T) {
	api := &apiserver{valid: map[string][]string{
		"agent":  {gatewayAudience},
		"plain":  {"https://kubernetes.default.svc"},
		"either": {"other", gatewayAudience},
	}}
	a := NewAuthenticator(api, Options{Audiences: []string{gatewayAudience}})
	for token, wantErr := range map[string]error{"agent": nil, "either": nil, "plain": ErrInvalidToken, "garbage": ErrInvalidToken} {
		u, err := a.Authenticate(context.Background(), tok(token, gatewayAudience))
		if !errors.Is(err, wantErr) {
			t.Errorf("%s: error %v, want %v", token, err, wantErr)
		}
		if err == nil && u.Name != "system:serviceaccount:agents:"+token {
			t.Errorf("%s: user %q", token, u.Name)
		}
	}
	for _, auds := range api.audiences {
		if !slices.Equal(auds, []string{gatewayAudience}) {
			t.Fatalf("a TokenReview asked for %q, want the gateway's audience", auds)
		}
	}
	// Without audiences, the apiserver's own (the metrics endpoint).
	m := NewAuthenticator(api, Options{})
	if _, err := m.Authenticate(context.Background(), "plain"); err != nil {
		t.Fatalf("a plain API token without audiences asked: %v", err)
	}
	if _, err := m.Authenticate(context.Background(), tok("agent", gatewayAudience)); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("a gateway token at the metrics endpoint: %v", err)
	}
}

// A valid answer is remembered for AllowTTL and an invalid one for
// DenyTTL, on the Authenticator's clock, and the cache stays bounded.
func TestAuthenticateRemembersValidLongerThanInvalid(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	api := &apiserver{valid: map[string][]string{"agent": {gatewayAudience}}}
	a := NewAuthenticator(api, Options{Audiences: []string{gatewayAudience}, AllowTTL: 30 * time.Second, DenyTTL: 5 * time.Second, Clock: clk})
	ctx := context.Background()
	reviews := func(after time.Duration) int {
		clk.SetTime(start.Add(after))
		_, _ = a.Authenticate(ctx, tok("agent", gatewayAudience))
		_, _ = a.Authenticate(ctx, tok("garbage", gatewayAudience))
		n, _ := api.counts()
		return n
	}
	for _, step := range []struct {
		after time.Duration
		want  int
	}{
		{0, 2}, {5 * time.Second, 2}, // both remembered
		{5*time.Second + time.Millisecond, 3},  // garbage asked again
		{30 * time.Second, 4},                  // garbage again; the agent still remembered
		{30*time.Second + time.Millisecond, 5}, // the agent asked again
		{35*time.Second + 2*time.Millisecond, 6},
	} {
		if got := reviews(step.after); got != step.want {
			t.Errorf("after %v: %d reviews, want %d", step.after, got, step.want)
		}
	}
}

func TestCachesStayBounded(t *testing.T) {
	api := &apiserver{valid: map[string][]string{}, allow: func(authzv1.SubjectAccessReviewSpec) bool { return true }}
	for i := range 300 {
		api.valid[fmt.Sprint(i)] = []string{gatewayAudience}
	}
	o := Options{Audiences: []string{gatewayAudience}, MaxEntries: 100, ReviewBurst: 1000}
	a, z := NewAuthenticator(api, o), NewAuthorizer(api, o)
	ctx := context.Background()
	for i := range 300 {
		u, err := a.Authenticate(ctx, tok(fmt.Sprint(i), gatewayAudience))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := z.Allowed(ctx, u, Attributes{Verb: "get", Path: "/metrics"}); err != nil {
			t.Fatal(err)
		}
	}
	for name, n := range map[string]int{"answers": len(a.answers.Keys()), "valid": len(a.valid.Keys()), "access": len(z.answers.Keys())} {
		if n > 100 {
			t.Errorf("%s holds %d entries, bound is 100", name, n)
		}
	}
}

// Tokens not in the cache are reviewed at most at the limit's rate; known
// tokens keep working, also once their answer expired.
func TestRateLimitSparesKnownTokens(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	api := &apiserver{valid: map[string][]string{"agent": {gatewayAudience}}}
	// A rate so low that the bucket does not refill during the test.
	a := NewAuthenticator(api, Options{Audiences: []string{gatewayAudience}, ReviewsPerSecond: 1e-9, ReviewBurst: 5, AllowTTL: time.Second, Clock: clk})
	ctx := context.Background()
	if _, err := a.Authenticate(ctx, tok("agent", gatewayAudience)); err != nil {
		t.Fatal(err)
	}
	limited := 0
	for i := range 100 {
		_, err := a.Authenticate(ctx, tok(fmt.Sprintf("random-%d", i), gatewayAudience))
		switch {
		case errors.Is(err, ErrRateLimited):
			limited++
		case !errors.Is(err, ErrInvalidToken):
			t.Fatalf("random token: %v", err)
		}
	}
	if tokens, _ := api.counts(); tokens != 5 || limited != 96 {
		t.Fatalf("%d TokenReviews and %d refusals, want 5 (the burst, the agent's first included) and 96", tokens, limited)
	}
	if _, err := a.Authenticate(ctx, tok("agent", gatewayAudience)); err != nil {
		t.Fatalf("the agent's cached token: %v", err)
	}
	clk.SetTime(start.Add(2 * time.Second)) // the agent's answer expired
	if _, err := a.Authenticate(ctx, tok("agent", gatewayAudience)); err != nil {
		t.Fatalf("the agent's known token after its answer expired: %v", err)
	}
	if tokens, _ := api.counts(); tokens != 6 {
		t.Fatalf("%d TokenReviews, want the agent's token reviewed again", tokens)
	}
	// A revoked token fails at that review, limit or not.
	api.mu.Lock()
	delete(api.valid, "agent")
	api.mu.Unlock()
	clk.SetTime(start.Add(4 * time.Second))
	if _, err := a.Authenticate(ctx, tok("agent", gatewayAudience)); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("a revoked token: %v", err)
	}
}

// Concurrent requests with one token share one review, and a failed review
// is not remembered.
func TestConcurrentRequestsShareAReview(t *testing.T) {
	api := &apiserver{valid: map[string][]string{"agent": {gatewayAudience}}, gate: make(chan struct{})}
	a := NewAuthenticator(api, Options{Audiences: []string{gatewayAudience}})
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := a.Authenticate(context.Background(), tok("agent", gatewayAudience)); err != nil {
				t.Error(err)
			}
		})
	}
	// All 20 are in the flight (one in the review, 19 waiting for it)
	// before the review may answer: a late one would be answered from the
	// cache, and the test would not show the sharing.
	waitInFlight(t, 20)
	close(api.gate)
	wg.Wait()
	if tokens, _ := api.counts(); tokens != 1 {
		t.Fatalf("%d TokenReviews for one token asked 20 times at once, want 1", tokens)
	}

	down := &apiserver{fail: errors.New("connection refused")}
	b := NewAuthenticator(down, Options{})
	for range 2 {
		_, err := b.Authenticate(context.Background(), "agent")
		if err == nil || !Unavailable(err) || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("apiserver down: %v", err)
		}
	}
	if tokens, _ := down.counts(); tokens != 0 {
		t.Fatalf("counted %d", tokens) // Create failed before counting
	}
}

// waitInFlight waits until n goroutines are inside a singleflight.Group's
// Do: the event itself, read from the goroutines' stacks.
func waitInFlight(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		got := strings.Count(string(buf), "singleflight.(*Group).Do(")
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines in the review's flight, want %d", got, n)
		}
	}
}

// An allow is remembered for AllowTTL and a denial for DenyTTL; a decision
// is about one token and one set of attributes.
func TestAllowedRemembersAllowsLongerThanDenials(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	api := &apiserver{valid: map[string][]string{"agent": {gatewayAudience}, "other": {gatewayAudience}},
		allow: func(s authzv1.SubjectAccessReviewSpec) bool { return s.ResourceAttributes.Name == "alpha" }}
	o := Options{Audiences: []string{gatewayAudience}, AllowTTL: 30 * time.Second, DenyTTL: 5 * time.Second, Clock: clk}
	a, z := NewAuthenticator(api, o), NewAuthorizer(api, o)
	ctx := context.Background()
	agent, _ := a.Authenticate(ctx, tok("agent", gatewayAudience))
	other, _ := a.Authenticate(ctx, tok("other", gatewayAudience))
	use := func(name string) Attributes {
		return Attributes{Verb: "use", Group: "mcpbridge.dev", Resource: "mcpservers", Namespace: "agents", Name: name}
	}
	ask := func(after time.Duration) int {
		clk.SetTime(start.Add(after))
		for name, want := range map[string]bool{"alpha": true, "beta": false} {
			if got, err := z.Allowed(ctx, agent, use(name)); err != nil || got != want {
				t.Fatalf("after %v: %s allowed %v (%v), want %v", after, name, got, err, want)
			}
		}
		_, n := api.counts()
		return n
	}
	for _, step := range []struct {
		after time.Duration
		want  int
	}{{0, 2}, {5 * time.Second, 2}, {5*time.Second + time.Millisecond, 3}, {30*time.Second + time.Millisecond, 5}} {
		if got := ask(step.after); got != step.want {
			t.Errorf("after %v: %d reviews, want %d", step.after, got, step.want)
		}
	}
	if _, err := z.Allowed(ctx, other, use("alpha")); err != nil {
		t.Fatal(err)
	}
	if _, n := api.counts(); n != 6 {
		t.Fatalf("another token's decision was taken from the cache (%d reviews)", n)
	}
}
