package certs

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
)

// ServingCert keeps a serving certificate current: Start issues one from
// the CA that Load returns and re-issues it RenewBefore its expiry, loading
// the CA again each time (so that a replaced CA Secret takes effect), and
// GetCertificate hands the current one to every new TLS handshake.
type ServingCert struct {
	// Load returns the CA to issue from (CASecret.Load).
	Load func(ctx context.Context, now time.Time) (*CA, error)
	// Request is the certificate to issue; its Validity must exceed
	// RenewBefore.
	Request Request
	// RenewBefore is how long before expiry the certificate is replaced.
	RenewBefore time.Duration
	// RetryDelay is the wait after a failed issue; 0 means 10 seconds.
	RetryDelay time.Duration
	// OnCA, if set, is called with the CA of every certificate issued, for
	// publishers of the CA's certificate.
	OnCA func(*CA)

	mu      sync.RWMutex
	current *tls.Certificate
	ca      *CA
	issued  chan struct{} // closed by the first successful issue
	once    sync.Once
}

// ErrNotIssued: a handshake came before the first certificate was issued.
var ErrNotIssued = errors.New("the serving certificate is not issued yet")

// GetCertificate is tls.Config's callback: the current certificate.
func (s *ServingCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.current == nil {
		return nil, ErrNotIssued
	}
	return s.current, nil
}

// GetClientCertificate is the same certificate as tls.Config's client
// callback, for peers that dial each other with a certificate of
// ServerAndClientAuth usage (mutual TLS between the manager's replicas).
func (s *ServingCert) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return s.GetCertificate(nil)
}

// CA is the CA of the current certificate, nil before the first issue.
func (s *ServingCert) CA() *CA {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ca
}

// Issued is closed once the first certificate is served.
func (s *ServingCert) Issued() <-chan struct{} {
	s.once.Do(func() { s.issued = make(chan struct{}) })
	return s.issued
}

// NeedLeaderElection is false: every replica serves TLS, leading or not.
func (s *ServingCert) NeedLeaderElection() bool { return false }

// Start issues the certificate and keeps it current until ctx ends.
func (s *ServingCert) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("certs").WithValues("commonName", s.Request.CommonName)
	retry := s.RetryDelay
	if retry <= 0 {
		retry = 10 * time.Second
	}
	for {
		wait := retry
		notAfter, err := s.issue(ctx)
		if err != nil {
			logger.Error(err, "cannot issue the serving certificate; retrying", "retryIn", retry)
		} else {
			// At least a second: a renewal margin as long as the validity
			// must not spin.
			wait = max(time.Until(notAfter.Add(-s.RenewBefore)), time.Second)
			logger.Info("serving a new certificate", "notAfter", notAfter.UTC().Format(time.RFC3339), "renewIn", wait.Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// issue loads the CA, issues a certificate and makes it current.
func (s *ServingCert) issue(ctx context.Context) (time.Time, error) {
	now := time.Now()
	ca, err := s.Load(ctx, now)
	if err != nil {
		return time.Time{}, err
	}
	pair, err := ca.Issue(s.Request, now)
	if err != nil {
		return time.Time{}, err
	}
	cert, err := pair.TLSCertificate()
	if err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	s.current, s.ca = cert, ca
	s.mu.Unlock()
	if s.OnCA != nil {
		s.OnCA(ca)
	}
	s.Issued()
	select {
	case <-s.issued:
	default:
		close(s.issued)
	}
	return pair.NotAfter, nil
}
