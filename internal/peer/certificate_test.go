package peer_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/mcpbridge/operator/internal/certs"
	"github.com/mcpbridge/operator/internal/peer"
)

var _ = Describe("The replicas' CA and certificates", func() {
	It("keeps one CA in a Secret of the manager's namespace, which every replica's certificate is issued from", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		a := startReplica(ns, "replica-a", newLocals())
		b := startReplica(ns, "replica-b", newLocals())
		var s corev1.Secret
		Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mcpbridge-replica-ca"}, &s)).To(Succeed())
		Expect(s.Labels).To(HaveKeyWithValue("app.kubernetes.io/component", "replica-ca"))
		ca := replicaCA(ctx, ns)
		for _, r := range []*running{a, b} {
			leaf := servedCertificate(ctx, r, clientTLS(ca, ca))
			Expect(leaf.Subject.CommonName).To(Equal(r.name))
			for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
				_, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: peer.ServerName, KeyUsages: []x509.ExtKeyUsage{usage}})
				Expect(err).NotTo(HaveOccurred())
			}
		}
	})

	It("accepts nothing but a client certificate of the replicas' CA, and never calls the owner otherwise", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		local := newLocals()
		owner := &jsonCaller{result: json.RawMessage(`{"content":[]}`)}
		local.set("team", "team/search", owner)
		b := startReplica(ns, "replica-b", local)
		ca := replicaCA(ctx, ns)
		// Another install's replicas, or the gateway's CA: a CA of the same
		// shape that is not this one.
		other, err := certs.NewCA("mcpbridge gateway CA", time.Hour, time.Now())
		Expect(err).NotTo(HaveOccurred())
		body := `{"namespace":"team","owner":"team/search","tool":"find"}`
		for name, cfg := range map[string]*tls.Config{"no certificate": clientTLS(ca, nil), "another CA's certificate": clientTLS(ca, other)} {
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
			resp, err := hc.Post("https://"+b.target().Address+peer.CallPath, "application/json", strings.NewReader(body))
			if err == nil {
				_ = resp.Body.Close()
			}
			Expect(err).To(MatchError(Or(ContainSubstring("certificate required"), ContainSubstring("unknown certificate authority"),
				ContainSubstring("bad certificate"))), name)
		}
		// Plain HTTP reaches no handler either.
		resp, err := http.Post("http://"+b.target().Address+peer.CallPath, "application/json", strings.NewReader(body))
		if err == nil {
			Expect(resp.Body.Close()).To(Succeed())
			Expect(resp.StatusCode).To(Equal(http.StatusBadRequest))
		}
		Expect(local.lookupCount()).To(BeZero())
		Expect(owner.recorded()).To(BeEmpty())

		// The control: the same request with a replica's certificate runs.
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(ca, ca)}}
		resp, err = hc.Post("https://"+b.target().Address+peer.CallPath, "application/json", strings.NewReader(body))
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.Body.Close()).To(Succeed())
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		Expect(owner.recorded()).To(HaveLen(1))
	})

	It("does not forward to an endpoint whose certificate is not of the replicas' CA", func(ctx SpecContext) {
		a := startReplica(newNamespace(ctx), "replica-a", newLocals())
		local := newLocals()
		owner := &jsonCaller{result: json.RawMessage(`{"content":[]}`)}
		local.set("team", "team/search", owner)
		elsewhere := startReplica(newNamespace(ctx), "replica-x", local) // another install, another CA
		_, _, err := a.Client().Call(ctx, elsewhere.target(), peer.Call{Namespace: "team", Owner: "team/search", Tool: "find"})
		Expect(err).To(MatchError(peer.ErrUnreachable))
		Expect(err).To(MatchError(peer.ErrNotSent), "the handshake failed: nothing was sent")
		Expect(owner.recorded()).To(BeEmpty())
	})

	It("re-issues the replica's certificate before it expires, for its endpoint and its client, without a restart", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		local := newLocals()
		local.set("team", "team/search", &jsonCaller{result: json.RawMessage(`{"content":[]}`)})
		// Valid for 10 s, renewed 9 s before: a new certificate every second.
		r := startReplica(ns, "replica-a", local, withCertValidity(10*time.Second, 9*time.Second))
		ca := replicaCA(ctx, ns)
		first := servedCertificate(ctx, r, clientTLS(ca, ca))
		Eventually(func(g Gomega) {
			now := servedCertificate(ctx, r, clientTLS(ca, ca))
			g.Expect(now.SerialNumber).NotTo(Equal(first.SerialNumber))
			g.Expect(now.NotAfter).To(BeTemporally(">", first.NotAfter))
		}).WithTimeout(10 * time.Second).Should(Succeed())

		// Its client presents the current certificate at each new
		// connection: a server that closes every connection sees more than
		// one.
		seen := &serials{}
		srv := replicaLikeServer(ca, seen)
		DeferCleanup(srv.Close)
		to := peer.Target{Name: "fake", Address: srv.Listener.Addr().String()}
		Eventually(func(g Gomega) {
			_, _, err := r.Client().Call(ctx, to, peer.Call{Namespace: "team", Owner: "team/search", Tool: "find"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(seen.distinct()).To(BeNumerically(">=", 2))
		}).WithTimeout(10 * time.Second).Should(Succeed())
	})

	It("issues the next certificate from the CA last loaded while the Secret cannot be read", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var failing atomic.Bool
		reader, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
		Expect(err).NotTo(HaveOccurred())
		unreadable := interceptor.NewClient(reader, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if failing.Load() {
					return errors.New("the apiserver is out of reach")
				}
				return c.Get(ctx, key, obj, opts...)
			},
		})
		r := startReplica(ns, "replica-a", newLocals(), withCertValidity(10*time.Second, 9*time.Second), withReader(unreadable))
		ca := replicaCA(ctx, ns)
		first := servedCertificate(ctx, r, clientTLS(ca, ca))
		failing.Store(true)
		Eventually(func(g Gomega) {
			now := servedCertificate(ctx, r, clientTLS(ca, ca))
			g.Expect(now.SerialNumber).NotTo(Equal(first.SerialNumber))
		}).WithTimeout(10 * time.Second).Should(Succeed())
	})
})

// servedCertificate is the leaf certificate r's endpoint serves to a new
// connection.
func servedCertificate(ctx context.Context, r *running, cfg *tls.Config) *x509.Certificate {
	GinkgoHelper()
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", r.target().Address)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0]
}

// serials records the client certificates a server saw.
type serials struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (s *serials) add(n *big.Int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	s.seen[n.String()] = true
}

func (s *serials) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// replicaLikeServer serves a certificate of ca for peer.ServerName,
// requires a client certificate of ca, records its serial and answers every
// call with an empty result on a connection it then closes.
func replicaLikeServer(ca *certs.CA, seen *serials) *httptest.Server {
	GinkgoHelper()
	pair, err := ca.Issue(certs.Request{CommonName: "fake", DNSNames: []string{peer.ServerName}, Usage: certs.ServerAndClientAuth,
		Validity: time.Hour}, time.Now())
	Expect(err).NotTo(HaveOccurred())
	cert, err := pair.TLSCertificate()
	Expect(err).NotTo(HaveOccurred())
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.add(r.TLS.PeerCertificates[0].SerialNumber)
		w.Header().Set("Connection", "close")
		_, _ = w.Write([]byte(`{"result":{"content":[]},"isError":false}`))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	srv.StartTLS()
	return srv
}
