package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/mcpbridge/operator/internal/certs"
)

// With -tls the gateway serves HTTPS as the manager does by default, with
// a certificate of a CA the bench makes for the run; the agents' processes
// trust that CA alone (-ca), so that every new connection of theirs costs
// the gateway a full TLS handshake, as an agent's would.

// gatewayTLS makes the run's CA and the gateway's certificate for
// 127.0.0.1, and writes the CA's certificate to dir for the agents.
func gatewayTLS(dir string) (*tls.Config, string, error) {
	now := time.Now()
	ca, err := certs.NewCA("isolation-bench", time.Hour, now)
	if err != nil {
		return nil, "", err
	}
	kp, err := ca.Issue(certs.Request{CommonName: "gateway", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: time.Hour}, now)
	if err != nil {
		return nil, "", err
	}
	cert, err := kp.TLSCertificate()
	if err != nil {
		return nil, "", err
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		return nil, "", err
	}
	return &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}, caFile, nil
}

// agentTransport is a transport of an agent's process: trusting -ca when
// it is set.
func agentTransport() *http.Transport {
	tr := &http.Transport{}
	if *flagCA == "" {
		return tr
	}
	pem, err := os.ReadFile(*flagCA)
	if err != nil {
		fmt.Fprintln(os.Stderr, "isolation:", err)
		os.Exit(1)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		fmt.Fprintln(os.Stderr, "isolation: no certificate in", *flagCA)
		os.Exit(1)
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return tr
}
