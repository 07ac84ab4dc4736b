package podruntime

import (
	"strconv"
	"time"
)

// Where the shim lives and listens. See docs/design.md, "The shim and the
// tunnel".
const (
	// ShimPort is the port the shim listens on in the server's Pod.
	ShimPort = 7420
	// ShimPortName names that port in the container spec.
	ShimPortName = "shim"
	// ShimImageBinary is the shim's path in the shim image (the operator's
	// own image).
	ShimImageBinary = "/shim"
	// ShimDir is the emptyDir the init container copies the shim into.
	ShimDir = "/mcpbridge/bin"
	// ShimPath is the copied shim, the server container's entrypoint.
	ShimPath = ShimDir + "/shim"
	// TokenDir is where the token Secret is mounted, read-only.
	TokenDir = "/mcpbridge/token"
	// TokenPath is the token file the shim checks every tunnel against.
	TokenPath = TokenDir + "/" + TokenKey
	// CertPath and PrivateKeyPath are the key pair the shim serves TLS with.
	CertPath       = TokenDir + "/" + CertKey
	PrivateKeyPath = TokenDir + "/" + PrivateKeyKey
	// HealthzPath and ReadyzPath are the shim's probe endpoints.
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
	// DefaultTerminateGrace is the shim's wait between closing the child's
	// stdin, SIGTERM and SIGKILL: twice it, plus the network, stays within
	// the supervisor's 5 s close barrier.
	DefaultTerminateGrace = time.Second
)

// shimCommandLines are the shim's command lines: install copies the binary
// out of the shim image into ShimDir (the init container); serve runs the
// server's command behind the tunnel (the server container). This is the one
// place that knows the shim's flags.
func shimCommandLines(port int32, grace time.Duration, command string, args []string) (install, serve []string) {
	install = []string{ShimImageBinary, "install", ShimPath}
	serve = append([]string{
		ShimPath,
		"--listen=:" + strconv.Itoa(int(port)),
		"--token-file=" + TokenPath,
		"--tls-cert-file=" + CertPath,
		"--tls-key-file=" + PrivateKeyPath,
		"--terminate-grace=" + grace.String(),
		"--",
		command,
	}, args...)
	return install, serve
}
