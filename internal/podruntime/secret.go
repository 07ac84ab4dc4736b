package podruntime

import (
	"crypto/rand"
	"encoding/base64"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// TokenKey is the key of the token in the token Secret, and the file name
// under TokenDir.
const TokenKey = "token"

// tokenBytes of randomness make one token.
const tokenBytes = 32

// NewToken returns a fresh random tunnel token: 32 bytes from crypto/rand,
// base64url without padding (43 characters).
func NewToken() string {
	b := make([]byte, tokenBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return base64.RawURLEncoding.EncodeToString(b)
}

// TokenSecret is the Secret that holds obj's tunnel token under TokenKey:
// owned by obj, mounted read-only into the server's Pod for the shim, and
// read by the manager to open tunnels. See docs/design.md, "The shim and the
// tunnel".
func TokenSecret(obj *v1alpha1.McpServer, token string) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            TokenSecretName(obj.Name),
			Namespace:       obj.Namespace,
			Labels:          Labels(obj.Name),
			OwnerReferences: []metav1.OwnerReference{ownerRef(obj)},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{TokenKey: []byte(token)},
	}
}
