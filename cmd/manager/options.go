package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/distribution/reference"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/internal/gctune"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/policy"
)

// Gateway authentication modes of --gateway-auth.
const (
	gatewayAuthToken = "token"
	gatewayAuthNone  = "none"
	// defaultGatewayAudience is the audience agents' tokens are made for.
	defaultGatewayAudience = "mcpbridge.dev"
)

type options struct {
	metricsAddr             string
	metricsSecure           bool
	metricsCertPath         string
	metricsCertName         string
	metricsCertKey          string
	enableHTTP2             bool
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	gatewayAddr             string
	gatewayAuth             string
	gatewayAudiences        []string
	watchNamespaces         []string
	stdio                   stdioOptions
	upstreamAllowCIDRs      []netip.Prefix
	clusterCIDRs            []netip.Prefix
	limits                  policy.Limits
	budgets                 budgetOptions
	replicas                replicaOptions
	authLimits              authLimitOptions
	sessionKeys             sessionKeyOptions
	gatewayTLS              gatewayTLSOptions
	gc                      gctune.Flags
	zap                     zap.Options
	// tracerProvider comes from the OTEL_* environment, not from a flag.
	tracerProvider trace.TracerProvider
}

// stdioOptions choose where stdio servers run; see docs/design.md,
// "Choosing a runtime".
type stdioOptions struct {
	localNamespaces []string
	shimImage       string
	// managerPodLabels and managerNamespace select the manager's own Pods,
	// which a server Pod's NetworkPolicy admits to the shim.
	managerPodLabels map[string]string
	managerNamespace string
	nodeImage        string
	pythonImage      string
}

// defaultShimImage is the operator's own published image, which holds the
// shim at /shim; the chart and config/default pass the image they deploy.
const defaultShimImage = "ghcr.io/mcpbridge/operator:0.1.0"

// parseOptions defines every flag on fs and parses args. The flags and
// their defaults follow a kubebuilder manager's where one exists, so that
// what users know from other operators works here; see docs/design.md,
// "Flags".
func parseOptions(fs *flag.FlagSet, args []string) (*options, error) {
	o := &options{}
	var namespaces, audiences, allowCIDRs, clusterCIDRs string
	// --kubeconfig belongs to controller-runtime's config loader, which
	// reads it when it is registered on the FlagSet that is parsed.
	config.RegisterFlags(fs)
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", "0",
		"Address the Prometheus metrics endpoint binds to, e.g. :8443 for HTTPS or :8080 for HTTP; 0 disables it.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS to callers whose bearer token passes a TokenReview and a SubjectAccessReview "+
			"for GET /metrics (the ClusterRole metrics-reader grants it); --metrics-secure=false serves plain HTTP to anyone.")
	fs.StringVar(&o.metricsCertPath, "metrics-cert-path", "",
		"Directory with the metrics server's certificate and key, reloaded when they change; empty uses a self-signed certificate.")
	fs.StringVar(&o.metricsCertName, "metrics-cert-name", "tls.crt",
		"File name of the metrics server's certificate in --metrics-cert-path.")
	fs.StringVar(&o.metricsCertKey, "metrics-cert-key", "tls.key",
		"File name of the metrics server's private key in --metrics-cert-path.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false,
		"Offer HTTP/2 on the metrics server's TLS listener; off by default because of the HTTP/2 "+
			"Stream Cancellation and Rapid Reset vulnerabilities (CVE-2023-44487, CVE-2023-39325).")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081",
		"Address the /healthz and /readyz probes bind to.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"Elect a leader so that only one manager runs supervisors and the gateway.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader election Lease; empty is the manager's own namespace, which is only known in a cluster.")
	fs.StringVar(&o.gatewayAddr, "gateway-bind-address", ":8090",
		"Address the MCP gateway (/namespaces/{namespace}/mcp) binds to.")
	fs.StringVar(&o.gatewayAuth, "gateway-auth", gatewayAuthToken,
		"Gateway authentication: 'token' (TokenReview + SubjectAccessReview) or 'none' (loopback only).")
	fs.StringVar(&audiences, "gateway-token-audiences", defaultGatewayAudience,
		"Comma-separated audiences a gateway token must be valid for (kubectl create token SA --audience "+defaultGatewayAudience+
			"); a token made for the apiserver is refused, so that tokens that work against the apiserver do not work here and the other way round.")
	fs.StringVar(&namespaces, "watch-namespaces", "",
		"Comma-separated namespaces to watch; empty watches all namespaces.")
	fs.StringVar(&allowCIDRs, strings.TrimPrefix(egress.AllowFlag, "--"), "",
		"Comma-separated CIDRs that Streamable HTTP upstreams may be reached at although they are loopback, link-local, "+
			"unspecified, multicast, metadata (100.100.100.200, fd00:ec2::254) or NAT64 (64:ff9b::/96) addresses, or "+
			"addresses of another namespace's Pods and Services, which are refused otherwise; e.g. 127.0.0.0/8,::1/128 for local development.")
	fs.StringVar(&clusterCIDRs, strings.TrimPrefix(egress.ClusterFlag, "--"), prefixList(egress.DefaultClusterCIDRs),
		"Comma-separated CIDRs of the cluster's Pod and Service networks: an upstream address in them is looked up "+
			"(Pods by status.podIP, Services by spec.clusterIP) and refused when it belongs to another namespace than the McpServer's.")
	localStdio, managerLabels := o.stdio.bindFlags(fs)
	bindLimitFlags(fs, &o.limits)
	o.budgets.bindFlags(fs)
	o.replicas.bindFlags(fs)
	o.authLimits.bindFlags(fs)
	o.sessionKeys.bindFlags(fs)
	// The gateway's TLS (gatewaytls.go).
	gatewayDNSNames := o.gatewayTLS.bindFlags(fs)
	o.gc.BindFlags(fs)
	o.zap.BindFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\nRuns the mcp-bridge operator: the McpServer controller, "+
			"its connection supervisors and the MCP gateway.\n\nFlags:\n", fs.Name())
		fs.PrintDefaults()
	}
	err := fs.Parse(args)
	if err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: every option is a --flag", fs.Args())
	}
	o.watchNamespaces = splitList(namespaces)
	o.stdio.localNamespaces = splitList(*localStdio)
	if o.stdio.managerPodLabels, err = labels.ConvertSelectorToLabelsMap(*managerLabels); err != nil || len(o.stdio.managerPodLabels) == 0 {
		return nil, fmt.Errorf("--manager-pod-labels=%q: want labels such as app.kubernetes.io/component=manager", *managerLabels)
	}
	if o.stdio.managerNamespace == "" {
		o.stdio.managerNamespace = inClusterNamespace()
	}
	if err := o.replicas.resolve(o.leaderElectionNamespace, o.stdio.managerNamespace, inClusterNamespace() != ""); err != nil {
		return nil, err
	}
	o.gatewayAudiences = splitList(audiences)
	if o.upstreamAllowCIDRs, err = egress.ParseCIDRs(allowCIDRs); err != nil {
		return nil, fmt.Errorf("%s: %w", egress.AllowFlag, err)
	}
	if o.clusterCIDRs, err = egress.ParseCIDRs(clusterCIDRs); err != nil {
		return nil, fmt.Errorf("%s: %w", egress.ClusterFlag, err)
	}
	if err := o.gatewayTLS.resolve(splitList(*gatewayDNSNames), o.stdio.managerNamespace); err != nil {
		return nil, err
	}
	return o, o.validate()
}

// bindFlags defines the runtime flags; the namespace list is split after
// parsing.
func (o *stdioOptions) bindFlags(fs *flag.FlagSet) (localNamespaces, managerLabels *string) {
	local := fs.String("local-stdio-namespaces", "",
		"Comma-separated namespaces whose stdio servers without spec.stdio.image run as child processes of the manager "+
			"(the Local runtime), '*' for every namespace; empty (the default) runs every stdio server in a Pod of its own. "+
			"Allow only namespaces whose McpServer authors you trust with the manager's privileges.")
	fs.StringVar(&o.shimImage, "shim-image", defaultShimImage,
		"Image the Pod of a stdio server copies the shim (/shim) from: the operator's own image.")
	fs.StringVar(&o.nodeImage, "node-image", policy.DefaultNodeImage,
		"Default image of stdio servers whose command is npx or node and that set no spec.stdio.image.")
	fs.StringVar(&o.pythonImage, "python-image", policy.DefaultPythonImage,
		"Default image of stdio servers whose command is uvx, uv, python or python3 and that set no spec.stdio.image.")
	managerLabels = fs.String("manager-pod-labels", defaultManagerPodLabels,
		"Comma-separated labels (k=v) of the manager's own Pods: the NetworkPolicy of each stdio server's Pod admits "+
			"the shim's port only from Pods with these labels in --manager-namespace.")
	fs.StringVar(&o.managerNamespace, "manager-namespace", "",
		"Namespace of the manager's Pods for the server Pods' NetworkPolicies; empty is the manager's own namespace in a cluster, "+
			"and every namespace outside one.")
	return local, managerLabels
}

// defaultManagerPodLabels is the label config/default and the chart give
// the manager's Pods.
const defaultManagerPodLabels = "app.kubernetes.io/component=manager"

// serviceAccountNamespaceFile is where a Pod finds its own namespace (a
// variable so that tests decide whether they run in a Pod).
var serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// inClusterNamespace is the manager Pod's namespace, or "" outside a cluster.
func inClusterNamespace() string {
	b, err := os.ReadFile(serviceAccountNamespaceFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// validate refuses image references the kubelet could not pull.
func (o *stdioOptions) validate() error {
	for _, f := range []struct{ flag, image string }{
		{"shim-image", o.shimImage}, {"node-image", o.nodeImage}, {"python-image", o.pythonImage},
	} {
		if _, err := reference.ParseNormalizedNamed(f.image); err != nil {
			return fmt.Errorf("--%s=%q is not an image reference: %w", f.flag, f.image, err)
		}
	}
	return nil
}

// podRuntime is the Pod renderer's view of the flags.
func (o *stdioOptions) podRuntime() podruntime.Options {
	return podruntime.Options{ShimImage: o.shimImage, ManagerPodLabels: o.managerPodLabels, ManagerNamespace: o.managerNamespace}
}

// runtimeConfig is the resolve step's view of the flags.
func (o *options) runtimeConfig() policy.RuntimeConfig {
	rc := o.stdio.runtimeConfig()
	rc.Limits = o.limits
	return rc
}

// runtimeConfig is the resolve step's view of the runtime flags.
func (o *stdioOptions) runtimeConfig() policy.RuntimeConfig {
	return policy.RuntimeConfig{LocalNamespaces: o.localNamespaces, NodeImage: o.nodeImage, PythonImage: o.pythonImage}
}

// bindLimitFlags defines the floors and ceilings on specs' timings; see
// docs/design.md, "Limits".
func bindLimitFlags(fs *flag.FlagSet, l *policy.Limits) {
	fs.DurationVar(&l.MinReconnectDelay, flagName(policy.FlagMinReconnectDelay), policy.DefaultMinReconnectDelay,
		"Least spec.reconnect.initialDelayMs and maxDelayMs an McpServer may set (a shorter one is Invalid); 0 sets no floor.")
	fs.DurationVar(&l.MinHealthCheckInterval, flagName(policy.FlagMinHealthCheckInterval), policy.DefaultMinHealthCheckInterval,
		"Least non-zero spec.healthCheckIntervalMs an McpServer may set (0, no health check, stays allowed); 0 sets no floor.")
	fs.DurationVar(&l.MaxToolCallTimeout, flagName(policy.FlagMaxToolCallTimeout), policy.DefaultMaxToolCallTimeout,
		"Most spec.toolCallTimeoutMs an McpServer may set (a longer one is Invalid); 0 sets no ceiling.")
	fs.DurationVar(&l.MaxConnectionTimeout, flagName(policy.FlagMaxConnectionTimeout), policy.DefaultMaxConnectionTimeout,
		"Most spec.connectionTimeoutMs an McpServer may set (a longer one is Invalid); 0 sets no ceiling.")
}

func flagName(flag string) string { return strings.TrimPrefix(flag, "--") }

// validateLimits refuses negative bounds, which would bound nothing while
// looking as if they did.
func validateLimits(l policy.Limits) error {
	for _, f := range []struct {
		flag string
		v    time.Duration
	}{
		{policy.FlagMinReconnectDelay, l.MinReconnectDelay}, {policy.FlagMinHealthCheckInterval, l.MinHealthCheckInterval},
		{policy.FlagMaxToolCallTimeout, l.MaxToolCallTimeout}, {policy.FlagMaxConnectionTimeout, l.MaxConnectionTimeout},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s=%s must not be negative (0 sets no bound)", f.flag, f.v)
		}
	}
	return nil
}

func (o *options) validate() error {
	switch o.gatewayAuth {
	case gatewayAuthToken:
	case gatewayAuthNone:
		if !isLoopback(o.gatewayAddr) {
			return fmt.Errorf("--gateway-auth=none is only allowed when --gateway-bind-address is a loopback address, not %q", o.gatewayAddr)
		}
	default:
		return fmt.Errorf("--gateway-auth must be %q or %q, not %q", gatewayAuthToken, gatewayAuthNone, o.gatewayAuth)
	}
	if o.gatewayAuth == gatewayAuthToken && len(o.gatewayAudiences) == 0 {
		return fmt.Errorf("--gateway-token-audiences must name at least one audience (default %q)", defaultGatewayAudience)
	}
	if o.metricsCertPath != "" && !o.metricsSecure {
		return fmt.Errorf("--metrics-cert-path=%s needs --metrics-secure: a plain HTTP metrics server has no certificate", o.metricsCertPath)
	}
	if o.leaderElectionNamespace != "" && !o.leaderElect {
		return fmt.Errorf("--leader-election-namespace=%s needs --leader-elect", o.leaderElectionNamespace)
	}
	if err := validateLimits(o.limits); err != nil {
		return err
	}
	if err := o.sessionKeys.validate(); err != nil {
		return err
	}
	if err := o.budgets.validate(); err != nil {
		return err
	}
	if err := o.authLimits.validate(); err != nil {
		return err
	}
	if err := o.gc.Validate(); err != nil {
		return err
	}
	return o.stdio.validate()
}

// isLoopback is true only for an explicit loopback host: an empty host
// binds every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// prefixList is the comma-separated form of prefixes, as the CIDR flags
// take them.
func prefixList(prefixes []netip.Prefix) string {
	s := make([]string, len(prefixes))
	for i, p := range prefixes {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
