package main

import (
	"crypto/tls"
	"fmt"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The metrics filter of --metrics-secure reviews every scraper's token and
// its right to GET /metrics with the apiserver, so the manager needs these
// (the gateway's token auth needs them too; declared here as well so that
// the metrics keep working whatever the gateway's markers become).
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// metricsServerOptions turns the metrics flags into the metrics server's
// options, as a kubebuilder manager does: with --metrics-secure, HTTPS and
// kubebuilder's authentication and authorization filter; with
// --metrics-cert-path, a certificate watched for rotation, which the caller
// must add to the manager so that it runs. See docs/design.md, "Metrics".
func metricsServerOptions(o *options) (metricsserver.Options, *certwatcher.CertWatcher, error) {
	opts := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.metricsSecure}
	if !o.metricsSecure {
		return opts, nil, nil
	}
	opts.FilterProvider = filters.WithAuthenticationAndAuthorization
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

// disableHTTP2 leaves HTTP/1.1 as the only protocol a TLS client can
// negotiate, which shuts out the HTTP/2 rapid-reset attacks.
func disableHTTP2(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }
