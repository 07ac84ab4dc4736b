package main

import (
	"flag"
	"fmt"
	"net"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Gateway authentication modes of --gateway-auth.
const (
	gatewayAuthToken = "token"
	gatewayAuthNone  = "none"
)

type options struct {
	metricsAddr     string
	probeAddr       string
	leaderElect     bool
	gatewayAddr     string
	gatewayAuth     string
	watchNamespaces []string
	zap             zap.Options
}

func parseOptions(fs *flag.FlagSet, args []string) (*options, error) {
	o := &options{}
	var namespaces string
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080",
		"Address the Prometheus metrics endpoint binds to; 0 disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081",
		"Address the /healthz and /readyz probes bind to.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"Elect a leader so that only one manager runs supervisors and the gateway.")
	fs.StringVar(&o.gatewayAddr, "gateway-bind-address", ":8090",
		"Address the MCP gateway (/namespaces/{namespace}/mcp) binds to.")
	fs.StringVar(&o.gatewayAuth, "gateway-auth", gatewayAuthToken,
		"Gateway authentication: 'token' (TokenReview + SubjectAccessReview) or 'none' (loopback only).")
	fs.StringVar(&namespaces, "watch-namespaces", "",
		"Comma-separated namespaces to watch; empty watches all namespaces.")
	o.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.watchNamespaces = splitList(namespaces)
	return o, o.validate()
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
	return nil
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
