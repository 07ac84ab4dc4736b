package main

import (
	"flag"
	"fmt"
	"math"

	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/kubeauth"
)

// The flags of the gateway's authorization budgets: the TokenReviews of new
// tokens and the SubjectAccessReviews of callers (docs/design.md,
// "Authentication and authorization" and "Budgets").
const (
	flagTokenReviewQPS               = "--gateway-token-review-qps"
	flagTokenReviewBurst             = "--gateway-token-review-burst"
	flagTokenReviewQPSPerSource      = "--gateway-token-review-qps-per-source"
	flagTokenReviewBurstPerSource    = "--gateway-token-review-burst-per-source"
	flagAccessReviewQPSPerIdentity   = "--gateway-access-review-qps-per-identity"
	flagAccessReviewBurstPerIdentity = "--gateway-access-review-burst-per-identity"
	flagMaxAccessReviewsPerRequest   = "--gateway-max-access-reviews-per-request"
)

// authLimitOptions are the rates and bounds of the gateway's reviews; the
// fields are exported for the start-up log line.
type authLimitOptions struct {
	TokenReviewQPS, TokenReviewQPSPerSource, AccessReviewQPSPerIdentity       float64
	TokenReviewBurst, TokenReviewBurstPerSource, AccessReviewBurstPerIdentity int
	AccessReviewsPerRequest                                                   int
}

// bindFlags defines the review budget flags with kubeauth's and the
// gateway's defaults.
func (o *authLimitOptions) bindFlags(fs *flag.FlagSet) {
	fs.Float64Var(&o.TokenReviewQPS, flagName(flagTokenReviewQPS), kubeauth.DefaultReviewsPerSecond,
		"TokenReviews per second of bearer tokens the gateway has not seen valid lately, all callers together; "+
			"beyond it (and --gateway-token-review-burst) a new token gets HTTP 429 with Retry-After.")
	fs.IntVar(&o.TokenReviewBurst, flagName(flagTokenReviewBurst), kubeauth.DefaultReviewBurst,
		"Burst of --gateway-token-review-qps.")
	fs.Float64Var(&o.TokenReviewQPSPerSource, flagName(flagTokenReviewQPSPerSource), kubeauth.DefaultReviewsPerSourcePerSecond,
		"TokenReviews per second of new tokens from one source address, so that a flood from one address "+
			"cannot spend the global rate; beyond it HTTP 429 with Retry-After.")
	fs.IntVar(&o.TokenReviewBurstPerSource, flagName(flagTokenReviewBurstPerSource), kubeauth.DefaultReviewSourceBurst,
		"Burst of --gateway-token-review-qps-per-source.")
	fs.Float64Var(&o.AccessReviewQPSPerIdentity, flagName(flagAccessReviewQPSPerIdentity), kubeauth.DefaultAccessReviewsPerSecond,
		"SubjectAccessReviews per second of one identity (user and groups) whose answer is not cached; "+
			"beyond it HTTP 429 with Retry-After.")
	fs.IntVar(&o.AccessReviewBurstPerIdentity, flagName(flagAccessReviewBurstPerIdentity), kubeauth.DefaultAccessReviewBurst,
		"Burst of --gateway-access-review-qps-per-identity.")
	fs.IntVar(&o.AccessReviewsPerRequest, flagName(flagMaxAccessReviewsPerRequest), gateway.DefaultMaxServerReviewsPerRequest,
		"Per-McpServer SubjectAccessReviews one request of a caller denied namespace-wide may ask for; "+
			"beyond it HTTP 429, and the caller's next request goes on where the cached answers end.")
}

// validate refuses rates and bounds that would let nothing through, or
// everything: 0 does not mean "no limit" here.
func (o *authLimitOptions) validate() error {
	for _, f := range []struct {
		flag string
		v    float64
	}{
		{flagTokenReviewQPS, o.TokenReviewQPS}, {flagTokenReviewQPSPerSource, o.TokenReviewQPSPerSource},
		{flagAccessReviewQPSPerIdentity, o.AccessReviewQPSPerIdentity},
		{flagTokenReviewBurst, float64(o.TokenReviewBurst)}, {flagTokenReviewBurstPerSource, float64(o.TokenReviewBurstPerSource)},
		{flagAccessReviewBurstPerIdentity, float64(o.AccessReviewBurstPerIdentity)}, {flagMaxAccessReviewsPerRequest, float64(o.AccessReviewsPerRequest)},
	} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			return fmt.Errorf("%s must be a positive number, not %v", f.flag, f.v)
		}
	}
	return nil
}

// authn and authz are kubeauth's options for the gateway's Authenticator
// and Authorizer.
func (o *authLimitOptions) authn(audiences []string) kubeauth.Options {
	return kubeauth.Options{Audiences: audiences,
		ReviewsPerSecond: o.TokenReviewQPS, ReviewBurst: o.TokenReviewBurst,
		ReviewsPerSourcePerSecond: o.TokenReviewQPSPerSource, ReviewSourceBurst: o.TokenReviewBurstPerSource}
}

func (o *authLimitOptions) authz() kubeauth.Options {
	return kubeauth.Options{AccessReviewsPerSecond: o.AccessReviewQPSPerIdentity, AccessReviewBurst: o.AccessReviewBurstPerIdentity}
}
