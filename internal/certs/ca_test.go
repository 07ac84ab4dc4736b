package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"
)

func newTestCA(t *testing.T, validity time.Duration, now time.Time) *CA {
	t.Helper()
	ca, err := NewCA("test CA", validity, now)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func leaf(t *testing.T, p KeyPair) *x509.Certificate {
	t.Helper()
	c, err := p.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	x, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestIssuedCertificatesVerifyAgainstTheCAOnly: a certificate verifies
// for its names and usage with a pool of its CA and nothing else.
func TestIssuedCertificatesVerifyAgainstTheCAOnly(t *testing.T) {
	now := time.Now()
	ca, other := newTestCA(t, 24*time.Hour, now), newTestCA(t, 24*time.Hour, now)
	server := Request{CommonName: "gw", DNSNames: []string{"localhost", "gw.ops.svc"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: time.Hour}
	client := Request{CommonName: "peer", DNSNames: []string{"peer"}, Usage: ClientAuth, Validity: time.Hour}
	both := Request{CommonName: "replica", DNSNames: []string{"replica"}, Usage: ServerAndClientAuth, Validity: time.Hour}
	cases := []struct {
		name    string
		req     Request
		pool    *x509.CertPool
		dnsName string
		usage   x509.ExtKeyUsage
		wantErr string
	}{
		{"server name", server, ca.Pool(), "gw.ops.svc", x509.ExtKeyUsageServerAuth, ""},
		{"server loopback IP", server, ca.Pool(), "127.0.0.1", x509.ExtKeyUsageServerAuth, ""},
		{"server, a name it lacks", server, ca.Pool(), "evil.example", x509.ExtKeyUsageServerAuth, "valid for"},
		{"server, another CA", server, other.Pool(), "gw.ops.svc", x509.ExtKeyUsageServerAuth, "unknown authority"},
		{"server used as client", server, ca.Pool(), "", x509.ExtKeyUsageClientAuth, "incompatible key usage"},
		{"client", client, ca.Pool(), "", x509.ExtKeyUsageClientAuth, ""},
		{"client used as server", client, ca.Pool(), "peer", x509.ExtKeyUsageServerAuth, "incompatible key usage"},
		{"server and client, as server", both, ca.Pool(), "replica", x509.ExtKeyUsageServerAuth, ""},
		{"server and client, as client", both, ca.Pool(), "", x509.ExtKeyUsageClientAuth, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ca.Issue(tc.req, now)
			if err != nil {
				t.Fatal(err)
			}
			_, err = leaf(t, p).Verify(x509.VerifyOptions{Roots: tc.pool, DNSName: tc.dnsName, KeyUsages: []x509.ExtKeyUsage{tc.usage}, CurrentTime: now})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("verify: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("verify error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestIssueValidity: a certificate is valid for its request's validity,
// never beyond its CA, and none is issued from an expired CA.
func TestIssueValidity(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	ca := newTestCA(t, 10*time.Hour, now)
	cases := []struct {
		name     string
		validity time.Duration
		at       time.Time
		want     time.Time
		wantErr  string
	}{
		{"within the CA", time.Hour, now, now.Add(time.Hour), ""},
		{"capped at the CA", 100 * time.Hour, now, ca.Cert.NotAfter, ""},
		{"expired CA", time.Hour, now.Add(11 * time.Hour), time.Time{}, "expired"},
		{"no validity", 0, now, time.Time{}, "must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ca.Issue(Request{CommonName: "x", Validity: tc.validity}, tc.at)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := leaf(t, p).NotAfter; !got.Equal(tc.want) || !p.NotAfter.Equal(tc.want) {
				t.Errorf("NotAfter %s (pair %s), want %s", got, p.NotAfter, tc.want)
			}
		})
	}
}

// TestParseCA: a CA round-trips through PEM; a leaf or a foreign key is
// refused.
func TestParseCA(t *testing.T) {
	now := time.Now()
	ca, other := newTestCA(t, time.Hour, now), newTestCA(t, time.Hour, now)
	p, err := ca.Issue(Request{CommonName: "leaf", Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	leafPEM, _ := pem.Decode(p.CertPEM)
	cases := []struct {
		name      string
		cert, key []byte
		wantErr   string
	}{
		{"the CA", ca.CertPEM, ca.KeyPEM, ""},
		{"a leaf", pem.EncodeToMemory(leafPEM), p.KeyPEM, "not a CA"},
		{"another CA's key", ca.CertPEM, other.KeyPEM, "parse the CA"},
		{"nothing", nil, nil, "parse the CA"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCA(tc.cert, tc.key)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// What the parsed CA signs verifies against the original.
			p, err := got.Issue(Request{CommonName: "again", DNSNames: []string{"again"}, Validity: time.Hour}, now)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := leaf(t, p).Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "again", CurrentTime: now}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTLSCertificateCarriesTheChain: a server sends its CA after its leaf.
func TestTLSCertificateCarriesTheChain(t *testing.T) {
	now := time.Now()
	ca := newTestCA(t, time.Hour, now)
	p, err := ca.Issue(Request{CommonName: "gw", Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Certificate) != 2 || string(c.Certificate[1]) != string(ca.Cert.Raw) {
		t.Fatalf("chain of %d certificates, want leaf and CA", len(c.Certificate))
	}
	var _ tls.Certificate = *c
}
