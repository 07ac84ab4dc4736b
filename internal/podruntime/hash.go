package podruntime

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/mcpbridge/operator/internal/policy"
)

// TemplateHashAnnotation on the Pod template changes whenever the Pod must
// be replaced: any change of the rendered template, of a value the Pod reads
// from a Secret or ConfigMap (the template only references those), or of
// the tunnel token. Recreate then replaces the Pod.
const TemplateHashAnnotation = "mcpbridge.dev/template-hash"

// templateHash digests the template (before the annotation is set) and the
// resolved env values with an HMAC keyed by the tunnel token: the annotation
// is readable by whoever may read Deployments, and a plain hash would let
// them test guesses of a Secret's value. A new token also changes it, so
// that the Pod that mounts the token is replaced with it.
//
// Only what reaches the Pod is hashed: a change of, say, toolCallTimeoutMs
// hot-swaps the connection but keeps the Pod.
func templateHash(tmpl *corev1.PodTemplateSpec, resolved []policy.EnvVar, token string) string {
	mac := hmac.New(sha256.New, []byte(token))
	enc := json.NewEncoder(mac)
	for _, v := range []any{tmpl, resolved} {
		if err := enc.Encode(v); err != nil {
			panic(fmt.Sprintf("podruntime: marshal: %v", err)) // plain data cannot fail
		}
	}
	return hex.EncodeToString(mac.Sum(nil))[:32]
}
