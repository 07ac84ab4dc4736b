package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/kubeauth"
	"github.com/mcpbridge/operator/internal/policy"
)

func TestEveryOperationsFlagIsDefined(t *testing.T) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	if _, err := parseOptions(fs, nil); err != nil {
		t.Fatalf("defaults must be valid: %v", err)
	}
	for _, name := range []string{
		"kubeconfig", "metrics-bind-address", "metrics-secure", "metrics-cert-path", "metrics-cert-name",
		"metrics-cert-key", "enable-http2", "health-probe-bind-address", "leader-elect", "leader-election-namespace",
		"gateway-bind-address", "gateway-auth", "gateway-token-audiences", "gateway-cert-dir", "gateway-tls", "gateway-dns-names", "gateway-cert-validity", "gateway-cert-renew-before", "watch-namespaces", "upstream-allow-cidrs",
		"cluster-cidrs", "manager-pod-labels", "manager-namespace",
		"local-stdio-namespaces", "shim-image", "node-image", "python-image",
		"min-reconnect-delay", "min-health-check-interval", "max-tool-call-timeout", "max-connection-timeout",
		"gateway-max-sessions-per-identity", "gateway-max-sessions-per-namespace", "gateway-max-inflight-calls-per-identity",
		"gateway-max-inflight-calls-per-namespace", "gateway-max-result-bytes-per-namespace", "max-tool-bytes-per-namespace",
		"replica-name", "replica-lease-duration", "replica-bind-address", "replica-advertise-address",
		"gateway-token-review-qps", "gateway-token-review-burst", "gateway-token-review-qps-per-source",
		"gateway-token-review-burst-per-source", "gateway-access-review-qps-per-identity",
		"gateway-access-review-burst-per-identity", "gateway-max-access-reviews-per-request",
		"gateway-session-key-secret", "gateway-session-key-rotation", "gateway-session-key-retention", "replica-drain-delay",
		"gc-quiet-headroom", "gc-busy-percent",
		"zap-devel", "zap-encoder", "zap-log-level", "zap-stacktrace-level", "zap-time-encoding",
	} {
		if fs.Lookup(name) == nil {
			t.Errorf("flag --%s is missing", name)
		}
	}
}

// TestOptionsThatCannotWorkAreRefused: --gateway-auth=none only on
// loopback, and no flag that would do nothing in its combination.
func TestOptionsThatCannotWorkAreRefused(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--gateway-auth=none", "--gateway-bind-address=127.0.0.1:8090"}, ""},
		{[]string{"--gateway-auth=none", "--gateway-bind-address=[::1]:8090"}, ""},
		{[]string{"--gateway-auth=none", "--gateway-bind-address=localhost:8090"}, ""},
		{[]string{"--gateway-auth=none"}, "loopback"},
		{[]string{"--gateway-auth=none", "--gateway-bind-address=0.0.0.0:8090"}, "loopback"},
		{[]string{"--gateway-auth=none", "--gateway-bind-address=10.0.0.1:8090"}, "loopback"},
		{[]string{"--gateway-auth=token", "--gateway-bind-address=0.0.0.0:8090"}, ""},
		{[]string{"--gateway-auth=basic"}, "must be"},
		{[]string{"--gateway-token-audiences=a.example,b.example"}, ""},
		{[]string{"--gateway-token-audiences="}, "at least one audience"},
		{[]string{"--gateway-token-audiences= , "}, "at least one audience"},
		{[]string{"--gateway-auth=none", "--gateway-bind-address=127.0.0.1:8090", "--gateway-token-audiences="}, ""},
		{[]string{"--metrics-cert-path=/certs"}, ""},
		{[]string{"--metrics-secure=false", "--metrics-cert-path=/certs"}, "needs --metrics-secure"},
		{[]string{"--leader-elect", "--leader-election-namespace=ops"}, ""},
		{[]string{"--leader-election-namespace=ops"}, "needs --leader-elect"},
		{[]string{"leader-elect"}, "unexpected arguments"},
		{[]string{"--gateway-max-sessions-per-identity=0"}, "must be positive"},
		{[]string{"--gateway-max-inflight-calls-per-namespace=-1"}, "must be positive"},
		{[]string{"--gateway-max-result-bytes-per-namespace=1Gi", "--max-tool-bytes-per-namespace=100Mi"}, ""},
		{[]string{"--gateway-max-result-bytes-per-namespace=lots"}, "quantity"},
		{[]string{"--max-tool-bytes-per-namespace=0"}, "must be positive"},
		{[]string{"--gateway-token-review-qps=0.5", "--gateway-token-review-burst=1", "--gateway-max-access-reviews-per-request=1"}, ""},
		{[]string{"--gateway-token-review-qps=0"}, "--gateway-token-review-qps must be a positive number"},
		{[]string{"--gateway-token-review-qps=NaN"}, "--gateway-token-review-qps must be a positive number"},
		{[]string{"--gateway-token-review-qps-per-source=+Inf"}, "--gateway-token-review-qps-per-source must be a positive number"},
		{[]string{"--gateway-token-review-burst-per-source=0"}, "--gateway-token-review-burst-per-source must be a positive number"},
		{[]string{"--gateway-access-review-qps-per-identity=-1"}, "--gateway-access-review-qps-per-identity must be a positive number"},
		{[]string{"--gateway-access-review-burst-per-identity=0"}, "--gateway-access-review-burst-per-identity must be a positive number"},
		{[]string{"--gateway-max-access-reviews-per-request=0"}, "--gateway-max-access-reviews-per-request must be a positive number"},
		{[]string{"--gateway-token-review-burst=lots"}, "gateway-token-review-burst"},
		{[]string{"--shim-image=registry.example.com/mcpbridge/operator@sha256:" + strings.Repeat("ab", 32)}, ""},
		{[]string{"--shim-image="}, "--shim-image"},
		{[]string{"--node-image=Not An Image"}, "--node-image"},
		{[]string{"--python-image=library/UPPER:1"}, "--python-image"},
		{[]string{"--upstream-allow-cidrs=127.0.0.0/8, ::1/128"}, ""},
		{[]string{"--upstream-allow-cidrs=127.0.0.0/8,localhost"}, `--upstream-allow-cidrs: "localhost" is not a CIDR`},
		{[]string{"--min-reconnect-delay=0", "--max-tool-call-timeout=0"}, ""},
		{[]string{"--min-reconnect-delay=-1s"}, "--min-reconnect-delay=-1s must not be negative"},
		{[]string{"--max-connection-timeout=-1ms"}, "--max-connection-timeout=-1ms must not be negative"},
		{[]string{"--min-health-check-interval=often"}, "min-health-check-interval"},
		{[]string{"--cluster-cidrs=10.244.0.0/16,10.96.0.0/12,fd00:10::/56"}, ""},
		{[]string{"--cluster-cidrs=10.244.0.0"}, `--cluster-cidrs: "10.244.0.0" is not a CIDR`},
		{[]string{"--manager-pod-labels=app=mcpbridge,tier=manager", "--manager-namespace=ops"}, ""},
		{[]string{"--manager-pod-labels="}, "--manager-pod-labels"},
		{[]string{"--manager-pod-labels=app in (a,b)"}, "--manager-pod-labels"},
		{[]string{"--gateway-tls=false"}, ""},
		{[]string{"--gateway-cert-dir=/certs"}, ""},
		{[]string{"--gateway-tls=false", "--gateway-cert-dir=/certs"}, "needs --gateway-tls"},
		{[]string{"--gateway-cert-validity=1h", "--gateway-cert-renew-before=59m"}, ""},
		{[]string{"--gateway-cert-validity=1h", "--gateway-cert-renew-before=1h"}, "less than --gateway-cert-validity"},
		{[]string{"--gateway-cert-renew-before=0s"}, "must be positive"},
		{[]string{"--gc-busy-percent=100", "--gc-quiet-headroom=0"}, ""},
		{[]string{"--gc-busy-percent=9"}, "--gc-busy-percent=9 must be at least 10"},
		// A certificate from a directory is renewed by whoever writes it.
		{[]string{"--gateway-cert-dir=/certs", "--gateway-cert-renew-before=0s"}, ""},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("manager", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			_, err := parseOptions(fs, tc.args)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestStdioRuntimeFlagsReachTheResolveStep: no Local runtime unless
// allowed, and the images the flags name.
func TestStdioRuntimeFlagsReachTheResolveStep(t *testing.T) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	o, err := parseOptions(fs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rc := o.stdio.runtimeConfig(); rc.AllowsLocal("default") || rc.NodeImage != policy.DefaultNodeImage || rc.PythonImage != policy.DefaultPythonImage {
		t.Errorf("defaults: %+v", rc)
	}
	if o.stdio.shimImage != defaultShimImage {
		t.Errorf("shim image %q", o.stdio.shimImage)
	}
	fs = flag.NewFlagSet("manager", flag.ContinueOnError)
	o, err = parseOptions(fs, []string{"--local-stdio-namespaces=dev, ci", "--node-image=node:24", "--python-image=python:3.14", "--shim-image=op:1"})
	if err != nil {
		t.Fatal(err)
	}
	rc := o.stdio.runtimeConfig()
	if !rc.AllowsLocal("dev") || !rc.AllowsLocal("ci") || rc.AllowsLocal("prod") || rc.NodeImage != "node:24" || rc.PythonImage != "python:3.14" || o.stdio.shimImage != "op:1" {
		t.Errorf("flags: %+v, shim %q", rc, o.stdio.shimImage)
	}
}

// TestLimitFlagsReachTheResolveStep: the SPEC's floors and ceilings by
// default, the flags' values otherwise.
func TestLimitFlagsReachTheResolveStep(t *testing.T) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	o, err := parseOptions(fs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.runtimeConfig().Limits; got != policy.DefaultLimits() {
		t.Errorf("default limits %+v, want %+v", got, policy.DefaultLimits())
	}
	fs = flag.NewFlagSet("manager", flag.ContinueOnError)
	o, err = parseOptions(fs, []string{"--min-reconnect-delay=1s", "--min-health-check-interval=5s",
		"--max-tool-call-timeout=2m", "--max-connection-timeout=30s", "--local-stdio-namespaces=dev"})
	if err != nil {
		t.Fatal(err)
	}
	rc := o.runtimeConfig()
	want := policy.Limits{MinReconnectDelay: time.Second, MinHealthCheckInterval: 5 * time.Second,
		MaxToolCallTimeout: 2 * time.Minute, MaxConnectionTimeout: 30 * time.Second}
	if rc.Limits != want || !rc.AllowsLocal("dev") {
		t.Errorf("flags: %+v, want limits %+v and Local in dev", rc, want)
	}
}

// TestReviewLimitFlagsReachKubeauth: the gateway's Authenticator and
// Authorizer get kubeauth's defaults unless the flags say otherwise.
func TestReviewLimitFlagsReachKubeauth(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		authn      kubeauth.Options
		authz      kubeauth.Options
		perRequest int
	}{
		{nil,
			kubeauth.Options{Audiences: []string{"mcpbridge.dev"}, ReviewsPerSecond: kubeauth.DefaultReviewsPerSecond,
				ReviewBurst: kubeauth.DefaultReviewBurst, ReviewsPerSourcePerSecond: kubeauth.DefaultReviewsPerSourcePerSecond,
				ReviewSourceBurst: kubeauth.DefaultReviewSourceBurst},
			kubeauth.Options{AccessReviewsPerSecond: kubeauth.DefaultAccessReviewsPerSecond, AccessReviewBurst: kubeauth.DefaultAccessReviewBurst},
			gateway.DefaultMaxServerReviewsPerRequest},
		{[]string{"--gateway-token-review-qps=40", "--gateway-token-review-burst=80", "--gateway-token-review-qps-per-source=2.5",
			"--gateway-token-review-burst-per-source=4", "--gateway-access-review-qps-per-identity=1",
			"--gateway-access-review-burst-per-identity=20", "--gateway-max-access-reviews-per-request=8"},
			kubeauth.Options{Audiences: []string{"mcpbridge.dev"}, ReviewsPerSecond: 40, ReviewBurst: 80,
				ReviewsPerSourcePerSecond: 2.5, ReviewSourceBurst: 4},
			kubeauth.Options{AccessReviewsPerSecond: 1, AccessReviewBurst: 20},
			8},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parseOptions(flag.NewFlagSet("manager", flag.ContinueOnError), tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if got := o.authLimits.authn(o.gatewayAudiences); !reflect.DeepEqual(got, tc.authn) {
				t.Errorf("authn options %+v, want %+v", got, tc.authn)
			}
			if got := o.authLimits.authz(); !reflect.DeepEqual(got, tc.authz) {
				t.Errorf("authz options %+v, want %+v", got, tc.authz)
			}
			if got := o.authLimits.AccessReviewsPerRequest; got != tc.perRequest {
				t.Errorf("per-request bound %d, want %d", got, tc.perRequest)
			}
		})
	}
}

func TestWatchNamespacesSplitsAndTrims(t *testing.T) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	o, err := parseOptions(fs, []string{"--watch-namespaces= a, b ,,c"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(o.watchNamespaces, "|"); got != "a|b|c" {
		t.Fatalf("namespaces = %q", got)
	}
}

// TestDefaultsAreKubebuilders pins the defaults users know from kubebuilder
// managers, the secure ones above all.
func TestDefaultsAreKubebuilders(t *testing.T) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	if _, err := parseOptions(fs, nil); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"metrics-bind-address":      "0",
		"metrics-secure":            "true",
		"metrics-cert-path":         "",
		"metrics-cert-name":         "tls.crt",
		"metrics-cert-key":          "tls.key",
		"enable-http2":              "false",
		"health-probe-bind-address": ":8081",
		"leader-elect":              "false",
		"kubeconfig":                "",
		// Ours: agents' tokens are bound to the gateway's audience.
		"gateway-token-audiences": "mcpbridge.dev",
		"gateway-auth":            "token",
		"gateway-cert-dir":        "",
		// Ours: TLS by default, with a certificate of the manager's own CA.
		"gateway-tls":               "true",
		"gateway-cert-validity":     "2160h0m0s",
		"gateway-cert-renew-before": "720h0m0s",
		// The floors and ceilings (docs/design.md, "Limits").
		"min-reconnect-delay":       "100ms",
		"min-health-check-interval": "1s",
		"max-tool-call-timeout":     "10m0s",
		"max-connection-timeout":    "10m0s",
		// The budgets (docs/design.md, "Budgets").
		"gateway-max-sessions-per-identity":        "64",
		"gateway-max-sessions-per-namespace":       "1024",
		"gateway-max-inflight-calls-per-identity":  "32",
		"gateway-max-inflight-calls-per-namespace": "256",
		"gateway-max-result-bytes-per-namespace":   "64Mi",
		"max-tool-bytes-per-namespace":             "64Mi",
		// The replicas (docs/design.md, "Replicas and ownership").
		"replica-name":              "",
		"replica-lease-duration":    "10s",
		"replica-bind-address":      ":8091",
		"replica-advertise-address": "",
		// The review budgets (docs/design.md, "Authentication and authorization").
		"gateway-token-review-qps":                 "20",
		"gateway-token-review-burst":               "50",
		"gateway-token-review-qps-per-source":      "5",
		"gateway-token-review-burst-per-source":    "10",
		"gateway-access-review-qps-per-identity":   "10",
		"gateway-access-review-burst-per-identity": "100",
		"gateway-max-access-reviews-per-request":   "32",
	} {
		if got := fs.Lookup(name).DefValue; got != want {
			t.Errorf("--%s defaults to %q, want %q", name, got, want)
		}
	}
}

// TestKubeconfigFlagIsWhatTheManagerLoads checks that --kubeconfig reaches
// controller-runtime's loader, even with $KUBECONFIG naming another file.
func TestKubeconfigFlagIsWhatTheManagerLoads(t *testing.T) {
	dir := t.TempDir()
	write := func(name, server string) string {
		path := filepath.Join(dir, name)
		kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, server)
		if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	flagFile := write("flag", "https://127.0.0.1:6443")
	t.Setenv("KUBECONFIG", write("env", "https://127.0.0.2:6443"))

	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	if _, err := parseOptions(fs, []string{"--kubeconfig=" + flagFile}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs.Set("kubeconfig", "") })
	cfg, err := config.GetConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" {
		t.Fatalf("the manager would talk to %q, not the --kubeconfig's server", cfg.Host)
	}
}

func TestHelpListsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(&out)
	if _, err := parseOptions(fs, []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: err = %v, want flag.ErrHelp", err)
	}
	if !strings.HasPrefix(out.String(), "Usage: manager [flags]") {
		t.Errorf("--help does not start with the usage line:\n%s", out.String())
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(out.String(), "-"+f.Name+" ") && !strings.Contains(out.String(), "-"+f.Name+"\n") {
			t.Errorf("--help does not list --%s", f.Name)
		}
		if strings.TrimSpace(f.Usage) == "" {
			t.Errorf("--%s has no help text", f.Name)
		}
	})
}

// TestClusterCIDRsDefaultToThePrivateRanges: without --cluster-cidrs, the
// in-cluster rule looks up every private and shared address.
func TestClusterCIDRsDefaultToThePrivateRanges(t *testing.T) {
	o, err := parseOptions(flag.NewFlagSet("manager", flag.ContinueOnError), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.clusterCIDRs, egress.DefaultClusterCIDRs) {
		t.Errorf("clusterCIDRs = %v, want %v", o.clusterCIDRs, egress.DefaultClusterCIDRs)
	}
}

// TestReplicaFlags: the name and address come from the downward API's
// POD_NAME and POD_IP unless given, and what no Lease or peer could use is
// refused.
func TestReplicaFlags(t *testing.T) {
	// Outside a Pod, on a host whose name makes a Lease name; in a Pod
	// POD_IP is required (TestReplicaAddressIsRequiredInACluster).
	const host = "build-host-1"
	defer func(file string, name func() (string, error)) { serviceAccountNamespaceFile, hostname = file, name }(serviceAccountNamespaceFile, hostname)
	serviceAccountNamespaceFile = filepath.Join(t.TempDir(), "no-namespace")
	hostname = func() (string, error) { return host, nil }
	cases := []struct {
		name          string
		env           map[string]string
		args          []string
		wantErr       string
		wantName      string
		wantAddress   string
		wantNamespace string
	}{
		{name: "from the downward API", env: map[string]string{"POD_NAME": "mcpbridge-manager-5f7-x2z", "POD_IP": "10.1.2.3"},
			wantName: "mcpbridge-manager-5f7-x2z", wantAddress: "10.1.2.3:8091", wantNamespace: "default"},
		{name: "IPv6 Pod", env: map[string]string{"POD_NAME": "m-0", "POD_IP": "fd00::7"}, args: []string{"--replica-bind-address=:9443"},
			wantName: "m-0", wantAddress: "[fd00::7]:9443"},
		{name: "flags win", env: map[string]string{"POD_NAME": "m-0", "POD_IP": "10.1.2.3"},
			args:     []string{"--replica-name=r1", "--replica-advertise-address=r1.managers.ops.svc:8091", "--leader-elect", "--leader-election-namespace=ops"},
			wantName: "r1", wantAddress: "r1.managers.ops.svc:8091", wantNamespace: "ops"},
		{name: "the manager's namespace", args: []string{"--manager-namespace=ops"}, wantNamespace: "ops"},
		{name: "host name outside a cluster", wantName: host, wantAddress: "127.0.0.1:8091"},
		{name: "upper-case name", args: []string{"--replica-name=Manager-0"}, wantErr: `--replica-name="Manager-0" cannot name a Lease`},
		{name: "name too long", args: []string{"--replica-name=" + strings.Repeat("a", 250)}, wantErr: "--replica-name"},
		{name: "short lease", args: []string{"--replica-lease-duration=500ms"}, wantErr: "--replica-lease-duration=500ms must be a whole number of seconds"},
		{name: "fractional lease", args: []string{"--replica-lease-duration=1500ms"}, wantErr: "whole number of seconds"},
		{name: "one-second lease", args: []string{"--replica-lease-duration=1s"}},
		{name: "bind without port", args: []string{"--replica-bind-address=0.0.0.0"}, wantErr: "--replica-bind-address"},
		{name: "bind port out of range", args: []string{"--replica-bind-address=:70000"}, wantErr: "--replica-bind-address"},
		{name: "unspecified advertise", args: []string{"--replica-advertise-address=0.0.0.0:8091"}, wantErr: "--replica-advertise-address"},
		{name: "advertise without host", args: []string{"--replica-advertise-address=:8091"}, wantErr: "--replica-advertise-address"},
		{name: "advertise without port", args: []string{"--replica-advertise-address=10.0.0.1"}, wantErr: "--replica-advertise-address"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("POD_NAME", tc.env["POD_NAME"])
			t.Setenv("POD_IP", tc.env["POD_IP"])
			fs := flag.NewFlagSet("manager", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o, err := parseOptions(fs, tc.args)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			case err != nil:
				return
			}
			r := o.replicas
			for _, c := range []struct{ what, got, want string }{
				{"name", r.name, tc.wantName}, {"advertise address", r.advertiseAddress, tc.wantAddress},
				{"namespace", r.namespace, tc.wantNamespace},
			} {
				if c.want != "" && c.got != c.want {
					t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
				}
			}
		})
	}
}

// TestGatewayCertificateNames: the issued certificate names the gateway's
// Service in the manager's namespace unless --gateway-dns-names says others.
func TestGatewayCertificateNames(t *testing.T) {
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--manager-namespace=ops"}, []string{"mcpbridge-gateway", "mcpbridge-gateway.ops", "mcpbridge-gateway.ops.svc", "mcpbridge-gateway.ops.svc.cluster.local"}},
		{[]string{"--manager-namespace=ops", "--gateway-dns-names=gw.example.com, mcp-bridge-gateway.ops.svc"}, []string{"gw.example.com", "mcp-bridge-gateway.ops.svc"}},
		{[]string{"--manager-namespace=ops", "--gateway-cert-dir=/certs", "--gateway-dns-names=ignored"}, nil},
		{[]string{"--manager-namespace=ops", "--gateway-tls=false"}, nil},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parseOptions(flag.NewFlagSet("manager", flag.ContinueOnError), tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.gatewayTLS.dnsNames, tc.want) {
				t.Errorf("DNS names %q, want %q", o.gatewayTLS.dnsNames, tc.want)
			}
		})
	}
}

// TestReplicaAddressIsRequiredInACluster: in a Pod without POD_IP the
// manager cannot guess the address its peers reach it at.
func TestReplicaAddressIsRequiredInACluster(t *testing.T) {
	t.Setenv("POD_IP", "")
	if _, err := defaultAdvertiseAddress("8091", true); err == nil || !strings.Contains(err.Error(), "POD_IP") {
		t.Fatalf("error = %v, want one naming POD_IP", err)
	}
	t.Setenv("POD_IP", "10.0.0.9")
	if got, err := defaultAdvertiseAddress("8091", true); err != nil || got != "10.0.0.9:8091" {
		t.Fatalf("got %q, %v", got, err)
	}
}
