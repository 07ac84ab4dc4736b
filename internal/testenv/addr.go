package testenv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// handedOut is the ports FreeAddr gave this process, and the lock files
// that keep other test processes off them: held here (a file is closed,
// and its lock released, when it is collected) until the process exits.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
	locks []*os.File
}{ports: map[int]bool{}}

// FreeAddr is a loopback address no one listens on, given to one caller of
// one test process at a time on this machine. A port a test hands to a
// process it starts is free only while nothing else binds it before that
// process does, so FreeAddr takes its ports from below the kernel's
// ephemeral range (no outgoing connection or listen on port 0 is given
// one), and a lock file per port keeps test processes that run at once (go
// test runs packages in parallel) from handing out the same one. Without a
// range to use (no /proc), it falls back to a port the kernel offers,
// still never one it gave before.
func FreeAddr() (string, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	lo, hi, ok := belowEphemeral()
	if !ok {
		return kernelAddr()
	}
	n := hi - lo
	start := rand.IntN(n)
	for i := range n {
		port := lo + (start+i)%n
		if handedOut.ports[port] {
			continue
		}
		lock, err := claimPort(port)
		if errors.Is(err, errNoLocks) {
			return kernelAddr()
		}
		if err != nil {
			continue
		}
		handedOut.ports[port] = true
		handedOut.locks = append(handedOut.locks, lock)
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
	}
	return "", fmt.Errorf("no free loopback port in %d-%d", lo, hi-1)
}

// claimPort locks port's file for this process and checks that nothing
// listens on the port; it fails when another process holds the lock or the
// port is bound.
func claimPort(port int) (*os.File, error) {
	f, err := os.OpenFile(portLockPath(port), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoLocks, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %w", errNoLocks, err)
		}
		return nil, err
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		f.Close()
		return nil, err
	}
	_ = l.Close()
	return f, nil
}

// errNoLocks: the lock files cannot be used here (the directory is not
// ours, or the file system has no flock); FreeAddr then takes the
// kernel's ports, as where it has no range.
var errNoLocks = errors.New("the port lock files cannot be used")

// portLockPath is the file whose lock holds port; a directory per user, so
// that one user's files never stop another's tests.
func portLockPath(port int) string {
	dir := filepath.Join(os.TempDir(), "mcpbridge-test-ports-"+strconv.Itoa(os.Getuid()))
	_ = os.MkdirAll(dir, 0o700)
	return filepath.Join(dir, strconv.Itoa(port))
}

// belowEphemeral is the range [lo, hi) FreeAddr picks from: up to 16,384
// ports just below the kernel's ephemeral range and Kubernetes' NodePorts
// (on a node, kube-proxy may take loopback traffic to those), above the
// well-known ports.
func belowEphemeral() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	hi, err = strconv.Atoi(f[0])
	if err != nil {
		return 0, 0, false
	}
	hi = min(hi, nodePortsFrom)
	lo = max(hi-16384, 10000)
	return lo, hi, hi-lo >= 1024
}

// nodePortsFrom is the first port of Kubernetes' default NodePort range.
const nodePortsFrom = 30000

// kernelAddr is a port the kernel offers for port 0 that FreeAddr has not
// given before: the kernel may offer a port just closed again.
func kernelAddr() (string, error) {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return l.Addr().String(), nil
		}
	}
}
