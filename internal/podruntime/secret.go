package podruntime

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/shim/tunnel"
)

// Keys of the token Secret, and the file names under TokenDir.
const (
	// TokenKey holds the tunnel token.
	TokenKey = "token"
	// CertKey and PrivateKeyKey hold the shim's TLS key pair (PEM), which
	// the manager pins.
	CertKey       = corev1.TLSCertKey
	PrivateKeyKey = corev1.TLSPrivateKeyKey
)

// IssuedForAnnotation on the token Secret is the template hash of the Pod
// its credentials were issued for: a Pod template with another hash is a
// roll, and a roll gets new credentials.
const IssuedForAnnotation = "mcpbridge.dev/issued-for"

// tokenBytes of randomness make one token.
const tokenBytes = 32

// NewToken returns a fresh random tunnel token: 32 bytes from crypto/rand,
// base64url without padding (43 characters).
func NewToken() string {
	b := make([]byte, tokenBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return base64.RawURLEncoding.EncodeToString(b)
}

// Credentials are what one Pod of a server and the manager share: the
// token the shim checks and the key pair it serves, whose certificate the
// manager pins. See docs/design.md, "The shim and the tunnel".
type Credentials struct {
	Token string
	Cert  []byte // PEM
	Key   []byte // PEM
}

// NewCredentials issues fresh credentials for obj's next Pod.
func NewCredentials(obj *v1alpha1.McpServer) (Credentials, error) {
	cert, key, err := tunnel.NewKeyPair("mcpbridge shim " + obj.Namespace + "/" + obj.Name)
	if err != nil {
		return Credentials{}, err
	}
	return Credentials{Token: NewToken(), Cert: cert, Key: key}, nil
}

// CredentialsOf reads the credentials of a token Secret; an error says
// what is missing or broken (never the values).
func CredentialsOf(s *corev1.Secret) (Credentials, error) {
	c := Credentials{Token: string(s.Data[TokenKey]), Cert: s.Data[CertKey], Key: s.Data[PrivateKeyKey]}
	switch {
	case c.Token == "":
		return Credentials{}, fmt.Errorf("no %s", TokenKey)
	case len(c.Cert) == 0 || len(c.Key) == 0:
		return Credentials{}, fmt.Errorf("no %s or %s", CertKey, PrivateKeyKey)
	}
	if _, err := tls.X509KeyPair(c.Cert, c.Key); err != nil {
		return Credentials{}, fmt.Errorf("%s and %s are not a key pair", CertKey, PrivateKeyKey)
	}
	return c, nil
}

// TokenSecret is the Secret that holds obj's credentials, issued for the
// Pod template whose hash is issuedFor: owned by obj, mounted read-only
// into the server's Pod for the shim, and read by the manager to open
// tunnels. See docs/design.md, "The shim and the tunnel".
func TokenSecret(obj *v1alpha1.McpServer, c Credentials, issuedFor string) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            TokenSecretName(obj.Name),
			Namespace:       obj.Namespace,
			Labels:          Labels(obj.Name),
			Annotations:     map[string]string{IssuedForAnnotation: issuedFor},
			OwnerReferences: []metav1.OwnerReference{ownerRef(obj)},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{TokenKey: []byte(c.Token), CertKey: c.Cert, PrivateKeyKey: c.Key},
	}
}
