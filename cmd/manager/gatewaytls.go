package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/internal/certs"
)

// The gateway's own CA: a Secret in the manager's namespace and, in every
// watched namespace, a ConfigMap with its certificate for agents.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create;update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create

const (
	// gatewayCAName names the CA Secret in the manager's namespace and
	// the ConfigMap that publishes its certificate in each watched one.
	gatewayCAName = "mcpbridge-gateway-ca"
	// defaultGatewayServiceName is config/default's gateway Service, whose
	// names the certificate carries unless --gateway-dns-names says others.
	defaultGatewayServiceName = "mcpbridge-gateway"
	gatewayCAValidity         = 10 * 365 * 24 * time.Hour
)

// gatewayTLSOptions choose how the gateway serves TLS; see docs/design.md,
// "The gateway" (TLS). The rule: TLS unless --gateway-tls=false; the
// certificate from --gateway-cert-dir when given, else one the manager
// issues from its own CA.
type gatewayTLSOptions struct {
	enabled     bool
	certDir     string
	dnsNames    []string
	validity    time.Duration
	renewBefore time.Duration
}

// bindFlags defines the gateway TLS flags; the DNS names are split after
// parsing.
func (o *gatewayTLSOptions) bindFlags(fs *flag.FlagSet) (dnsNames *string) {
	fs.BoolVar(&o.enabled, "gateway-tls", true,
		"Serve the gateway over HTTPS: with --gateway-cert-dir's certificate, or else one the manager issues from a CA "+
			"it keeps in the Secret "+gatewayCAName+" of its namespace and publishes as ca.crt in the ConfigMap "+gatewayCAName+
			" of every watched namespace. --gateway-tls=false serves plain HTTP (local development, or a mesh that encrypts).")
	fs.StringVar(&o.certDir, "gateway-cert-dir", "",
		"Directory with the gateway's tls.crt and tls.key (e.g. a cert-manager Secret), reloaded when they change; "+
			"empty serves a certificate the manager issues itself (see --gateway-tls).")
	dnsNames = fs.String("gateway-dns-names", "",
		"Comma-separated DNS names of the gateway's issued certificate (besides localhost, 127.0.0.1 and ::1); "+
			"empty is the Service "+defaultGatewayServiceName+" in --manager-namespace (name, name.namespace, name.namespace.svc, "+
			"name.namespace.svc.cluster.local).")
	fs.DurationVar(&o.validity, "gateway-cert-validity", 90*24*time.Hour,
		"Validity of each certificate the manager issues for the gateway.")
	fs.DurationVar(&o.renewBefore, "gateway-cert-renew-before", 30*24*time.Hour,
		"How long before its expiry an issued gateway certificate is replaced (without a restart); less than --gateway-cert-validity.")
	return dnsNames
}

// selfIssued: TLS with a certificate of the manager's own CA.
func (o *gatewayTLSOptions) selfIssued() bool { return o.enabled && o.certDir == "" }

// resolve fills the default DNS names and checks the flags together.
func (o *gatewayTLSOptions) resolve(dnsNames []string, managerNamespace string) error {
	if !o.enabled && o.certDir != "" {
		return fmt.Errorf("--gateway-cert-dir=%s needs --gateway-tls: plain HTTP has no certificate", o.certDir)
	}
	if !o.selfIssued() {
		return nil
	}
	if o.validity <= 0 || o.renewBefore <= 0 || o.renewBefore >= o.validity {
		return fmt.Errorf("--gateway-cert-renew-before=%s must be positive and less than --gateway-cert-validity=%s", o.renewBefore, o.validity)
	}
	o.dnsNames = dnsNames
	if len(o.dnsNames) == 0 && managerNamespace != "" {
		s, ns := defaultGatewayServiceName, managerNamespace
		o.dnsNames = []string{s, s + "." + ns, s + "." + ns + ".svc", s + "." + ns + ".svc.cluster.local"}
	}
	return nil
}

// gatewayCertificate returns the gateway's GetCertificate, having added to
// the manager what keeps it current: a watcher of --gateway-cert-dir, or
// the issued certificate and the publisher of its CA. nil means plain HTTP.
func gatewayCertificate(mgr ctrl.Manager, opts *options) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	o := &opts.gatewayTLS
	switch {
	case !o.enabled:
		return nil, nil
	case o.certDir != "":
		w, err := certwatcher.New(filepath.Join(o.certDir, "tls.crt"), filepath.Join(o.certDir, "tls.key"))
		if err != nil {
			return nil, fmt.Errorf("load the gateway certificate from --gateway-cert-dir=%s: %w", o.certDir, err)
		}
		if err := mgr.Add(w); err != nil {
			return nil, fmt.Errorf("watch the gateway certificate: %w", err)
		}
		return w.GetCertificate, nil
	}
	if opts.stdio.managerNamespace == "" {
		return nil, errors.New("the gateway's CA Secret needs the manager's namespace: outside a cluster pass --manager-namespace " +
			"(or --gateway-cert-dir, or --gateway-tls=false)")
	}
	labels := map[string]string{"app.kubernetes.io/name": "mcpbridge", "app.kubernetes.io/component": "gateway-ca"}
	secret := &certs.CASecret{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(),
		Key:        client.ObjectKey{Namespace: opts.stdio.managerNamespace, Name: gatewayCAName},
		CommonName: "mcpbridge gateway CA", Validity: gatewayCAValidity, Labels: labels}
	pub := &certs.Publisher{Reader: mgr.GetAPIReader(), Client: mgr.GetClient(), Name: gatewayCAName, Labels: labels,
		Namespaces: opts.watchNamespaces}
	serving := &certs.ServingCert{
		Load: secret.Load,
		Request: certs.Request{CommonName: "mcpbridge gateway", DNSNames: append([]string{"localhost"}, o.dnsNames...),
			IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, Usage: certs.ServerAuth, Validity: o.validity},
		RenewBefore: o.renewBefore,
		OnCA:        pub.CAChanged,
	}
	pub.CA = serving.CA
	if err := mgr.Add(serving); err != nil {
		return nil, fmt.Errorf("issue the gateway certificate: %w", err)
	}
	if err := pub.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("publish the gateway CA: %w", err)
	}
	return serving.GetCertificate, nil
}
