package testcluster

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// The variables hack/e2e-sandbox.sh sets inside its namespaces.
const (
	envState   = "MCPBRIDGE_E2E_STATE"
	envNodeIP  = "MCPBRIDGE_E2E_NODE_IP"
	envSysctls = "MCPBRIDGE_E2E_SYSCTLS"
)

// errNotInSandbox says how to run the suite instead.
var errNotInSandbox = errors.New("the real node runs only inside hack/e2e-sandbox.sh, which keeps the machine unchanged " +
	"(its own mount, network and PID namespaces, files over the sysctls kubelet writes): run `make test-e2e` as root")

// sandbox is what hack/e2e-sandbox.sh prepared.
type sandbox struct {
	state  string // an empty tmpfs for the node's state
	nodeIP net.IP // on lo, in the namespace only
}

// checkSandbox refuses to go on unless this process runs where
// hack/e2e-sandbox.sh put it: every sysctl kubelet writes is covered by a
// file, and the network namespace has nothing but loopback (so the Pod
// network cannot reach the machine's own).
func checkSandbox() (sandbox, error) {
	state, ip, sysctls := os.Getenv(envState), net.ParseIP(os.Getenv(envNodeIP)), os.Getenv(envSysctls)
	if state == "" || ip == nil || sysctls == "" {
		return sandbox{}, fmt.Errorf("%w (%s, %s or %s unset)", errNotInSandbox, envState, envNodeIP, envSysctls)
	}
	mounts, err := mountPoints()
	if err != nil {
		return sandbox{}, err
	}
	for _, kv := range strings.Fields(sysctls) {
		path := "/proc/sys/" + strings.SplitN(kv, "=", 2)[0]
		if !mounts[path] {
			return sandbox{}, fmt.Errorf("%w (%s is not covered by a file)", errNotInSandbox, path)
		}
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return sandbox{}, err
	}
	for _, i := range ifaces {
		if i.Flags&net.FlagLoopback == 0 {
			return sandbox{}, fmt.Errorf("%w (network interface %s is not loopback: this is not a fresh network namespace)", errNotInSandbox, i.Name)
		}
	}
	return sandbox{state: state, nodeIP: ip}, nil
}

// mountPoints lists this mount namespace's mount points.
func mountPoints() (map[string]bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	points := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			points[fields[4]] = true
		}
	}
	return points, sc.Err()
}
