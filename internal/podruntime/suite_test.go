package podruntime_test

import (
	"context"
	"sync"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/mcpbridge/operator/internal/testenv"
)

// The envtest suite: the rendered objects as a real kube-apiserver admits
// them. The plain tests beside it check the rendering itself.

var (
	testEnv *testenv.Env
	// k8s talks to the apiserver and records every warning it answers with.
	k8s      client.Client
	warnings *warningRecorder
)

func TestPodRuntimeOnAnAPIServer(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Pod runtime objects on a real apiserver")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	testEnv, err = testenv.Start()
	Expect(err).NotTo(HaveOccurred(), "starting the control plane")

	warnings = &warningRecorder{}
	cfg := rest.CopyConfig(testEnv.Config)
	cfg.WarningHandlerWithContext = warnings
	k8s, err = client.New(cfg, client.Options{Scheme: testEnv.Scheme})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	Expect(testEnv.Stop()).To(Succeed())
})

// warningRecorder keeps the apiserver's warnings (the Warning headers that
// Pod Security admission answers with).
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

// during returns the warnings that f's requests were answered with. Specs
// run one at a time, so no other request adds to them meanwhile.
func (w *warningRecorder) during(f func()) []string {
	w.mu.Lock()
	start := len(w.msgs)
	w.mu.Unlock()
	f()
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs[start:]...)
}
