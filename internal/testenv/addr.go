package testenv

import (
	"net"
	"sync"
)

var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreeAddr is a loopback address no one listened on a moment ago, and
// never one FreeAddr gave this process before: the kernel may give a port
// just closed to the next listen on port 0, and two flags of one manager
// then name the same address (one of them fails to bind at start-up).
func FreeAddr() (string, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		port := l.Addr().(*net.TCPAddr).Port
		addr := l.Addr().String()
		_ = l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return addr, nil
		}
	}
}
