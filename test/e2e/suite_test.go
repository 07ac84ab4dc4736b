package e2e

import (
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/internal/testcluster"
)

var (
	cluster *testcluster.Cluster
	// overlay is the kustomization the suite deploys (test/e2e/config).
	overlay string
)

// The images the suite imports; make image and hack/e2e.sh build them.
const (
	managerImage = "ghcr.io/mcpbridge/operator:dev"
	fixtureImage = "mcpbridge.dev/e2e/mcp-fixture:dev"
)

// Bounds for Eventually: generous, since the machine is shared; a healthy
// node does each of these in seconds.
const (
	timeout = 3 * time.Minute
	poll    = 250 * time.Millisecond
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "e2e (real node)")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	start := time.Now()
	var err error
	cluster, err = testcluster.Start(ctx)
	Expect(err).NotTo(HaveOccurred())
	AddReportEntry("cluster start", time.Since(start).Round(time.Millisecond).String())
	for _, name := range []string{"manager", "mcp-fixture"} {
		Expect(cluster.ImportImage(ctx, cluster.Image(name))).To(Succeed())
	}
	overlay = filepath.Join(cluster.Root(), "test", "e2e", "config")
}, NodeTimeout(5*time.Minute))

var _ = AfterSuite(func() {
	Expect(cluster.Stop()).To(Succeed())
})

// ReportAfterEach keeps the node's logs findable when a spec fails.
var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() && cluster != nil {
		GinkgoWriter.Printf("component logs: %s\n", cluster.LogDir)
	}
})
