package testcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// keyPair is a certificate and its key, in PEM, and where they are written.
type keyPair struct {
	cert, key         []byte
	certPath, keyPath string
}

// pki holds the cluster's certificates: one CA signs them all.
type pki struct {
	ca                keyPair
	caCert            *x509.Certificate
	caKey             *ecdsa.PrivateKey
	apiserver         keyPair // serving
	admin             keyPair // system:masters, for tests and kubectl
	kubeletClient     keyPair // the apiserver's client certificate towards kubelet
	node              keyPair // kubelet's, system:node:<name> for the Node authorizer
	controllerManager keyPair
	scheduler         keyPair
	// saKey and saPub sign and verify service-account tokens.
	saKeyPath, saPubPath string
}

// newPKI makes every certificate the cluster needs and writes them to dir.
func newPKI(dir, nodeName string, serverIPs []net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{}
	var err error
	if p.caCert, p.caKey, p.ca, err = selfSignedCA(); err != nil {
		return nil, err
	}
	leaves := []struct {
		into *keyPair
		name string
		subj pkix.Name
		ext  x509.ExtKeyUsage
		ips  []net.IP
		dns  []string
	}{
		{&p.apiserver, "apiserver", pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth, serverIPs,
			[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{&p.admin, "admin", pkix.Name{CommonName: "e2e-admin", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, nil, nil},
		{&p.kubeletClient, "apiserver-kubelet-client", pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, nil, nil},
		{&p.node, "node", pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}}, x509.ExtKeyUsageClientAuth, nil, nil},
		{&p.controllerManager, "controller-manager", pkix.Name{CommonName: "system:kube-controller-manager"}, x509.ExtKeyUsageClientAuth, nil, nil},
		{&p.scheduler, "scheduler", pkix.Name{CommonName: "system:kube-scheduler"}, x509.ExtKeyUsageClientAuth, nil, nil},
	}
	for _, l := range leaves {
		if *l.into, err = p.sign(l.subj, l.ext, l.ips, l.dns); err != nil {
			return nil, fmt.Errorf("certificate %s: %w", l.name, err)
		}
		if err := l.into.write(dir, l.name); err != nil {
			return nil, err
		}
	}
	if err := p.ca.write(dir, "ca"); err != nil {
		return nil, err
	}
	return p, p.writeServiceAccountKey(dir)
}

func selfSignedCA() (*x509.Certificate, *ecdsa.PrivateKey, keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, keyPair{}, err
	}
	tmpl := certTemplate(pkix.Name{CommonName: "mcpbridge-e2e-ca"})
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, keyPair{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, keyPair{}, err
	}
	kp, err := encode(der, key)
	return cert, key, kp, err
}

func (p *pki) sign(subj pkix.Name, ext x509.ExtKeyUsage, ips []net.IP, dns []string) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, err
	}
	tmpl := certTemplate(subj)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{ext}
	tmpl.IPAddresses, tmpl.DNSNames = ips, dns
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return keyPair{}, err
	}
	return encode(der, key)
}

func certTemplate(subj pkix.Name) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      subj,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
}

func encode(der []byte, key *ecdsa.PrivateKey) (keyPair, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func (kp *keyPair) write(dir, name string) error {
	kp.certPath, kp.keyPath = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(kp.certPath, kp.cert, 0o644); err != nil {
		return err
	}
	return os.WriteFile(kp.keyPath, kp.key, 0o600)
}

// writeServiceAccountKey makes the key pair that signs service-account
// tokens (the apiserver signs, kube-controller-manager too).
func (p *pki) writeServiceAccountKey(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	p.saKeyPath, p.saPubPath = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(p.saKeyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(p.saPubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)
}
