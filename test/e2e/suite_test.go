package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// ReportAfterEach keeps what explains a failure: the Pods, the McpServers
// and the manager's logs go to the log directory with the components' logs
// (the node's own state vanishes with the sandbox).
var _ = ReportAfterEach(func(ctx SpecContext, r SpecReport) {
	if !r.Failed() || cluster == nil {
		return
	}
	path := filepath.Join(cluster.LogDir, fmt.Sprintf("failure-%d.txt", r.LeafNodeLocation.LineNumber))
	var out strings.Builder
	for _, args := range [][]string{
		{"get", "pods,deployments,leases", "-A", "-o", "wide"},
		{"get", "mcpservers", "-A", "-o", "yaml"},
		{"get", "events", "-A"},
		{"logs", "-n", systemNS, "-l", "app.kubernetes.io/component=manager", "--tail=200", "--prefix"},
	} {
		res, err := cluster.Kubectl(ctx, args...)
		fmt.Fprintf(&out, "$ kubectl %s\n%s%v\n", strings.Join(args, " "), res, err)
	}
	// Also in the output: the log directory vanishes with the sandbox when
	// the checkout lies under one of its overlays (e.g. /tmp).
	GinkgoWriter.Print(out.String())
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err == nil {
		GinkgoWriter.Printf("diagnostics: %s; component logs: %s\n", path, cluster.LogDir)
	}
})
