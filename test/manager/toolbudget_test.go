package manager_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/test/fixture"
)

// TestReplicasKeepOneToolBudgetPerNamespace publishes the servers of one
// namespace one after another over two replicas, each server's tools about
// 0.4 MiB of JSON against a namespace budget of 1 MiB: two are published,
// whichever replicas own them, and every later one is refused with
// ToolBudgetExceeded. An owner that counted only its own servers would
// let each replica publish two.
func TestReplicasKeepOneToolBudgetPerNamespace(t *testing.T) {
	const n = 6
	g := NewWithT(t)
	leases, tenant := newNamespace(t, "replicas-"), newNamespace(t, "budget-")
	rs := []*replica{
		startReplica(t, leases, "r1", "--max-tool-bytes-per-namespace=1Mi"),
		startReplica(t, leases, "r2", "--max-tool-bytes-per-namespace=1Mi"),
	}
	url := serveFixture(t, fixture.Options{Tools: 40, SchemaBytes: 10 << 10})
	owners := map[string][]string{}
	var published []string
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		createHTTPServer(t, tenant, name, url)
		var m v1alpha1.McpServer
		g.Eventually(func(g Gomega) {
			m = servers(g, tenant)[name]
			g.Expect(m.Status.Phase).To(BeElementOf(v1alpha1.PhaseReady, v1alpha1.PhaseConflict))
		}, time.Minute, 100*time.Millisecond).Should(Succeed(), "%s settles", name)
		owners[m.Status.Replica] = append(owners[m.Status.Replica], name)
		if m.Status.Phase == v1alpha1.PhaseConflict {
			ready := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(v1alpha1.ReasonToolBudgetExceeded), "%s: %s", name, ready.Message)
			g.Expect(ready.Message).To(ContainSubstring("--max-tool-bytes-per-namespace"))
			continue
		}
		published = append(published, name)
		// Both replicas serve it before the next server comes, so that
		// whichever replica owns that one has seen this one.
		for _, r := range rs {
			g.Eventually(func() ([]string, error) {
				return listedTools(ctx(t), r.gateway, tenant)
			}, time.Minute, 100*time.Millisecond).Should(ContainElement("mcp__"+name+"__"+fixture.ToolEcho), "on %s", r.name)
		}
	}
	t.Logf("owners: %v", owners)
	g.Expect(published).To(HaveLen(2), "published within the namespace's budget: %v (owners %v)", published, owners)
}
