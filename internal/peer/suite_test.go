package peer_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/mcpbridge/operator/internal/certs"
	"github.com/mcpbridge/operator/internal/peer"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/testenv"
)

// env is a real apiserver: the CA Secret is created and read there, as the
// replicas of one install share it.
var env *testenv.Env

func TestPeer(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Peer Suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	env, err = testenv.Start()
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// newNamespace is a manager's namespace of the spec's own, so that each
// spec's replicas have a CA of their own.
func newNamespace(ctx context.Context) string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "peer-"}}
	Expect(env.Client.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

// running is a replica whose certificate and endpoint run as a manager
// runs them.
type running struct {
	*peer.Replica
	name   string
	cancel context.CancelFunc
	done   chan error // one error per runnable, when it returns
}

// target is how other replicas reach it.
func (r *running) target() peer.Target {
	return peer.Target{Name: r.name, Address: r.Endpoint().Addr().String()}
}

// stop stops the replica and returns what its endpoint returned.
func (r *running) stop() error {
	r.cancel()
	var first error
	for range 2 {
		if err := <-r.done; err != nil && first == nil {
			first = err
		}
	}
	return first
}

type replicaOption func(*peer.Config)

func withTracer(tp trace.TracerProvider) replicaOption {
	return func(c *peer.Config) { c.TracerProvider = tp }
}

func withReader(r client.Reader) replicaOption { return func(c *peer.Config) { c.Reader = r } }

func withResults(pool *testPool) replicaOption {
	return func(c *peer.Config) {
		c.Results = func(string) (registry.ResultBytes, func()) {
			l := &testLease{pool: pool}
			return l, func() { pool.held.Add(-l.n) }
		}
	}
}

// testPool is a budget of result bytes; testLease one call's share of it.
type testPool struct {
	max  int64
	held atomic.Int64
}

type testLease struct {
	pool *testPool
	n    int64
}

func (l *testLease) Take(n int64) bool {
	if l.pool.held.Add(n) > l.pool.max {
		l.pool.held.Add(-n)
		return false
	}
	l.n += n
	return true
}

func (l *testLease) Return(n int64) { l.n -= n; l.pool.held.Add(-n) }

func withLog(l logr.Logger) replicaOption { return func(c *peer.Config) { c.Log = l } }

func withCertValidity(validity, renewBefore time.Duration) replicaOption {
	return func(c *peer.Config) { c.CertValidity, c.CertRenewBefore = validity, renewBefore }
}

// startReplica runs replica name of the install in ns on a free loopback
// port, serving local, until the spec ends.
func startReplica(ns, name string, local *locals, opts ...replicaOption) *running {
	GinkgoHelper()
	cfg := peer.Config{Name: name, Namespace: ns, BindAddress: "127.0.0.1:0", Client: env.Client, Local: local.lookup,
		Log: GinkgoLogr.WithName(name), CertRetryDelay: 100 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	rep, err := peer.New(cfg)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Replica: rep, name: name, cancel: cancel, done: make(chan error, 2)}
	for _, run := range rep.Runnables() {
		go func() { r.done <- run.Start(ctx) }()
	}
	DeferCleanup(func() {
		if ctx.Err() == nil {
			Expect(r.stop()).To(Succeed())
		}
	})
	Eventually(rep.Issued()).WithTimeout(10 * time.Second).Should(BeClosed())
	Eventually(rep.Endpoint().Bound()).Should(BeClosed())
	return r
}

// locals is a replica's Local: the callers it runs, by namespace/owner.
type locals struct {
	mu      sync.Mutex
	callers map[string]registry.Caller
	lookups int
}

func newLocals() *locals { return &locals{callers: map[string]registry.Caller{}} }

func (l *locals) set(ns, owner string, c registry.Caller) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.callers[ns+"|"+owner] = c
}

func (l *locals) lookup(ns, owner string) (registry.Caller, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lookups++
	c, ok := l.callers[ns+"|"+owner]
	return c, ok
}

func (l *locals) lookupCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lookups
}

// jsonCaller is a trivial supervisor: it answers every call with result
// and records what it was called with.
type jsonCaller struct {
	result  json.RawMessage
	isError bool
	err     error
	// block, if set, holds each call until it is closed.
	block chan struct{}

	mu      sync.Mutex
	calls   []recorded
	started chan struct{} // receives one value per call started, if set
}

type recorded struct {
	tool string
	args string
	sdk  bool
}

func (c *jsonCaller) CallToolJSON(ctx context.Context, tool string, args json.RawMessage) (json.RawMessage, bool, error) {
	c.record(recorded{tool: tool, args: string(args)})
	if c.block != nil {
		<-c.block
	}
	// What it returns counts into the call's budget, as the bridge counts
	// what it reads.
	if rb := registry.ResultBytesFrom(ctx); rb != nil && !rb.Take(int64(len(c.result))) {
		return nil, false, registry.ErrResultBudget
	}
	return c.result, c.isError, c.err
}

func (c *jsonCaller) CallTool(_ context.Context, tool string, args any) (*mcp.CallToolResult, error) {
	b, _ := json.Marshal(args)
	c.record(recorded{tool: tool, args: string(b), sdk: true})
	if c.err != nil {
		return nil, c.err
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(c.result, &res); err != nil {
		return nil, err
	}
	res.IsError = c.isError
	return &res, nil
}

func (c *jsonCaller) record(r recorded) {
	c.mu.Lock()
	c.calls = append(c.calls, r)
	c.mu.Unlock()
	if c.started != nil {
		c.started <- struct{}{}
	}
}

func (c *jsonCaller) recorded() []recorded {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]recorded(nil), c.calls...)
}

// sdkOnly is a Caller without the JSON path.
type sdkOnly struct{ c *jsonCaller }

func (s sdkOnly) CallTool(ctx context.Context, tool string, args any) (*mcp.CallToolResult, error) {
	return s.c.CallTool(ctx, tool, args)
}

// replicaCA is the CA the install in ns keeps in its Secret.
func replicaCA(ctx context.Context, ns string) *certs.CA {
	GinkgoHelper()
	var s corev1.Secret
	Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: peer.DefaultCASecretName}, &s)).To(Succeed())
	ca, err := certs.ParseCA(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	Expect(err).NotTo(HaveOccurred())
	return ca
}

// clientTLS is a TLS client that trusts ca as a replica does, presenting
// a certificate issued by signer (none when nil).
func clientTLS(ca, signer *certs.CA) *tls.Config {
	GinkgoHelper()
	cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: peer.ServerName, MinVersion: tls.VersionTLS12}
	if signer != nil {
		pair, err := signer.Issue(certs.Request{CommonName: "someone", DNSNames: []string{peer.ServerName},
			Usage: certs.ServerAndClientAuth, Validity: time.Hour}, time.Now())
		Expect(err).NotTo(HaveOccurred())
		c, err := pair.TLSCertificate()
		Expect(err).NotTo(HaveOccurred())
		cfg.Certificates = []tls.Certificate{*c}
	}
	return cfg
}

// closedAddress is a loopback address where nothing listens.
func closedAddress() string {
	GinkgoHelper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	addr := ln.Addr().String()
	Expect(ln.Close()).To(Succeed())
	return addr
}

// metricValue reads a counter or gauge of the manager's registry with the
// label given; 0 when there is no such series.
func metricValue(name, label, value string) float64 {
	GinkgoHelper()
	v, _ := metricSeries(name, label, value)
	return v
}

// metricSeries is metricValue, and whether the series exists.
func metricSeries(name, label, value string) (v float64, ok bool) {
	GinkgoHelper()
	families, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					if m.GetGauge() != nil {
						return m.GetGauge().GetValue(), true
					}
					return m.GetCounter().GetValue(), true
				}
			}
		}
	}
	return 0, false
}
