package controller_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/controller"
	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/kubeauth"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/policy"
	toolregistry "github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/testenv"
)

var (
	env        *testenv.Env
	k8s        client.Client
	fixtureBin string
	mgrCtx     context.Context
	mgrCancel  context.CancelFunc
	mgrDone    chan struct{}
	registry   *toolregistry.Registry
	sups       *controller.Supervisors
	gatewayURL string
	mgrCache   cache.Cache // the running manager's
)

func TestController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "McpServer Controller Suite")
}

var _ = BeforeSuite(func() {
	// Everything the manager logs is also kept, so that a spec can show
	// what never reaches the log (see the audit spec).
	ctrl.SetLogger(zap.New(zap.WriteTo(io.MultiWriter(GinkgoWriter, managerLog)), zap.UseDevMode(true)))
	fixtureBin = filepath.Join(GinkgoT().TempDir(), "mcp-fixture")
	Expect(testenv.Build(fixtureBin, "./test/fixture/cmd/mcp-fixture")).To(Succeed())

	var err error
	env, err = testenv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8s = env.Client
	startManager()
})

var _ = AfterSuite(func() {
	stopManager()
	// The control plane stops first: a failed expectation must not leave
	// its processes behind.
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
	Expect(egressViolations.Load()).To(BeZero(), "an egress policy let an address off this machine through")
})

// localEverywhere runs every stdio server without an image as a child of
// the test's manager, as the suite's specs written before the Pod runtime
// expect, with floors and ceilings sized for the suite's short delays (the
// limits spec goes beyond them).
var localEverywhere = policy.RuntimeConfig{LocalNamespaces: []string{policy.AllNamespaces}, Limits: suiteLimits}

// suiteLimits are the suite manager's --min-reconnect-delay and friends.
var suiteLimits = policy.Limits{MinReconnectDelay: 10 * time.Millisecond, MinHealthCheckInterval: 100 * time.Millisecond,
	MaxToolCallTimeout: time.Hour, MaxConnectionTimeout: time.Hour}

// testShimImage is what the test manager's Pods would copy the shim from;
// envtest runs no Pod.
const testShimImage = "example.com/mcpbridge/operator:test"

// replicaName is the test manager's --replica-name.
const replicaName = "manager-test-0"

// startManager runs a manager in-process with the reconciler, with test-sized
// close barrier and grace, and every namespace allowed to run Local.
func startManager() { startManagerWith(localEverywhere, podruntime.Options{ShimImage: testShimImage}) }

// startManagerWith runs the manager with the runtime flags given. Its cache
// is set up as the manager binary's (controller.CacheOptions).
func startManagerWith(rc policy.RuntimeConfig, po podruntime.Options) {
	if len(po.ManagerPodLabels) == 0 {
		po.ManagerPodLabels, po.ManagerNamespace = testManagerLabels, testManagerNamespace
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             ctrlConfig(),
		Cache:                  controller.CacheOptions(cache.Options{}, replicaName),
	})
	Expect(err).NotTo(HaveOccurred())
	registry = toolregistry.New()
	// The in-cluster rule looks addresses up as the manager binary does.
	owners := egress.KubeOwners{Reader: mgr.GetAPIReader()}
	sups = controller.NewSupervisors(controller.SupervisorsOptions{Registry: registry, Log: ctrl.Log.WithName("supervisor"),
		Egress: testEgress("127.0.0.0/8", "::1/128").WithCluster(egress.DefaultClusterCIDRs, owners),
		Tune: func(o *bridge.Options) {
			// Pod-runtime supervisors get the manager's default too: their
			// shims listen on loopback and are reached all the same, since
			// the tunnel to the operator's own Pod is not an upstream.
			if strings.HasPrefix(o.Name, refusedPrefix) || o.Pod != nil {
				o.Egress = testEgress().WithCluster(egress.DefaultClusterCIDRs, owners) // the manager's default: nothing allowed
			}
			o.CloseBarrier = 3 * time.Second
			o.TerminateGrace = 500 * time.Millisecond
			if strings.HasPrefix(o.Name, idlePrefix) {
				o.Clock = idleClock // the idle specs step it past suspendAfterMs
			}
			if strings.HasPrefix(o.Name, slowClosePrefix) {
				// A child that ignores SIGTERM lives until SIGKILL, two
				// graces (3 s) after its close began: far past the barrier.
				o.CloseBarrier, o.TerminateGrace = 300*time.Millisecond, 1500*time.Millisecond
			}
		}})
	r := &controller.McpServerReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("mcpbridge-manager"), Supervisors: sups,
		Runtime: rc, PodRuntime: po, Replica: replicaName,
	}
	Expect(r.SetupWithManager(mgr)).To(Succeed())
	mgrCache = mgr.GetCache()
	addGateway(mgr)
	mgrCtx, mgrCancel = context.WithCancel(context.Background())
	mgrDone = make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(mgrDone)
		Expect(mgr.Start(mgrCtx)).To(Succeed())
	}()
}

// Timing of the suite's gateway: short, so that a changed permission shows
// quickly; the product's defaults are 30 s, 5 s and 30 s.
const (
	gatewayAllowTTL   = 2 * time.Second
	gatewayDenyTTL    = time.Second
	gatewayRevalidate = time.Second
)

// idlePrefix names the McpServers whose supervisors run on idleClock: their
// idle timers (and backoff, and health checks) move only when a spec steps
// it. See idle_test.go.
const idlePrefix = "idle-"

var idleClock = clocktesting.NewFakeClock(time.Now())

// The labels and namespace of the manager's Pods that the test manager's
// NetworkPolicies admit.
var testManagerLabels = map[string]string{"app.kubernetes.io/component": "manager"}

const testManagerNamespace = "mcpbridge-system"

// refusedPrefix names the McpServers whose supervisors get the manager's
// default egress policy, which refuses loopback; the others may reach the
// loopback upstreams of the tests.
const refusedPrefix = "refused-"

// egressViolations counts addresses off this machine that an egress policy
// let through to the dialer; AfterSuite requires none.
var egressViolations atomic.Int32

// testEgress is an egress policy allowing allow, whose dial hook refuses,
// and counts, every address that is not loopback instead of dialling it:
// a broken policy never sends a packet off this machine.
func testEgress(allow ...string) *egress.Policy {
	cidrs, err := egress.ParseCIDRs(strings.Join(allow, ","))
	Expect(err).NotTo(HaveOccurred())
	return egress.New(cidrs).WithDialHook(func(network, address string) error {
		if ap, err := netip.ParseAddrPort(address); err == nil && ap.Addr().Unmap().IsLoopback() {
			return nil
		}
		egressViolations.Add(1)
		GinkgoWriter.Printf("the egress policy let %s %s through to the dialer\n", network, address)
		return errors.New("test: never dial a non-loopback address")
	})
}

// addGateway serves the gateway with token authentication on a free
// loopback port, as the manager binary does, with the suite's timing and
// its own client, which counts the TokenReviews it sends. Each manager
// gets its own listener (the manager closes it when it stops), so
// gatewayURL changes on a restart.
func addGateway(mgr ctrl.Manager) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	gatewayURL = "http://" + ln.Addr().String()
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countTokenReviews{rt} })
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	Expect(err).NotTo(HaveOccurred())
	ttl := kubeauth.Options{AllowTTL: gatewayAllowTTL, DenyTTL: gatewayDenyTTL}
	authn := ttl
	authn.Audiences = []string{gatewayAudience}
	gw := &gateway.Gateway{Registry: registry, Log: ctrl.Log.WithName("gateway"), RevalidateInterval: gatewayRevalidate,
		Auth: gateway.NewAccess(kubeauth.NewAuthenticator(c, authn), kubeauth.NewAuthorizer(c, ttl),
			gateway.CachedServerNames(mgr.GetCache(), nil), ttl)}
	Expect(gw.AddToManager(mgr, ln)).To(Succeed())
}

// tokenReviews counts the TokenReviews the suite's gateway sent to the
// apiserver.
var tokenReviews atomic.Int64

type countTokenReviews struct{ next http.RoundTripper }

func (c countTokenReviews) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tokenreviews") {
		tokenReviews.Add(1)
	}
	return c.next.RoundTrip(r)
}

// managerLog holds everything the manager logged.
var managerLog = &syncBuffer{}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func stopManager() {
	if mgrCancel == nil {
		return
	}
	mgrCancel()
	Eventually(mgrDone, 40*time.Second).Should(BeClosed())
	mgrCancel = nil
}

// newNamespace creates a namespace for one spec.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "mcps-"}}
	Expect(k8s.Create(context.Background(), ns)).To(Succeed())
	return ns.Name
}

func ctrlConfig() config.Controller {
	// A manager restart in the suite registers the controller name again.
	return config.Controller{SkipNameValidation: ptr.To(true)}
}
