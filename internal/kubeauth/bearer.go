package kubeauth

import (
	"errors"
	"net"
	"net/http"
	"strings"
)

// BearerToken extracts the token of an "Authorization: Bearer" header.
func BearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// SourceOf is the IP address a request came from (its RemoteAddr without
// the port), which the TokenReviews of new tokens are limited by.
func SourceOf(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// Unauthorized answers 401 with the challenge of a bearer token.
func Unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="mcpbridge"`)
	http.Error(w, "a valid bearer token is required", http.StatusUnauthorized)
}

// WriteAuthenticationError answers an error of Authenticate: 401, 429 with
// Retry-After, or 503 when the apiserver did not answer. The caller logs
// the last kind if it wants to; the first two are the caller's doing and
// are not worth a log line each.
func WriteAuthenticationError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrInvalidToken):
		Unauthorized(w)
	case errors.Is(err, ErrRateLimited):
		w.Header().Set("Retry-After", "1")
		http.Error(w, err.Error(), http.StatusTooManyRequests)
	default:
		http.Error(w, "authentication is unavailable", http.StatusServiceUnavailable)
	}
}

// Unavailable: err of Authenticate is the apiserver's failure, not the
// caller's (an invalid token or too many new ones).
func Unavailable(err error) bool {
	return err != nil && !errors.Is(err, ErrInvalidToken) && !errors.Is(err, ErrRateLimited)
}
