package peer_test

import (
	"context"
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mcpbridge/operator/internal/peer"
)

var _ = Describe("A replica in a manager", func() {
	It("serves its endpoint whether or not it is the elected leader", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		// Two managers electing a leader in ns: the second never leads while
		// the first renews.
		leading := startManager(ctx, ns, "replica-a", newLocals())
		Eventually(leading.Elected()).Should(BeClosed())
		local := newLocals()
		local.set("team", "team/search", &jsonCaller{result: json.RawMessage(`{"content":[]}`)})
		standby := startManager(ctx, ns, "replica-b", local)
		Expect(standby.Elected()).NotTo(BeClosed())

		_, _, err := leading.replica.Client().Call(ctx, peer.Target{Name: "replica-b", Address: standby.address()},
			peer.Call{Namespace: "team", Owner: "team/search", Tool: "find"})
		Expect(err).NotTo(HaveOccurred())
		Expect(standby.Elected()).NotTo(BeClosed(), "the call was served by a replica that does not lead")
	})
})

type managed struct {
	ctrl.Manager
	replica *peer.Replica
}

func (m *managed) address() string {
	GinkgoHelper()
	Eventually(m.replica.Endpoint().Bound()).Should(BeClosed())
	return m.replica.Endpoint().Addr().String()
}

// startManager runs a manager with leader election in ns and a replica's
// certificate and endpoint added, until the spec ends.
func startManager(ctx context.Context, ns, name string, local *locals) *managed {
	GinkgoHelper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                  env.Scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		LeaderElection:          true,
		LeaderElectionID:        "peer-test",
		LeaderElectionNamespace: ns,
	})
	Expect(err).NotTo(HaveOccurred())
	rep, err := peer.New(peer.Config{Name: name, Namespace: ns, BindAddress: "127.0.0.1:0", Client: mgr.GetClient(),
		Reader: mgr.GetAPIReader(), Local: local.lookup, Log: GinkgoLogr.WithName(name)})
	Expect(err).NotTo(HaveOccurred())
	Expect(rep.AddToManager(mgr)).To(Succeed())
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	DeferCleanup(func() {
		cancel()
		Eventually(done).WithTimeout(30 * time.Second).Should(Receive(BeNil()))
	})
	Eventually(rep.Issued()).WithTimeout(10 * time.Second).Should(BeClosed())
	return &managed{Manager: mgr, replica: rep}
}
