package peer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"sync"
	"sync/atomic"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mcpbridge/operator/internal/certs"
)

// DefaultCASecretName names the replicas' CA Secret in the manager's
// namespace. It is not the gateway's CA: that one's certificate is
// published to every tenant, and nothing a tenant trusts may open the
// replicas' endpoint.
const DefaultCASecretName = "mcpbridge-replica-ca"

// ServerName is the DNS name every replica's certificate carries and every
// client verifies. Replicas dial each other at Pod IPs, which change; what
// matters is that the far end holds a certificate of the replicas' CA.
const ServerName = "replica.mcpbridge.internal"

// The replicas' CA and certificates. A certificate is short-lived and
// re-issued every hour without a restart, each time from the CA the Secret
// then holds, so that a replaced CA reaches every replica within the hour;
// the CA outlives every install.
const (
	caValidity             = 10 * 365 * 24 * time.Hour
	defaultCertValidity    = 2 * time.Hour
	defaultCertRenewBefore = time.Hour
	defaultCertRetryDelay  = 10 * time.Second
	caCommonName           = "mcpbridge replica CA"
)

// lastCA loads the CA from its Secret and, when the apiserver cannot be
// read, returns the CA it last loaded: an apiserver out of reach then
// delays a change of CA, not the replica's next certificate.
type lastCA struct {
	load func(ctx context.Context, now time.Time) (*certs.CA, error)
	mu   sync.Mutex
	last *certs.CA
}

func (l *lastCA) Load(ctx context.Context, now time.Time) (*certs.CA, error) {
	ca, err := l.load(ctx, now)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.last = ca
		return ca, nil
	case l.last != nil:
		ctrl.LoggerFrom(ctx).Error(err, "cannot load the replicas' CA; issuing the replica's certificate from the CA last loaded")
		return l.last, nil
	}
	return nil, err
}

// identity is a replica's certificate and the trust that goes with it:
// peers whose certificate the CA of its own current certificate signed.
type identity struct {
	cert *certs.ServingCert
	// trusted caches the pool of the CA last seen, so that a handshake
	// does not build one.
	trusted atomic.Pointer[caPool]
}

type caPool struct {
	ca   *certs.CA
	pool *x509.CertPool
}

// pool trusts the CA of the current certificate only; none before the
// first is issued.
func (id *identity) pool() (*x509.CertPool, error) {
	ca := id.cert.CA()
	if ca == nil {
		return nil, certs.ErrNotIssued
	}
	if p := id.trusted.Load(); p != nil && p.ca == ca {
		return p.pool, nil
	}
	p := &caPool{ca: ca, pool: ca.Pool()}
	id.trusted.Store(p)
	return p.pool, nil
}

// serverTLS requires and verifies a client certificate of the replicas'
// CA at every handshake: a client without one, or with one of any other
// CA (the gateway's included), is refused before a request is read.
// Replicas speak HTTP/2: at shutdown its GOAWAY tells a client which calls
// the endpoint never started, and the client sends those again elsewhere,
// where HTTP/1.1 can only close a kept-alive connection under a call
// already on its way (docs/design.md, "Forwarding between replicas").
// HTTP/1.1 is accepted too, for a person with curl and a replica's
// certificate.
func (id *identity) serverTLS() *tls.Config {
	base := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		ClientAuth:     tls.RequireAndVerifyClientCert,
		GetCertificate: id.cert.GetCertificate,
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The pool is the current CA's, chosen per connection.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			pool, err := id.pool()
			if err != nil {
				return nil, err
			}
			c := base.Clone()
			c.ClientCAs = pool
			return c, nil
		},
	}
}

// clientTLS is the configuration of one dial: HTTP/2, the replica's
// current certificate as its client certificate, and the far end verified
// as a replica (ServerName, signed by the current CA).
func (id *identity) clientTLS() (*tls.Config, error) {
	pool, err := id.pool()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		NextProtos:           []string{"h2", "http/1.1"},
		RootCAs:              pool,
		ServerName:           ServerName,
		GetClientCertificate: id.cert.GetClientCertificate,
	}, nil
}
