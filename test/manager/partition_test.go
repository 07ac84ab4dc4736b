package manager_test

import (
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// apiserverLink relays TCP to the test's apiserver for one manager, and can
// be cut and healed: a network partition between a replica and the control
// plane, while the replica keeps running and its peers do not.
type apiserverLink struct {
	addr, target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
}

func newAPIServerLink(t *testing.T) *apiserverLink {
	t.Helper()
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	l := &apiserverLink{target: u.Host, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.addr = ln.Addr().String()
	l.serve(ln)
	t.Cleanup(l.cut)
	return l
}

func (l *apiserverLink) serve(ln net.Listener) {
	l.mu.Lock()
	l.ln = ln
	l.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go l.relay(c)
		}
	}()
}

func (l *apiserverLink) relay(c net.Conn) {
	up, err := net.Dial("tcp", l.target)
	if err != nil {
		c.Close()
		return
	}
	if !l.track(c, up) {
		return
	}
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
}

// track adds both ends of a relayed connection, unless the link was cut
// meanwhile: then it closes them.
func (l *apiserverLink) track(cs ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		l.conns[c] = true
	}
	return true
}

// cut closes the listener and every relayed connection: the manager's
// requests and watches fail, and new connections are refused.
func (l *apiserverLink) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		l.ln.Close()
		l.ln = nil
	}
	for c := range l.conns {
		c.Close()
	}
	clear(l.conns)
}

// heal listens again on the same address.
func (l *apiserverLink) heal(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		t.Fatal(err)
	}
	l.serve(ln)
}

// kubeconfig is the test's kubeconfig with its server reached through the
// link (the apiserver's certificate is for 127.0.0.1, as the link is).
func (l *apiserverLink) kubeconfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(env.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), l.target) {
		t.Fatalf("the kubeconfig does not name the apiserver at %s", l.target)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(b), l.target, l.addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestACutOffReplicaNeverRunsAChildBesideItsSuccessor cuts a replica that
// runs stdio servers off the apiserver. It cannot release its servers, and
// its peer takes them when its Lease expires: the cut-off replica must have
// reaped their children by then (it counts itself out two thirds of a
// duration after its last accepted renewal, and its peer waits the close
// barrier after the expiry). When the link heals, the replica takes its
// servers back, break before make again, though its cache still names it
// the holder for a while. The children are slow to go, so any overlap
// shows. r1 runs about half of them, mostly more than the reconciler has
// workers (8), so that reaping them one reconcile at a time would end after
// the peer started its own.
func TestACutOffReplicaNeverRunsAChildBesideItsSuccessor(t *testing.T) {
	g := NewWithT(t)
	rig := newStdioRig(t, "MCPBRIDGE_CUT")
	link := newAPIServerLink(t)
	rig.start("r1", link.kubeconfig(t))
	rig.start("r2", env.KubeconfigPath)
	names := rig.createServers(24)
	before := allReadyOn(t, rig.tenant, names, []string{"r1", "r2"})
	var cutOff []string
	for _, name := range names {
		if before[name].Status.Replica == "r1" {
			cutOff = append(cutOff, name)
		}
	}
	g.Expect(cutOff).NotTo(BeEmpty(), "r1 owns some of %d servers", len(names))

	link.cut()
	allReadyOn(t, rig.tenant, names, []string{"r2"})
	link.heal(t)
	g.Eventually(func(g Gomega) {
		now := servers(g, rig.tenant)
		for _, name := range names {
			g.Expect(now[name].Status.Phase).To(Equal(v1alpha1.PhaseReady), name)
			g.Expect(now[name].Status.Replica).To(Equal(before[name].Status.Replica), "%s is back on its owner", name)
		}
	}, time.Minute, 100*time.Millisecond).Should(Succeed())

	rig.check(g, func(name string, distinct int) {
		if before[name].Status.Replica == "r1" {
			g.Expect(distinct).To(BeNumerically(">=", 3), "%s: the watch saw the server on r1, on r2 and on r1 again", name)
		}
	})
}
