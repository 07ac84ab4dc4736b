package manager_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/testenv"
	"github.com/mcpbridge/operator/test/fixture"
)

// replica is one manager process among several against the same
// apiserver, as a Deployment's replicas are.
type replica struct {
	name, gateway, probes, metrics string
	proc                           *managerProcess
}

// startReplicas runs n managers named r1..rn whose Leases live in ns, each
// with its own loopback ports, as the Pods of one Deployment would be.
func startReplicas(t *testing.T, ns string, n int) []*replica {
	t.Helper()
	rs := make([]*replica, n)
	for i := range rs {
		r := &replica{name: fmt.Sprintf("r%d", i+1), gateway: freeAddr(t), probes: freeAddr(t), metrics: freeAddr(t)}
		r.proc = runManager(t, r.probes, "--kubeconfig="+env.KubeconfigPath, "--health-probe-bind-address="+r.probes,
			"--metrics-bind-address="+r.metrics, "--metrics-secure=false", "--gateway-bind-address="+r.gateway,
			"--gateway-auth=none", "--gateway-tls=false", "--upstream-allow-cidrs=127.0.0.0/8",
			"--replica-name="+r.name, "--replica-bind-address="+freeAddr(t), "--replica-lease-duration=3s",
			"--manager-namespace="+ns)
		rs[i] = r
	}
	return rs
}

// auditLines counts the audit lines of tool in a replica's log.
func auditLines(t *testing.T, r *replica, tool string) int {
	t.Helper()
	b, err := os.ReadFile(r.proc.logPath)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "audit") && strings.Contains(line, `"tools/call"`) && strings.Contains(line, tool) {
			n++
		}
	}
	return n
}

// servers reads the McpServers of ns by name.
func servers(g Gomega, ns string) map[string]v1alpha1.McpServer {
	list := &v1alpha1.McpServerList{}
	g.Expect(env.Client.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
	out := map[string]v1alpha1.McpServer{}
	for _, m := range list.Items {
		out[m.Name] = m
	}
	return out
}

// allReadyOn waits until every McpServer of ns is Ready, and returns them.
func allReadyOn(t *testing.T, ns string, names []string, owners []string) map[string]v1alpha1.McpServer {
	t.Helper()
	var got map[string]v1alpha1.McpServer
	NewWithT(t).Eventually(func(g Gomega) {
		got = servers(g, ns)
		for _, n := range names {
			g.Expect(got).To(HaveKey(n))
			g.Expect(got[n].Status.Phase).To(Equal(v1alpha1.PhaseReady), n)
			g.Expect(owners).To(ContainElement(got[n].Status.Replica), n)
		}
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	return got
}

// listedTools is what an agent of ns sees through one replica's gateway.
func listedTools(ctx context.Context, gateway, ns string) ([]string, error) {
	cs, err := connectAgent(ctx, gateway, ns)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		names = append(names, tool.Name)
	}
	return names, nil
}

func connectAgent(ctx context.Context, gateway, ns string) (*mcp.ClientSession, error) {
	agent := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, nil)
	return agent.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: "http://" + gateway + "/namespaces/" + ns + "/mcp", HTTPClient: &http.Client{}, MaxRetries: -1}, nil)
}

// connectedOn is the value of mcpbridge_connection_up for ns/name on a
// replica's metrics, 0 when it has none.
func connectedOn(r *replica, ns, name string) float64 {
	text, err := scrapeText(r.metrics)
	if err != nil {
		return -1
	}
	v, err := sample(text, fmt.Sprintf(`mcpbridge_connection_up{name=%q,namespace=%q}`, name, ns))
	if err != nil {
		return 0
	}
	return v
}

// TestReplicasShareTheServers runs three managers against one apiserver:
// each McpServer is run by exactly one of them, they share the servers
// between them, every replica's gateway lists every tool, and a replica
// that stops moves only its own servers.
func TestReplicasShareTheServers(t *testing.T) {
	const n = 9
	g := NewWithT(t)
	leases, tenant := newNamespace(t, "replicas-"), newNamespace(t, "tenant-")
	rs := startReplicas(t, leases, 3)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("s%d", i)
		createHTTPServer(t, tenant, names[i], serveFixture(t, fixture.Options{}))
	}
	all := []string{"r1", "r2", "r3"}
	before := allReadyOn(t, tenant, names, all)

	// Spread and exclusive: one owner each, connected there only, and the
	// holder of its McpToolSet.
	owners := map[string][]string{}
	for _, name := range names {
		owner := before[name].Status.Replica
		owners[owner] = append(owners[owner], name)
		ts := &v1alpha1.McpToolSet{}
		g.Expect(env.Client.Get(ctx(t), client.ObjectKey{Namespace: tenant, Name: name}, ts)).To(Succeed())
		g.Expect(ts.Spec.Holder).To(Equal(owner), name)
		for _, r := range rs {
			want := 0.0
			if r.name == owner {
				want = 1
			}
			g.Eventually(func() float64 { return connectedOn(r, tenant, name) }, 10*time.Second, 100*time.Millisecond).
				Should(Equal(want), "%s connected on %s", name, r.name)
		}
	}
	g.Expect(len(owners)).To(BeNumerically(">=", 2), "9 servers all on one replica: %v", owners)

	// Every replica lists every server's tools, the same ones.
	var listed []string
	for _, r := range rs {
		g.Eventually(func(g Gomega) {
			tools, err := listedTools(ctx(t), r.gateway, tenant)
			g.Expect(err).NotTo(HaveOccurred())
			for _, name := range names {
				g.Expect(tools).To(ContainElement("mcp__"+name+"__"+fixture.ToolEcho), "on %s", r.name)
			}
			if listed != nil {
				g.Expect(tools).To(Equal(listed), "on %s", r.name)
			}
			listed = tools
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	}

	// A call through a replica that does not own the server reaches the
	// owner's connection once, and is audited once, where the agent called.
	var owner, entry *replica
	for _, r := range rs {
		if r.name == before["s0"].Status.Replica {
			owner = r
		} else {
			entry = r
		}
	}
	cs, err := connectAgent(ctx(t), entry.gateway, tenant)
	g.Expect(err).NotTo(HaveOccurred())
	res, err := cs.CallTool(ctx(t), &mcp.CallToolParams{Name: "mcp__s0__" + fixture.ToolEcho, Arguments: map[string]any{"text": "forwarded"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeFalse(), "%v", res.Content)
	g.Expect(res.Content).To(HaveLen(1))
	g.Expect(res.Content[0].(*mcp.TextContent).Text).To(ContainSubstring("forwarded"))
	cs.Close()
	calls := func(r *replica) float64 {
		text, err := scrapeText(r.metrics)
		g.Expect(err).NotTo(HaveOccurred())
		v, _ := sample(text, fmt.Sprintf(`mcpbridge_tool_calls_total{name="s0",namespace=%q,outcome="success"}`, tenant))
		return v
	}
	g.Expect(calls(owner)).To(Equal(1.0), "the owner's connection made the call once")
	g.Expect(calls(entry)).To(BeZero(), "the replica the agent called has no connection of its own")
	g.Expect(auditLines(t, entry, "mcp__s0__"+fixture.ToolEcho)).To(Equal(1), "audited where the agent called")
	g.Expect(auditLines(t, owner, "mcp__s0__"+fixture.ToolEcho)).To(BeZero(), "and only there")

	// r3 leaves (SIGTERM): its servers move to r1 and r2; the others keep
	// their owner and their connection generation.
	leaving := rs[2]
	g.Expect(leaving.proc.stop(syscall.SIGTERM)).To(Succeed())
	after := allReadyOn(t, tenant, names, all[:2])
	for _, name := range names {
		if before[name].Status.Replica == leaving.name {
			continue
		}
		g.Expect(after[name].Status.Replica).To(Equal(before[name].Status.Replica), name)
		g.Expect(after[name].Status.ConnectionGeneration).To(Equal(before[name].Status.ConnectionGeneration), name)
	}
	for _, r := range rs[:2] {
		g.Eventually(func(g Gomega) {
			tools, err := listedTools(ctx(t), r.gateway, tenant)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(tools).To(Equal(listed), "on %s", r.name)
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	}
}

var (
	fixtureOnce sync.Once
	fixtureBin  string
	fixtureErr  error
)

// stdioFixture is the mcp-fixture binary, built once.
func stdioFixture(t *testing.T) string {
	t.Helper()
	fixtureOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mcpbridge-fixture-")
		if err != nil {
			fixtureErr = err
			return
		}
		fixtureBin = filepath.Join(dir, "mcp-fixture")
		fixtureErr = testenv.Build(fixtureBin, "./test/fixture/cmd/mcp-fixture")
	})
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	return fixtureBin
}

// TestStdioHandoffNeverRunsTwoChildren moves stdio servers from one
// replica to another twice, by a replica joining and by the first one
// leaving: never do two children of one server live at once, across the
// replicas, and every server ends on the one replica left. The servers are
// slow to go (they ignore SIGTERM and linger after stdin closes, until the
// supervisor's SIGKILL), so a new owner that did not wait for the old
// one's reap would overlap them.
func TestStdioHandoffNeverRunsTwoChildren(t *testing.T) {
	const n = 8
	g := NewWithT(t)
	bin := stdioFixture(t)
	leases, tenant := newNamespace(t, "replicas-"), newNamespace(t, "stdio-")
	var procs []*managerProcess
	var mu sync.Mutex
	parents := func() []int {
		mu.Lock()
		defer mu.Unlock()
		pids := make([]int, len(procs))
		for i, p := range procs {
			pids[i] = p.cmd.Process.Pid
		}
		return pids
	}
	start := func(name string) {
		probes := freeAddr(t)
		p := runManager(t, probes, "--kubeconfig="+env.KubeconfigPath, "--health-probe-bind-address="+probes,
			"--metrics-bind-address=0", "--gateway-bind-address="+freeAddr(t), "--gateway-auth=none", "--gateway-tls=false",
			"--local-stdio-namespaces=*", "--replica-name="+name, "--replica-bind-address="+freeAddr(t),
			"--replica-lease-duration=3s", "--manager-namespace="+leases)
		mu.Lock()
		procs = append(procs, p)
		mu.Unlock()
	}
	start("r1")
	names := make([]string, n)
	watches := make([]*fixture.ChildWatch, n)
	for i := range names {
		names[i] = fmt.Sprintf("s%d", i)
		marker := "MCPBRIDGE_HANDOFF=" + tenant + "-" + names[i]
		watches[i] = fixture.WatchChildrenOf(marker, parents)
		t.Cleanup(watches[i].Stop)
		obj := &v1alpha1.McpServer{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: names[i]},
			Spec: v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStdio, Stdio: &v1alpha1.StdioTransport{
				Command: "/bin/sh", Args: []string{"-c", `trap "" TERM; "$0" "$@"; exec sleep 3600`, bin, "--ignore-sigterm"},
				Env: []corev1.EnvVar{{Name: "MCPBRIDGE_HANDOFF", Value: tenant + "-" + names[i]}}}},
		}
		g.Expect(env.Client.Create(ctx(t), obj)).To(Succeed())
	}
	allReadyOn(t, tenant, names, []string{"r1"})

	start("r2")
	moved := func() int {
		n := 0
		for _, m := range servers(g, tenant) {
			if m.Status.Replica == "r2" && m.Status.Phase == v1alpha1.PhaseReady {
				n++
			}
		}
		return n
	}
	g.Eventually(moved, time.Minute, 100*time.Millisecond).Should(BeNumerically(">", 0), "no server moved to r2")
	allReadyOn(t, tenant, names, []string{"r1", "r2"})

	g.Expect(procs[0].stop(syscall.SIGTERM)).To(Succeed())
	allReadyOn(t, tenant, names, []string{"r2"})
	for i, w := range watches {
		w.Stop()
		maxAlive, worst, distinct := w.Result()
		g.Expect(distinct).To(BeNumerically(">=", 2), "%s: the watch saw the server on r1 and on r2", names[i])
		g.Expect(maxAlive).To(Equal(1), "%s: server processes %v lived at once", names[i], worst)
	}
}

// caller calls one tool through one replica's gateway without pause, as an
// agent does, and counts what came back.
type caller struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	ok       int
	failures []string
}

func startCaller(t *testing.T, gateway, ns, tool string) *caller {
	t.Helper()
	cs, err := connectAgent(ctx(t), gateway, ns)
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithCancel(context.Background())
	cl := &caller{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(cl.done)
		defer cs.Close()
		for c.Err() == nil {
			res, err := cs.CallTool(c, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "hi"}})
			if c.Err() != nil {
				return
			}
			cl.mu.Lock()
			switch {
			case err != nil:
				cl.failures = append(cl.failures, err.Error())
			case res.IsError:
				cl.failures = append(cl.failures, "tool error: "+contentText(res))
			default:
				cl.ok++
			}
			cl.mu.Unlock()
			time.Sleep(20 * time.Millisecond) // an agent's pace, not a wait for the test
		}
	}()
	t.Cleanup(cl.stop)
	return cl
}

// contentText is the text of a result's content.
func contentText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func (cl *caller) succeeded() int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.ok
}

func (cl *caller) stop() {
	cl.cancel()
	<-cl.done
}

func (cl *caller) failed() []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return append([]string(nil), cl.failures...)
}

// TestReplicaKilledCallsWaitForTheNewOwner SIGKILLs the replica that owns
// a server while an agent calls it through another replica: the agent's
// calls wait for the new owner instead of failing (only the one in flight
// on the killed replica may fail), and no server of the other replicas
// moves or reconnects.
func TestReplicaKilledCallsWaitForTheNewOwner(t *testing.T) {
	const n = 6
	g := NewWithT(t)
	leases, tenant := newNamespace(t, "replicas-"), newNamespace(t, "tenant-")
	rs := startReplicas(t, leases, 3)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("s%d", i)
		createHTTPServer(t, tenant, names[i], serveFixture(t, fixture.Options{}))
	}
	before := allReadyOn(t, tenant, names, []string{"r1", "r2", "r3"})
	var victim, entry *replica
	for _, r := range rs {
		if r.name == before["s0"].Status.Replica {
			victim = r
		} else {
			entry = r
		}
	}
	cl := startCaller(t, entry.gateway, tenant, "mcp__s0__"+fixture.ToolEcho)
	g.Eventually(cl.succeeded, 30*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 10), "forwarded calls: %v", cl.failed)

	g.Expect(victim.proc.stop(syscall.SIGKILL)).To(HaveOccurred()) // killed
	var survivors []string
	for _, r := range rs {
		if r != victim {
			survivors = append(survivors, r.name)
		}
	}
	after := allReadyOn(t, tenant, names, survivors)
	moved := cl.succeeded()
	g.Eventually(cl.succeeded, 30*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", moved+10))
	cl.stop()
	g.Expect(len(cl.failed())).To(BeNumerically("<=", 1), "failed calls: %v", cl.failed())
	for _, name := range names {
		if before[name].Status.Replica == victim.name {
			continue
		}
		g.Expect(after[name].Status.Replica).To(Equal(before[name].Status.Replica), name)
		g.Expect(after[name].Status.ConnectionGeneration).To(Equal(before[name].Status.ConnectionGeneration), name)
	}
}
