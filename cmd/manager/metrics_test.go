package main

import (
	"context"
	"crypto/tls"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

func TestMetricsServerOptions(t *testing.T) {
	certDir := t.TempDir()
	crt, key, err := certutil.GenerateSelfSignedCertKey("metrics.test", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certDir, "cert.pem"), crt, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certDir, "key.pem"), key, 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name       string
		args       []string
		secure     bool
		http2      bool
		ownCert    bool
		wantErr    string
		bindAddr   string
		wantFilter bool
	}{
		{name: "defaults", args: nil, secure: true, wantFilter: true, bindAddr: "0"},
		{name: "plain HTTP", args: []string{"--metrics-secure=false", "--metrics-bind-address=:8080"}, bindAddr: ":8080"},
		{name: "HTTP/2 asked for", args: []string{"--enable-http2", "--metrics-bind-address=:8443"},
			secure: true, http2: true, wantFilter: true, bindAddr: ":8443"},
		{name: "own certificate", args: []string{"--metrics-cert-path=" + certDir, "--metrics-cert-name=cert.pem",
			"--metrics-cert-key=key.pem"}, secure: true, ownCert: true, wantFilter: true, bindAddr: "0"},
		{name: "certificate missing", args: []string{"--metrics-cert-path=" + certDir},
			wantErr: "--metrics-cert-path=" + certDir},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("manager", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o, err := parseOptions(fs, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			opts, watcher, err := metricsServerOptions(o, runtime.NewScheme())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if watcher != nil {
				stopWatcher(t, watcher)
			}
			if opts.BindAddress != tc.bindAddr || opts.SecureServing != tc.secure {
				t.Errorf("bind %q secure %v, want %q %v", opts.BindAddress, opts.SecureServing, tc.bindAddr, tc.secure)
			}
			if (opts.FilterProvider != nil) != tc.wantFilter {
				t.Errorf("authentication filter set: %v, want %v", opts.FilterProvider != nil, tc.wantFilter)
			}
			c := &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
			for _, f := range opts.TLSOpts {
				f(c)
			}
			if tc.secure && slices.Contains(c.NextProtos, "h2") != tc.http2 {
				t.Errorf("TLS offers %v; HTTP/2 wanted: %v", c.NextProtos, tc.http2)
			}
			if (watcher != nil) != tc.ownCert || (c.GetCertificate != nil) != tc.ownCert {
				t.Fatalf("certificate watcher %v, GetCertificate %v; want both %v", watcher != nil, c.GetCertificate != nil, tc.ownCert)
			}
			if tc.ownCert {
				got, err := c.GetCertificate(&tls.ClientHelloInfo{})
				if err != nil || len(got.Certificate) == 0 {
					t.Fatalf("GetCertificate: %v", err)
				}
			}
		})
	}
}

// stopWatcher runs the watcher as the manager would, and stops it when the
// test ends: its file watch lives from New until Start returns.
func stopWatcher(t *testing.T, w *certwatcher.CertWatcher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("certificate watcher: %v", err)
		}
	})
}
