package kubeauth

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// The local pre-check of a bearer token (docs/design.md, "Budgets" and "Limits"): a token that cannot
// pass a TokenReview for the gateway's audiences is refused before it
// reaches the TokenReview rate limit, so that a flood of random tokens
// neither costs the apiserver nor holds the limit agents need. Only the
// shape is checked, never the signature: the TokenReview still decides.
// See docs/design.md, "Authentication and authorization".
const (
	// maxTokenBytes: a ServiceAccount token is about 1 kB; an OIDC token
	// with many groups a few.
	maxTokenBytes = 64 << 10
	// expiryLeeway: a token is expired only this long after its exp, so
	// that clock skew never refuses one the apiserver would accept.
	expiryLeeway = time.Minute
)

// mayPassReview reports whether token is a well-formed JWT (three
// base64url parts, a JSON header naming an algorithm, JSON claims) with an
// audience among audiences and, when it has one, an exp not yet passed at
// now. An audience-bound TokenReview accepts no other token: an
// audience-agnostic one (a static token) is valid only for the apiserver's
// own audiences.
func mayPassReview(token string, audiences []string, now time.Time) bool {
	if len(token) > maxTokenBytes {
		return false
	}
	head, rest, ok := strings.Cut(token, ".")
	if !ok {
		return false
	}
	body, sig, ok := strings.Cut(rest, ".")
	if !ok || sig == "" || strings.Contains(sig, ".") || !isBase64URL(sig) {
		return false
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if !decodePart(head, &h) || h.Alg == "" {
		return false
	}
	var c claims
	if !decodePart(body, &c) {
		return false
	}
	return c.hasAudience(audiences) && (c.Exp == nil || now.Before(time.Unix(int64(*c.Exp), 0).Add(expiryLeeway)))
}

// claims are the registered claims the pre-check reads.
type claims struct {
	Aud audience `json:"aud"`
	Exp *float64 `json:"exp"` // NumericDate: seconds, maybe fractional
}

func (c *claims) hasAudience(want []string) bool {
	for _, a := range c.Aud {
		if slices.Contains(want, a) {
			return true
		}
	}
	return false
}

// audience is the aud claim: one string or a list (RFC 7519, section 4.1.3).
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
}

// decodePart decodes one base64url part (JWS uses no padding) holding a
// JSON object into v.
func decodePart(part string, v any) bool {
	b, err := base64.RawURLEncoding.DecodeString(part)
	if err != nil || len(b) == 0 || b[0] != '{' {
		return false
	}
	return json.Unmarshal(b, v) == nil
}

func isBase64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
