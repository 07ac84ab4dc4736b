package testenv

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// FreeAddr never hands out one address twice, and takes its ports from
// below the kernel's ephemeral range, where no outgoing connection or
// listen on port 0 takes one before the process the test starts binds it.
func TestFreeAddrHandsOutEachAddressOnceBelowTheEphemeralRange(t *testing.T) {
	lo, hi, ok := belowEphemeral()
	if !ok {
		t.Fatal("no range below the ephemeral ports: /proc/sys/net/ipv4/ip_local_port_range unread")
	}
	if hi > nodePortsFrom {
		t.Fatalf("the range %d-%d reaches Kubernetes' NodePorts", lo, hi-1)
	}
	seen := map[string]bool{}
	for range 500 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		_, p, _ := net.SplitHostPort(addr)
		if port, _ := strconv.Atoi(p); port < lo || port >= hi {
			t.Fatalf("%s is outside %d-%d", addr, lo, hi-1)
		}
	}
}

// claimPort refuses a port another test process holds, or one something
// listens on.
func TestClaimPortRefusesAPortInUse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		holdBy func(t *testing.T, port int)
		want   bool
	}{
		{"free", func(*testing.T, int) {}, true},
		{"locked by another process", lockAsAnotherProcess, false},
		{"listened on", listenOn, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := unclaimedPort(t)
			tc.holdBy(t, port)
			f, err := claimPort(port)
			if got := err == nil; got != tc.want {
				t.Fatalf("claimed: %v (%v), want %v", got, err, tc.want)
			}
			if f != nil {
				f.Close()
			}
		})
	}
}

// unclaimedPort is a port below the ephemeral range that no one holds, not
// recorded as handed out, so that a case can claim it itself.
func unclaimedPort(t *testing.T) int {
	t.Helper()
	f, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ := net.SplitHostPort(f)
	port, _ := strconv.Atoi(p)
	handedOut.Lock()
	defer handedOut.Unlock()
	last := len(handedOut.locks) - 1
	handedOut.locks[last].Close()
	handedOut.locks = handedOut.locks[:last]
	return port
}

// lockAsAnotherProcess takes port's lock through a file of its own: a
// flock held through another open file conflicts as another process's
// does.
func lockAsAnotherProcess(t *testing.T, port int) {
	f, err := os.Open(portLockPath(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
}

func listenOn(t *testing.T, port int) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// Where the lock files cannot be made, FreeAddr still hands out an address,
// one the kernel offers, rather than failing every port of its range.
func TestFreeAddrWithoutLockFilesTakesTheKernelsPorts(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", notADir)
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("%s cannot be listened on: %v", addr, err)
	}
	l.Close()
}
