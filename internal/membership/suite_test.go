package membership_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gstruct"
	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/mcpbridge/operator/internal/membership"
	"github.com/mcpbridge/operator/internal/testenv"
)

var (
	env       *testenv.Env
	clientset kubernetes.Interface
)

func TestMembership(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Membership Suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	env, err = testenv.Start()
	Expect(err).NotTo(HaveOccurred())
	clientset, err = kubernetes.NewForConfig(env.Config)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// replica is one Membership running as a manager would run it.
type replica struct {
	*membership.Membership
	cancel context.CancelFunc
	exited chan struct{} // closed when Start has returned err
	err    error
}

// replicaSetup is what startReplica starts a member with.
type replicaSetup struct {
	cfg    membership.Config
	report func() string // for ReportUnreachable, when set
}

type replicaOption func(*replicaSetup)

func withClockOffset(d time.Duration) replicaOption {
	return func(s *replicaSetup) { s.cfg.Now = func() time.Time { return time.Now().Add(d) } }
}

func withClient(c kubernetes.Interface) replicaOption {
	return func(s *replicaSetup) { s.cfg.Client = c }
}

func withLeaseDuration(d time.Duration) replicaOption {
	return func(s *replicaSetup) { s.cfg.LeaseDuration = d }
}

func withHoldGrace(d time.Duration) replicaOption {
	return func(s *replicaSetup) { s.cfg.HoldGrace = d }
}

func withReleaseAfter(ch <-chan struct{}) replicaOption {
	return func(s *replicaSetup) { s.cfg.ReleaseAfter = ch }
}

// withUnreachableReport has the member's renewals say what report says
// of the replicas it cannot reach.
func withUnreachableReport(report func() string) replicaOption {
	return func(s *replicaSetup) { s.report = report }
}

// startReplica starts a member named name in ns; it is stopped
// gracefully when the spec ends, if it still runs.
func startReplica(ns, name string, opts ...replicaOption) *replica {
	GinkgoHelper()
	setup := replicaSetup{cfg: membership.Config{Name: name, Address: "10.0.0.1:8091", Namespace: ns,
		LeaseDuration: 2 * time.Second, Client: clientset}}
	for _, o := range opts {
		o(&setup)
	}
	m, err := membership.New(setup.cfg)
	Expect(err).NotTo(HaveOccurred())
	if setup.report != nil {
		m.ReportUnreachable(setup.report)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{Membership: m, cancel: cancel, exited: make(chan struct{})}
	go func() {
		defer close(r.exited)
		r.err = m.Start(ctx)
	}()
	DeferCleanup(func() { _ = r.stop() }) // a refused replica has returned its error already
	return r
}

// stop cancels the replica's context and waits for Start to return.
func (r *replica) stop() error {
	r.cancel()
	select {
	case <-r.exited:
		return r.err
	case <-time.After(30 * time.Second):
		Fail("the membership did not stop within 30s")
		return nil
	}
}

// crash stops the replica as a killed process stops: its Lease stays.
func (r *replica) crash() {
	membership.KeepLeaseOnStop(r.Membership)
	Expect(r.stop()).To(Succeed())
}

func (r *replica) joinedWithin(d time.Duration) {
	GinkgoHelper()
	Eventually(r.Joined()).WithTimeout(d).Should(BeClosed())
}

func memberNames(r *replica) func() []string {
	return func() []string {
		var out []string
		for _, m := range r.Members() {
			out = append(out, m.Name)
		}
		return out
	}
}

func newNamespace(ctx context.Context) string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "members-"}}
	Expect(env.Client.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

// member matches a live replica by name and address, whatever its process.
func member(name, address string) types.GomegaMatcher {
	return gstruct.MatchFields(gstruct.IgnoreExtras, gstruct.Fields{
		"Name": Equal(name), "Address": Equal(address),
	})
}
