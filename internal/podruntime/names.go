package podruntime

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Labels on every object of the Pod runtime; the Deployment selects its Pod
// by both.
const (
	// ManagedByLabel marks the objects the manager owns; its Pod cache
	// watches only Pods with this label.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "mcpbridge"
	// ServerLabel names the McpServer (LabelValue of its metadata.name).
	ServerLabel = "mcpbridge.dev/server"
)

const (
	// deploymentSuffix ends every Deployment name: "github" runs as
	// Deployment "github-mcp" and Pods "github-mcp-<hash>-<random>".
	deploymentSuffix = "-mcp"
	// tokenSecretSuffix is added to the Deployment name for the token Secret.
	tokenSecretSuffix = "-token"
	// maxDeploymentName keeps the ReplicaSet's name (Deployment name, "-",
	// up to 10 characters of pod-template-hash) a DNS label of at most 63
	// characters, as Pod host names need.
	maxDeploymentName = validation.DNS1123LabelMaxLength - 11
	// hashLen is the hex digits of SHA-256 that keep two shortened names apart.
	hashLen = 8
)

// DeploymentName is the Deployment of the McpServer named name: name + "-mcp"
// when that is a DNS label of at most 52 characters, otherwise a shortened
// form with a hash of the whole name (dots become dashes).
func DeploymentName(name string) string {
	return safeName(name, deploymentSuffix, maxDeploymentName)
}

// TokenSecretName is the Secret holding the tunnel token of the McpServer
// named name.
func TokenSecretName(name string) string {
	return DeploymentName(name) + tokenSecretSuffix
}

// LabelValue is name as a label value: itself when it fits in 63
// characters (an McpServer name is a DNS subdomain, which is a valid label
// value), otherwise its first characters and a hash of the whole name.
func LabelValue(name string) string {
	if len(name) <= validation.LabelValueMaxLength {
		return name
	}
	return shorten(name, name, validation.LabelValueMaxLength)
}

// Labels are the labels of the McpServer named name's objects, and the
// Deployment's selector.
func Labels(name string) map[string]string {
	return map[string]string{ManagedByLabel: ManagedByValue, ServerLabel: LabelValue(name)}
}

// safeName is name+suffix if that is a DNS label of at most max characters,
// otherwise name made a DNS label, shortened and hashed, + suffix.
func safeName(name, suffix string, max int) string {
	if n := name + suffix; len(n) <= max && len(validation.IsDNS1123Label(n)) == 0 {
		return n
	}
	return shorten(strings.ReplaceAll(name, ".", "-"), name, max-len(suffix)) + suffix
}

// shorten cuts s to leave room for "-" and a hash of key, trims what may not
// end a label, and appends the hash; the result has at most max characters.
func shorten(s, key string, max int) string {
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:])[:hashLen]
	if keep := max - 1 - hashLen; len(s) > keep {
		s = s[:keep]
	}
	s = strings.TrimRight(s, ".-_")
	if s == "" {
		return h
	}
	return s + "-" + h
}
