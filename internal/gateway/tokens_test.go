package gateway

import (
	"encoding/base64"
	"encoding/json"
	"strings"
)

// agentToken is an unsigned JWT of a ServiceAccount token's shape for the
// gateway's audience, so that kubeauth's local pre-check passes it to the
// stand-in reviewer, which knows the agent by its sub (agentOf).
func agentToken(name string) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "RS256"}) + "." +
		enc(map[string]any{"sub": name, "aud": []string{"mcpbridge.dev"}, "exp": 4102444800}) + ".c2lnbmF0dXJl"
}

// agentOf is the sub of a token agentToken made, or the token itself.
func agentOf(token string) string {
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
