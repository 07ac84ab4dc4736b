package certs

import (
	"context"
	"crypto/x509"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// cas hands out the CAs a test puts in, as a CA Secret would after being
// replaced, failing while it holds none.
type cas struct {
	mu    sync.Mutex
	ca    *CA
	loads int
}

func (c *cas) set(ca *CA) { c.mu.Lock(); c.ca = ca; c.mu.Unlock() }

func (c *cas) load(context.Context, time.Time) (*CA, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loads++
	if c.ca == nil {
		return nil, errors.New("no CA yet")
	}
	return c.ca, nil
}

func served(g Gomega, s *ServingCert) *x509.Certificate {
	c, err := s.GetCertificate(nil)
	g.Expect(err).NotTo(HaveOccurred())
	x, err := x509.ParseCertificate(c.Certificate[0])
	g.Expect(err).NotTo(HaveOccurred())
	return x
}

// TestServingCertRotatesBeforeExpiry: a certificate RenewBefore its expiry
// is replaced by one from the CA then loaded, which GetCertificate serves
// without anyone restarting anything; OnCA hears of each CA.
func TestServingCertRotatesBeforeExpiry(t *testing.T) {
	g := NewWithT(t)
	first, err := NewCA("first", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	second, err := NewCA("second", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	src := &cas{}
	var mu sync.Mutex
	var heard []string
	s := &ServingCert{Load: src.load, RenewBefore: 9 * time.Second, RetryDelay: 10 * time.Millisecond,
		Request: Request{CommonName: "gw", DNSNames: []string{"gw"}, Validity: 10 * time.Second},
		OnCA:    func(ca *CA) { mu.Lock(); heard = append(heard, ca.Cert.Subject.CommonName); mu.Unlock() }}
	_, err = s.GetCertificate(nil)
	g.Expect(err).To(MatchError(ErrNotIssued))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Start(ctx) }()
	defer func() { cancel(); g.Expect(<-done).To(Succeed()) }()

	// Without a CA it retries; with one, it serves.
	g.Eventually(func() int { src.mu.Lock(); defer src.mu.Unlock(); return src.loads }).Should(BeNumerically(">", 1))
	g.Consistently(s.Issued(), 50*time.Millisecond).ShouldNot(BeClosed())
	src.set(first)
	g.Eventually(s.Issued()).Should(BeClosed())
	cert := served(g, s)
	asClient, err := s.GetClientCertificate(nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(asClient.Leaf.Equal(cert)).To(BeTrue(), "a client presents the certificate a server serves")
	g.Expect(cert.Verify(x509.VerifyOptions{Roots: first.Pool(), DNSName: "gw"})).Error().NotTo(HaveOccurred())
	g.Expect(s.CA().Cert.Equal(first.Cert)).To(BeTrue())

	// A second later (the validity less the margin) comes a new one, from
	// the CA the source now holds.
	src.set(second)
	g.Eventually(func(g Gomega) {
		now := served(g, s)
		g.Expect(now.SerialNumber).NotTo(Equal(cert.SerialNumber))
		g.Expect(now.Verify(x509.VerifyOptions{Roots: second.Pool(), DNSName: "gw"})).Error().NotTo(HaveOccurred())
	}).WithTimeout(10 * time.Second).Should(Succeed())
	// OnCA is called after the new certificate is stored.
	g.Eventually(func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(heard) }).Should(ContainElement("second"))
	mu.Lock()
	defer mu.Unlock()
	g.Expect(heard).To(ContainElements("first", "second"))
	g.Expect(heard).To(HaveExactElements(append(slices.Repeat([]string{"first"}, slices.Index(heard, "second")),
		slices.Repeat([]string{"second"}, len(heard)-slices.Index(heard, "second"))...)), "each CA heard, in order")
}
