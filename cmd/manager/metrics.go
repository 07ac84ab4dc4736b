package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mcpbridge/operator/internal/kubeauth"
)

// The metrics filter of --metrics-secure reviews every scraper's token and
// its right to GET /metrics with the apiserver, so the manager needs these
// (the gateway's token auth needs them too; declared here as well so that
// the metrics keep working whatever the gateway's markers become).
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// metricsServerOptions turns the metrics flags into the metrics server's
// options, as a kubebuilder manager does: with --metrics-secure, HTTPS and
// an authentication and authorization filter; with --metrics-cert-path, a
// certificate watched for rotation, which the caller must add to the
// manager so that it runs. See docs/design.md, "Metrics".
func metricsServerOptions(o *options, scheme *runtime.Scheme) (metricsserver.Options, *certwatcher.CertWatcher, error) {
	opts := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.metricsSecure}
	if !o.metricsSecure {
		return opts, nil, nil
	}
	opts.FilterProvider = metricsAuth(scheme)
	if !o.enableHTTP2 {
		opts.TLSOpts = append(opts.TLSOpts, disableHTTP2)
	}
	if o.metricsCertPath == "" {
		return opts, nil, nil
	}
	w, err := certwatcher.New(filepath.Join(o.metricsCertPath, o.metricsCertName), filepath.Join(o.metricsCertPath, o.metricsCertKey))
	if err != nil {
		return opts, nil, fmt.Errorf("load the metrics certificate from --metrics-cert-path=%s: %w", o.metricsCertPath, err)
	}
	opts.TLSOpts = append(opts.TLSOpts, func(c *tls.Config) { c.GetCertificate = w.GetCertificate })
	return opts, w, nil
}

// metricsAuth does what kubebuilder's filters.WithAuthenticationAndAuthorization
// does, on the gateway's token machinery (cache, rate limit) and without
// k8s.io/apiserver: a TokenReview of the bearer token, for the apiserver's
// own audiences (Prometheus sends its ServiceAccount's ordinary token), then
// a SubjectAccessReview for the request's non-resource path and verb. A
// missing or invalid token gets 401, no permission 403; neither logs.
func metricsAuth(scheme *runtime.Scheme) func(*rest.Config, *http.Client) (metricsserver.Filter, error) {
	return func(cfg *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
		c, err := client.New(cfg, client.Options{Scheme: scheme, HTTPClient: hc})
		if err != nil {
			return nil, fmt.Errorf("metrics authentication client: %w", err)
		}
		authn := kubeauth.NewAuthenticator(c, kubeauth.Options{})
		authz := kubeauth.NewAuthorizer(c, kubeauth.Options{})
		return func(log logr.Logger, next http.Handler) (http.Handler, error) {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				token, ok := kubeauth.BearerToken(r)
				if !ok {
					kubeauth.Unauthorized(w)
					return
				}
				u, err := authn.Authenticate(r.Context(), token)
				if err != nil {
					if kubeauth.Unavailable(err) {
						log.Error(err, "metrics authentication failed")
					}
					kubeauth.WriteAuthenticationError(w, err)
					return
				}
				allowed, err := authz.Allowed(r.Context(), u, kubeauth.Attributes{Verb: strings.ToLower(r.Method), Path: r.URL.Path})
				switch {
				case errors.Is(err, kubeauth.ErrAccessRateLimited):
					w.Header().Set("Retry-After", "1")
					http.Error(w, err.Error(), http.StatusTooManyRequests)
				case err != nil:
					log.Error(err, "metrics authorization failed", "user", u.Name)
					http.Error(w, "authorization is unavailable", http.StatusServiceUnavailable)
				case !allowed:
					http.Error(w, fmt.Sprintf("forbidden: user %q may not %s %s", u.Name, strings.ToLower(r.Method), r.URL.Path), http.StatusForbidden)
				default:
					next.ServeHTTP(w, r)
				}
			}), nil
		}, nil
	}
}

// disableHTTP2 leaves HTTP/1.1 as the only protocol a TLS client can
// negotiate, which shuts out the HTTP/2 rapid-reset attacks.
func disableHTTP2(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }
