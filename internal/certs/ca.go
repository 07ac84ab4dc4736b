package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// clockSkew backdates every certificate so that a peer whose clock is a
// little behind the manager's accepts it at once.
const clockSkew = 5 * time.Minute

// CA is a certificate authority: its certificate and the key it signs with.
type CA struct {
	Cert *x509.Certificate
	key  crypto.Signer
	// CertPEM and KeyPEM are the CA as its Secret stores it.
	CertPEM, KeyPEM []byte
}

// NewCA makes a self-signed CA named commonName, valid for validity from
// now.
func NewCA(commonName string, validity time.Duration, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the CA's key: %w", err)
	}
	tmpl, err := template(commonName, now, now.Add(validity))
	if err != nil {
		return nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.MaxPathLenZero = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("sign the CA's certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return ParseCA(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM)
}

// ParseCA reads a CA from PEM (a CERTIFICATE and a PKCS#8, EC or RSA
// private key), refusing a certificate that is no CA or a key that is not
// its own.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parse the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parse the CA's certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("the CA's certificate is not a CA (basic constraints)")
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("the CA's key (%T) cannot sign", pair.PrivateKey)
	}
	return &CA{Cert: cert, key: signer, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Usage is what an issued certificate is for.
type Usage int

const (
	// ServerAuth: a TLS server's certificate.
	ServerAuth Usage = iota
	// ClientAuth: a TLS client's certificate, for mutual TLS.
	ClientAuth
	// ServerAndClientAuth: both, for peers that dial each other.
	ServerAndClientAuth
)

// Request describes a leaf certificate to issue.
type Request struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	Usage      Usage
	// Validity is how long from now the certificate is valid; it never
	// outlives the CA.
	Validity time.Duration
}

// KeyPair is an issued certificate and its key.
type KeyPair struct {
	CertPEM, KeyPEM []byte
	// NotAfter is when the certificate expires.
	NotAfter time.Time
}

// TLSCertificate is the pair as a TLS listener serves it, with the CA's
// certificate after the leaf.
func (p KeyPair) TLSCertificate() (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("load the issued key pair: %w", err)
	}
	return &c, nil
}

// Issue signs a fresh key pair for r, valid from now.
func (ca *CA) Issue(r Request, now time.Time) (KeyPair, error) {
	if r.Validity <= 0 {
		return KeyPair{}, fmt.Errorf("a certificate's validity must be positive, not %s", r.Validity)
	}
	notAfter := now.Add(r.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	if !notAfter.After(now) {
		return KeyPair{}, fmt.Errorf("the CA %q expired at %s", ca.Cert.Subject.CommonName, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("generate a key: %w", err)
	}
	tmpl, err := template(r.CommonName, now, notAfter)
	if err != nil {
		return KeyPair{}, err
	}
	tmpl.DNSNames, tmpl.IPAddresses = r.DNSNames, r.IPs
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = r.Usage.extKeyUsage()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("sign the certificate of %q: %w", r.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return KeyPair{}, err
	}
	// The chain a server sends: its certificate, then the CA's.
	certPEM := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), ca.CertPEM...)
	return KeyPair{CertPEM: certPEM, KeyPEM: keyPEM, NotAfter: notAfter}, nil
}

// Pool is a certificate pool that trusts only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

func (u Usage) extKeyUsage() []x509.ExtKeyUsage {
	switch u {
	case ClientAuth:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	case ServerAndClientAuth:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	default:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
}

func template(commonName string, now, notAfter time.Time) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate a serial number: %w", err)
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
	}, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
