package kubeauth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// farFuture is the exp of the tests' tokens: 2100-01-01.
const farFuture = 4102444800

// tok is an unsigned JWT of the shape a ServiceAccount token has, for the
// stand-in apiserver, which knows it by its sub.
func tok(sub string, aud ...string) string {
	return jwtOf(map[string]any{"alg": "RS256", "kid": "k1"}, map[string]any{"sub": sub, "aud": aud, "exp": farFuture})
}

func jwtOf(header, claims any) string {
	part := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return part(header) + "." + part(claims) + ".c2lnbmF0dXJl"
}

// subOf is the sub of a token tok made, or the token itself.
func subOf(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return token
	}
	var c struct{ Sub string }
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(b, &c) != nil || c.Sub == "" {
		return token
	}
	return c.Sub
}

func TestMayPassReview(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	header := map[string]any{"alg": "RS256"}
	claims := func(aud any, exp any) map[string]any {
		c := map[string]any{"sub": "system:serviceaccount:agents:a", "aud": aud}
		if exp != nil {
			c["exp"] = exp
		}
		return c
	}
	valid := jwtOf(header, claims([]string{gatewayAudience}, now.Unix()+600))
	parts := strings.Split(valid, ".")
	for _, tc := range []struct {
		name  string
		token string
		want  bool
	}{
		{"a ServiceAccount token for the audience", valid, true},
		{"aud as one string", jwtOf(header, claims(gatewayAudience, now.Unix()+600)), true},
		{"one of several audiences", jwtOf(header, claims([]string{"other", gatewayAudience}, now.Unix()+600)), true},
		{"fractional exp", jwtOf(header, claims(gatewayAudience, float64(now.Unix())+0.5)), true},
		{"expired within the leeway", jwtOf(header, claims(gatewayAudience, now.Unix()-30)), true},
		{"no exp (the review decides)", jwtOf(header, claims(gatewayAudience, nil)), true},
		{"another audience", jwtOf(header, claims([]string{"https://kubernetes.default.svc"}, now.Unix()+600)), false},
		{"no audience", jwtOf(header, map[string]any{"sub": "x", "exp": now.Unix() + 600}), false},
		{"expired an hour ago", jwtOf(header, claims(gatewayAudience, now.Unix()-3600)), false},
		{"exp not a number", jwtOf(header, claims(gatewayAudience, "tomorrow")), false},
		{"aud not a string", jwtOf(header, claims(42, now.Unix()+600)), false},
		{"no alg", jwtOf(map[string]any{"typ": "JWT"}, claims(gatewayAudience, now.Unix()+600)), false},
		{"header a JSON list", base64.RawURLEncoding.EncodeToString([]byte(`["RS256"]`)) + "." + parts[1] + "." + parts[2], false},
		{"claims not JSON", parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte("aud=mcpbridge.dev")) + "." + parts[2], false},
		{"padded base64", parts[0] + "." + parts[1] + "=." + parts[2], false},
		{"no signature", parts[0] + "." + parts[1] + ".", false},
		{"signature not base64url", parts[0] + "." + parts[1] + ".a+b/c", false},
		{"two parts", parts[0] + "." + parts[1], false},
		{"four parts", valid + ".x", false},
		{"random", "f3a1c0b7e2d94f9a1c0b7e2d", false},
		{"empty", "", false},
		{"over 64 KiB", jwtOf(header, map[string]any{"aud": gatewayAudience, "pad": strings.Repeat("x", 64<<10)}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mayPassReview(tc.token, []string{gatewayAudience}, now); got != tc.want {
				t.Errorf("mayPassReview = %v, want %v", got, tc.want)
			}
		})
	}
}

// A malformed, wrong-audience or expired token is refused without a
// TokenReview, and without spending the rate limit.
func TestPrecheckRefusesWithoutAReview(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	api := &apiserver{valid: map[string][]string{"agent": {gatewayAudience}}}
	a := NewAuthenticator(api, Options{Audiences: []string{gatewayAudience}, ReviewsPerSecond: 1e-9, ReviewBurst: 1,
		Clock: clocktesting.NewFakePassiveClock(now)})
	ctx := context.Background()
	for i := range 100 {
		for _, token := range []string{
			fmt.Sprintf("random-%d", i),
			tok(fmt.Sprintf("agent-%d", i), "https://kubernetes.default.svc"),
			jwtOf(map[string]any{"alg": "RS256"}, map[string]any{"sub": "agent", "aud": gatewayAudience, "exp": now.Unix() - 3600 - int64(i)}),
		} {
			if _, err := a.AuthenticateFrom(ctx, token, "10.0.0.1"); !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("%.40s...: %v, want ErrInvalidToken", token, err)
			}
		}
	}
	if tokens, _ := api.counts(); tokens != 0 {
		t.Fatalf("%d TokenReviews, want none", tokens)
	}
	if _, err := a.AuthenticateFrom(ctx, tok("agent", gatewayAudience), "10.0.0.1"); err != nil {
		t.Fatalf("the agent after 300 refused tokens: %v (the burst is 1)", err)
	}
}

// A flood of new, well-formed tokens from one address spends that
// address's budget, not everyone's: an agent with a new token at another
// address is reviewed.
func TestFloodFromOneSourceSparesOthers(t *testing.T) {
	api := &apiserver{valid: map[string][]string{"agent": {gatewayAudience}}}
	a := NewAuthenticator(api, Options{Audiences: []string{gatewayAudience}, ReviewsPerSecond: 1e-9, ReviewBurst: 20,
		ReviewsPerSourcePerSecond: 1e-9, ReviewSourceBurst: 5})
	ctx := context.Background()
	var sourceLimited int
	for i := range 1000 {
		_, err := a.AuthenticateFrom(ctx, tok(fmt.Sprintf("random-%d", i), gatewayAudience), "192.0.2.7")
		switch {
		case errors.Is(err, ErrSourceRateLimited):
			if !errors.Is(err, ErrRateLimited) {
				t.Fatal("ErrSourceRateLimited is not ErrRateLimited")
			}
			sourceLimited++
		case !errors.Is(err, ErrInvalidToken):
			t.Fatalf("random token: %v", err)
		}
	}
	if tokens, _ := api.counts(); tokens != 5 || sourceLimited != 995 {
		t.Fatalf("%d TokenReviews and %d refusals of the flooding address, want 5 and 995", tokens, sourceLimited)
	}
	if _, err := a.AuthenticateFrom(ctx, tok("agent", gatewayAudience), "192.0.2.8"); err != nil {
		t.Fatalf("an agent at another address during the flood: %v", err)
	}
	// Without a per-address limit the flood would have taken the global
	// burst of 20: the global limit still holds across addresses.
	for i := range 30 {
		_, err := a.AuthenticateFrom(ctx, tok(fmt.Sprintf("spread-%d", i), gatewayAudience), fmt.Sprintf("198.51.100.%d", i))
		if i >= 14 && !errors.Is(err, ErrRateLimited) {
			t.Fatalf("token %d from its own address: %v, want the global limit after 20 reviews", i, err)
		}
	}
}
