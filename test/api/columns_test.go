package api_test

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// table parses kubectl's table output: the header's words are the column
// names, and each cell is the text under its column (empty cells stay empty).
func table(out string) (header []string, rows [][]string) {
	GinkgoHelper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	Expect(lines).NotTo(BeEmpty())
	var starts []int
	for i, r := range lines[0] {
		if r != ' ' && (i == 0 || lines[0][i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	header = strings.Fields(lines[0])
	for _, l := range lines[1:] {
		row := make([]string, len(starts))
		for c, start := range starts {
			end := len(l)
			if c+1 < len(starts) && starts[c+1] < end {
				end = starts[c+1]
			}
			if start < end {
				row[c] = strings.TrimSpace(l[start:end])
			}
		}
		rows = append(rows, row)
	}
	return header, rows
}

// columns are what `kubectl get mcpservers` shows; -o wide adds RUNTIME
// and REPLICA.
var (
	columns     = []string{"NAME", "SERVER", "TRANSPORT", "PHASE", "TOOLS", "ATTEMPTS", "GENERATION", "AGE"}
	wideColumns = append(append([]string{}, columns...), "RUNTIME", "REPLICA")
)

var _ = Describe("Printer columns and the status subresource", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
	})

	// create creates obj in ns and returns it as stored.
	create := func(ctx SpecContext, obj *v1alpha1.McpServer) *v1alpha1.McpServer {
		GinkgoHelper()
		obj = obj.DeepCopy()
		obj.Namespace = ns
		Expect(k8sClient.Create(ctx, obj)).To(Succeed())
		return obj
	}

	It("kubectl get mcpservers shows the status columns in order, and -o wide adds RUNTIME and REPLICA", func(ctx SpecContext) {
		gh := create(ctx, stdioServer(named("github")))
		gh.Status = v1alpha1.McpServerStatus{
			ObservedGeneration:   gh.Generation,
			Phase:                v1alpha1.PhaseReady,
			ServerName:           "github",
			Runtime:              v1alpha1.RuntimePod,
			Replica:              "mcpbridge-manager-5f7c9d8b4-q7x2m",
			PodName:              "github-mcp-7d9c5b6f8-xk2p4",
			ConnectionGeneration: 7,
			FailedAttempts:       3,
			ToolCount:            26,
		}
		Expect(k8sClient.Status().Update(ctx, gh)).To(Succeed())
		create(ctx, httpServer()) // web-tools, no status yet

		for _, wide := range []bool{false, true} {
			args, want := []string{"get", "mcpservers", "-n", ns}, columns
			if wide {
				args, want = append(args, "-o", "wide"), wideColumns
			}
			header, rows := table(kubectl(ctx, args...))
			Expect(header).To(Equal(want), "kubectl %s", strings.Join(args, " "))
			Expect(rows).To(HaveLen(2))
			Expect(rows[0][:7]).To(Equal([]string{"github", "github", "stdio", "Ready", "26", "3", "7"}))
			Expect(rows[0][7]).To(MatchRegexp(`^[0-9]+[smhd]`))
			// Before the operator writes status, the phase is blank and the
			// counters read the CRD's defaults (status defaults to
			// observedGeneration -1, and the counters within it to 0).
			Expect(rows[1][:7]).To(Equal([]string{"web-tools", "", "streamable-http", "", "0", "0", "0"}))
			Expect(rows[1][7]).To(MatchRegexp(`^[0-9]+[smhd]`))
			if wide {
				Expect(rows[0][8:]).To(Equal([]string{"Pod", "mcpbridge-manager-5f7c9d8b4-q7x2m"}))
				Expect(rows[1][8:]).To(Equal([]string{"", ""}))
			}
		}
	})

	It("answers to the short name mcps and the category mcpbridge", func(ctx SpecContext) {
		create(ctx, stdioServer())
		for _, resource := range []string{"mcps", "mcpbridge", "mcpserver", "mcpservers.mcpbridge.dev"} {
			header, rows := table(kubectl(ctx, "get", resource, "-n", ns))
			Expect(header).To(Equal(columns), "kubectl get %s", resource)
			Expect(rows).To(HaveLen(1), "kubectl get %s", resource)
			Expect(rows[0][0]).To(Equal("fixture"), "kubectl get %s", resource)
		}
	})

	It("keeps status out of updates of the main resource", func(ctx SpecContext) {
		s := create(ctx, stdioServer())
		Expect(s.Generation).To(Equal(int64(1)))

		s.Status.Phase = v1alpha1.PhaseReady
		s.Status.ToolCount = 5
		s.Spec.ToolCallTimeoutMs = ptr.To[int32](1234)
		Expect(k8sClient.Update(ctx, s)).To(Succeed())

		got := &v1alpha1.McpServer{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
		Expect(got.Spec.ToolCallTimeoutMs).To(HaveValue(Equal(int32(1234))))
		Expect(got.Generation).To(Equal(int64(2)))
		Expect(got.Status).To(Equal(v1alpha1.McpServerStatus{ObservedGeneration: -1}), "the CRD's default status, unwritten")
	})

	It("keeps spec out of updates of the status subresource, which do not bump the generation", func(ctx SpecContext) {
		s := create(ctx, stdioServer())

		s.Status.Phase = v1alpha1.PhaseConnecting
		s.Status.ServerName = "fixture"
		s.Spec.Stdio.Command = "changed"
		Expect(k8sClient.Status().Update(ctx, s)).To(Succeed())

		got := &v1alpha1.McpServer{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
		Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseConnecting))
		Expect(got.Status.ServerName).To(Equal("fixture"))
		Expect(got.Spec.Stdio.Command).To(Equal("bin/mcp-fixture"))
		Expect(got.Generation).To(Equal(int64(1)))
	})

	It("refuses a status phase outside the enum", func(ctx SpecContext) {
		s := create(ctx, stdioServer())
		s.Status.Phase = "Exploded"
		expectInvalid(k8sClient.Status().Update(ctx, s), "status.phase")
	})
})
