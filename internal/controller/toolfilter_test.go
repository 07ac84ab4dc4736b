package controller_test

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
)

// See docs/design.md, "Tool sync".
var _ = Describe("spec.tools", func() {
	BeforeEach(ensureGatewayUserRole)

	It("publishes only the tools that pass, to status, the registry and the gateway alike, and swaps an edit in place", func(ctx SpecContext) {
		ns := newNamespace()
		entry := everythingEntry()
		all := everythingTools(entry)
		Expect(all).To(ContainElements("echo", "get-env", "get-sum", "trigger-long-running-operation"))

		obj := stdioServer(ns, "everything")
		obj.Spec.Stdio.Command, obj.Spec.Stdio.Args = "node", []string{entry, "stdio"}
		obj.Spec.ConnectionTimeoutMs = ptr32(30000)
		obj.Spec.Tools = &v1alpha1.ToolFilter{Include: []v1alpha1.ToolGlob{"get-*", "echo"}, Exclude: []v1alpha1.ToolGlob{"get-env", "*-roots-*"}}
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		first := readyAt(ns, "everything", 1)

		want := passing(all, policy.ToolFilter{Include: []string{"get-*", "echo"}, Exclude: []string{"get-env", "*-roots-*"}})
		Expect(want).To(ContainElements("echo", "get-sum"))
		Expect(want).NotTo(ContainElement("get-env"))
		var changes atomic.Int32
		agent := connectAgent(ns, saToken(ns, "agent", ns), &changes)
		expectPublished(ns, "everything", agent, want)

		// The edit: a new spec generation, the same connection.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		obj.Spec.Tools = &v1alpha1.ToolFilter{Include: []v1alpha1.ToolGlob{"trigger-*"}, Exclude: []v1alpha1.ToolGlob{"*-async"}}
		Expect(k8s.Update(ctx, obj)).To(Succeed())
		want = passing(all, policy.ToolFilter{Include: []string{"trigger-*"}, Exclude: []string{"*-async"}})
		Expect(want).To(ContainElement("trigger-long-running-operation"))
		Eventually(func(g Gomega) {
			got := get(ns, "everything")
			g.Expect(got.Status.ObservedGeneration).To(Equal(obj.Generation))
			g.Expect(rawToolNames(got)).To(Equal(want))
		}, eventuallyTimeout, poll).Should(Succeed())
		expectPublished(ns, "everything", agent, want)
		Eventually(changes.Load, eventuallyTimeout, poll).Should(BeNumerically(">=", 1), "agents heard of the new list")
		after := get(ns, "everything")
		Expect(after.Status.ConnectionGeneration).To(Equal(first.Status.ConnectionGeneration), "no reconnect")
		Expect(after.Status.Phase).To(Equal(v1alpha1.PhaseReady))
		Eventually(hasEvent(ns, "everything", v1alpha1.ReasonToolsChanged, "published"), eventuallyTimeout, poll).Should(BeTrue())

		// Any other edit is still a hot swap: a new connection generation.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		obj.Spec.ToolCallTimeoutMs = ptr32(12345)
		Expect(k8s.Update(ctx, obj)).To(Succeed())
		readyAt(ns, "everything", first.Status.ConnectionGeneration+1)
		expectPublished(ns, "everything", agent, want)
	})
})

// everythingTools lists server-everything's raw tool names, straight from
// the server, with the same (empty) client capabilities as the supervisor.
func everythingTools(entry string) []string {
	c := mcp.NewClient(&mcp.Implementation{Name: "direct", Version: "test"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	sess, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: exec.Command("node", entry, "stdio")}, nil)
	Expect(err).NotTo(HaveOccurred())
	defer sess.Close()
	var names []string
	for t, err := range sess.Tools(context.Background(), nil) {
		Expect(err).NotTo(HaveOccurred())
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return names
}

func passing(names []string, f policy.ToolFilter) []string {
	var out []string
	for _, n := range names {
		if f.Allows(n) {
			out = append(out, n)
		}
	}
	return out
}

func rawToolNames(obj *v1alpha1.McpServer) []string {
	out := make([]string, len(obj.Status.Tools))
	for i, t := range obj.Status.Tools {
		out[i] = t.RawName
	}
	slices.Sort(out)
	return out
}

// expectPublished: status (tools and toolCount), the registry and the
// gateway all hold exactly the raw names want.
func expectPublished(ns, name string, agent *mcp.ClientSession, want []string) {
	GinkgoHelper()
	prefix := "mcp__" + name + "__"
	Eventually(func(g Gomega) {
		got := get(ns, name)
		g.Expect(rawToolNames(got)).To(Equal(want))
		g.Expect(got.Status.ToolCount).To(BeEquivalentTo(len(want)))

		var reg []string
		for _, t := range registry.Owned(ns, ns+"/"+name) {
			reg = append(reg, t.RawName)
		}
		slices.Sort(reg)
		g.Expect(reg).To(Equal(want))

		var viaGateway []string
		for t, err := range agent.Tools(context.Background(), nil) {
			g.Expect(err).NotTo(HaveOccurred())
			viaGateway = append(viaGateway, strings.TrimPrefix(t.Name, prefix))
		}
		slices.Sort(viaGateway)
		g.Expect(viaGateway).To(Equal(want))
	}, eventuallyTimeout, poll).Should(Succeed())
}
