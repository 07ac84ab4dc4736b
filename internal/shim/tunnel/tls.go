package tunnel

import (
	"bytes"
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
	"time"
)

// The tunnel's TLS: the shim serves a key pair the manager issued for this
// server's current Pod template, and the client accepts exactly that
// certificate (a pin, not a CA chain or a name): whoever answers at the
// Pod IP without the key cannot read the token or the server's stdio.
// See docs/design.md, "The shim and the tunnel".

// keyPairValidity is how long an issued certificate is valid. Validity is
// not what the client trusts (it pins the exact certificate, replaced with
// every Pod roll); it only keeps the certificate well-formed for tools that
// inspect it.
const keyPairValidity = 10 * 365 * 24 * time.Hour

// NewKeyPair issues a fresh self-signed ECDSA P-256 certificate and its key,
// PEM-encoded, named for the server it is issued to.
func NewKeyPair(commonName string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate the shim's key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("generate a serial number: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-time.Hour), // clock skew between the manager and the node
		NotAfter:     now.Add(keyPairValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue the shim's certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the shim's key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// ServerTLS is the shim's TLS configuration: TLS 1.3 only and HTTP/1.1
// only (the tunnel is full-duplex HTTP/1.1; see the package doc).
func ServerTLS(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{"http/1.1"},
	}
}

// ErrPinMismatch: the peer presented a certificate other than the one the
// client pins, so the tunnel was not opened and the token was not sent.
var ErrPinMismatch = errors.New("the shim presented a certificate other than the one issued for this server")

// clientTLS accepts exactly the certificate pinned (PEM), and nothing else:
// no chain is built and no name checked, since the manager issued that
// certificate itself and knows it byte for byte.
func clientTLS(pinned []byte) (*tls.Config, error) {
	block, _ := pem.Decode(pinned)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no pinned certificate for the shim (PEM CERTIFICATE)")
	}
	der := block.Bytes
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{"http/1.1"},
		// The pin below replaces chain and name verification.
		InsecureSkipVerify: true, //nolint:gosec // verified by VerifyConnection: the exact certificate is pinned
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, der) {
				return ErrPinMismatch
			}
			return nil
		},
	}, nil
}
