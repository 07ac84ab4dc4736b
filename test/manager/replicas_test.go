package manager_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/membership"
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
		rs[i] = startReplica(t, ns, fmt.Sprintf("r%d", i+1))
	}
	return rs
}

// startReplica runs one manager named name whose Lease lives in ns, with
// extra flags.
func startReplica(t *testing.T, ns, name string, extra ...string) *replica {
	t.Helper()
	r := &replica{name: name, gateway: freeAddr(t), probes: freeAddr(t), metrics: freeAddr(t)}
	r.proc = runManager(t, r.probes, append([]string{"--kubeconfig=" + env.KubeconfigPath, "--health-probe-bind-address=" + r.probes,
		"--metrics-bind-address=" + r.metrics, "--metrics-secure=false", "--gateway-bind-address=" + r.gateway,
		"--gateway-auth=none", "--gateway-tls=false", "--upstream-allow-cidrs=127.0.0.0/8", "--local-stdio-namespaces=*",
		"--replica-name=" + r.name, "--replica-bind-address=" + freeAddr(t), "--replica-lease-duration=3s",
		"--manager-namespace=" + ns}, extra...)...)
	return r
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
	// The fast path audits a call after its answer is written.
	g.Eventually(func() int { return auditLines(t, entry, "mcp__s0__"+fixture.ToolEcho) }, 10*time.Second, 100*time.Millisecond).
		Should(Equal(1), "audited where the agent called")
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

// TestSigtermHandsTheServersOverAtOnce stops a replica that owns a
// Streamable HTTP and a stdio server with SIGTERM while an agent calls both
// through the other replica: the servers move to the other replica while
// the stopping one still drains its gateway (10 s here), not when it
// exits, and no call fails.
func TestSigtermHandsTheServersOverAtOnce(t *testing.T) {
	g := NewWithT(t)
	bin := stdioFixture(t)
	leases, tenant := newNamespace(t, "replicas-"), newNamespace(t, "sigterm-")
	r1 := startReplica(t, leases, "r1", "--replica-drain-delay=10s")
	r2 := startReplica(t, leases, "r2")
	url := serveFixture(t, fixture.Options{})
	// Servers until r1 owns one of each transport: ownership hashes the
	// UID, so each lands on r1 one time in two.
	var web, local string
	for i := 0; i < 20 && (web == "" || local == ""); i++ {
		h, s := fmt.Sprintf("web%d", i), fmt.Sprintf("local%d", i)
		createHTTPServer(t, tenant, h, url)
		g.Expect(env.Client.Create(ctx(t), &v1alpha1.McpServer{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: s},
			Spec: v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStdio, Stdio: &v1alpha1.StdioTransport{Command: bin}}})).To(Succeed())
		got := allReadyOn(t, tenant, []string{h, s}, []string{"r1", "r2"})
		if web == "" && got[h].Status.Replica == "r1" {
			web = h
		}
		if local == "" && got[s].Status.Replica == "r1" {
			local = s
		}
	}
	g.Expect(web).NotTo(BeEmpty(), "r1 owns no Streamable HTTP server of 20")
	g.Expect(local).NotTo(BeEmpty(), "r1 owns no stdio server of 20")
	callers := []*caller{startCaller(t, r2.gateway, tenant, "mcp__"+web+"__"+fixture.ToolEcho),
		startCaller(t, r2.gateway, tenant, "mcp__"+local+"__"+fixture.ToolEcho)}
	g.Eventually(func() bool { return callers[0].succeeded() > 5 && callers[1].succeeded() > 5 }, time.Minute, 20*time.Millisecond).
		Should(BeTrue(), "the calls through r2 never succeeded: %v %v", callers[0].failed(), callers[1].failed())

	g.Expect(r1.proc.terminate()).To(Succeed())
	allReadyOn(t, tenant, []string{web, local}, []string{"r2"})
	g.Expect(r1.proc.running()).To(BeTrue(), "the servers moved only once r1 had exited")
	for _, c := range callers {
		before := c.succeeded()
		g.Eventually(c.succeeded, time.Minute, 20*time.Millisecond).Should(BeNumerically(">", before+5), "calls stalled: %v", c.failed())
	}
	g.Expect(r1.proc.stop(syscall.SIGTERM)).To(Succeed())
	for _, c := range callers {
		c.stop()
		g.Expect(c.failed()).To(BeEmpty())
	}
}

// TestAnUnreachableReplicaIsShown runs a replica whose advertised address
// nothing answers at beside two that answer: the others show it as
// unreachable in their Leases and metrics, the replica shows its own
// address so, the servers it owns are Degraded while those of the others
// are not, the servers' message follows the replicas that report it, and
// all of it clears once it has gone.
func TestAnUnreachableReplicaIsShown(t *testing.T) {
	g := NewWithT(t)
	leases, tenant := newNamespace(t, "replicas-"), newNamespace(t, "unreachable-")
	nowhere := freeAddr(t) // closed again: nothing listens there
	r1 := startReplica(t, leases, "r1")
	r2 := startReplica(t, leases, "r2", "--replica-advertise-address="+nowhere)
	r3 := startReplica(t, leases, "r3")
	unreachable := func(r string) func(Gomega) string {
		return func(g Gomega) string {
			l := &coordinationv1.Lease{}
			g.Expect(env.Client.Get(ctx(t), client.ObjectKey{Namespace: leases, Name: membership.LeaseName(r)}, l)).To(Succeed())
			return l.Annotations[membership.UnreachableAnnotation]
		}
	}
	gauge := func(r *replica, peer string) func(Gomega) float64 {
		return func(g Gomega) float64 {
			text, err := scrapeText(r.metrics)
			g.Expect(err).NotTo(HaveOccurred())
			v, err := sample(text, fmt.Sprintf(`mcpbridge_replica_peer_unreachable{peer=%q}`, peer))
			g.Expect(err).NotTo(HaveOccurred())
			return v
		}
	}
	for _, r := range []string{"r1", "r2", "r3"} {
		g.Eventually(unreachable(r), 30*time.Second, 100*time.Millisecond).Should(
			And(HavePrefix("r2 at "+nowhere+" since "), ContainSubstring("connection refused")), "in %s's Lease", r)
	}
	g.Eventually(gauge(r1, "r2"), 10*time.Second, 100*time.Millisecond).Should(Equal(1.0))
	g.Eventually(gauge(r2, "r1"), 10*time.Second, 100*time.Millisecond).Should(Equal(0.0), "r2 reaches r1")
	g.Expect(unreachable("r1")(g)).NotTo(ContainSubstring("r1 at"), "r1 reaches itself")

	owned := map[string]string{} // a server of r1 and one of r2
	url := serveFixture(t, fixture.Options{})
	for i := 0; i < 30 && (owned["r1"] == "" || owned["r2"] == ""); i++ {
		name := fmt.Sprintf("web%d", i)
		createHTTPServer(t, tenant, name, url)
		owner := allReadyOn(t, tenant, []string{name}, []string{"r1", "r2", "r3"})[name].Status.Replica
		owned[owner] = cmp.Or(owned[owner], name)
	}
	g.Expect(owned).To(And(HaveKey("r1"), HaveKey("r2")), "30 servers, none on r1 or none on r2")
	degraded := func(name string) func(Gomega) *metav1.Condition {
		return func(g Gomega) *metav1.Condition {
			return apimeta.FindStatusCondition(servers(g, tenant)[name].Status.Conditions, v1alpha1.ConditionDegraded)
		}
	}
	isDegraded := func(by string) OmegaMatcher {
		return And(HaveField("Reason", v1alpha1.ReasonReplicaUnreachable),
			HaveField("Message", HavePrefix(by+" cannot reach this server's owner, replica r2,")))
	}
	g.Eventually(degraded(owned["r2"]), 30*time.Second, 100*time.Millisecond).Should(
		isDegraded("Replicas r1, r2, r3"), "the server of the replica nobody reaches")
	g.Expect(degraded(owned["r1"])(g)).To(BeNil(), "the server of a replica every one reaches")

	// r3 leaves: r2 keeps its server, whose status follows who reports.
	g.Expect(r3.proc.stop(syscall.SIGTERM)).To(Succeed())
	g.Eventually(degraded(owned["r2"]), 30*time.Second, 100*time.Millisecond).Should(isDegraded("Replicas r1, r2"))

	g.Expect(r2.proc.stop(syscall.SIGTERM)).To(Succeed())
	g.Eventually(unreachable("r1"), 30*time.Second, 100*time.Millisecond).Should(BeEmpty(), "r1 forgets the replica that left")
	allReadyOn(t, tenant, []string{owned["r2"]}, []string{"r1"})
	g.Eventually(degraded(owned["r2"]), 30*time.Second, 100*time.Millisecond).Should(BeNil(), "moved to r1, which every replica reaches")
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
	g := NewWithT(t)
	rig := newStdioRig(t, "MCPBRIDGE_HANDOFF")
	rig.start("r1", env.KubeconfigPath)
	names := rig.createServers(8)
	allReadyOn(t, rig.tenant, names, []string{"r1"})

	rig.start("r2", env.KubeconfigPath)
	moved := func() int {
		n := 0
		for _, m := range servers(g, rig.tenant) {
			if m.Status.Replica == "r2" && m.Status.Phase == v1alpha1.PhaseReady {
				n++
			}
		}
		return n
	}
	g.Eventually(moved, time.Minute, 100*time.Millisecond).Should(BeNumerically(">", 0), "no server moved to r2")
	allReadyOn(t, rig.tenant, names, []string{"r1", "r2"})

	g.Expect(rig.procs[0].stop(syscall.SIGTERM)).To(Succeed())
	allReadyOn(t, rig.tenant, names, []string{"r2"})
	rig.check(g, func(name string, distinct int) {
		g.Expect(distinct).To(BeNumerically(">=", 2), "%s: the watch saw the server on r1 and on r2", name)
	})
}

// stdioRig runs managers as the replicas of one Lease namespace, and stdio
// servers in a tenant namespace whose children are slow to go (they ignore
// SIGTERM and linger after stdin closes, until the supervisor's SIGKILL),
// each watched from /proc for two children alive at once.
type stdioRig struct {
	t              *testing.T
	leases, tenant string
	marker         string // the environment variable that marks a server's children

	mu      sync.Mutex
	procs   []*managerProcess
	names   []string
	watches []*fixture.ChildWatch
}

func newStdioRig(t *testing.T, marker string) *stdioRig {
	return &stdioRig{t: t, leases: newNamespace(t, "replicas-"), tenant: newNamespace(t, "stdio-"), marker: marker}
}

// parents are the managers' pids.
func (r *stdioRig) parents() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	pids := make([]int, len(r.procs))
	for i, p := range r.procs {
		pids[i] = p.cmd.Process.Pid
	}
	return pids
}

// start runs replica name, reaching the apiserver through kubeconfig.
func (r *stdioRig) start(name, kubeconfig string) {
	probes := freeAddr(r.t)
	p := runManager(r.t, probes, "--kubeconfig="+kubeconfig, "--health-probe-bind-address="+probes,
		"--metrics-bind-address=0", "--gateway-bind-address="+freeAddr(r.t), "--gateway-auth=none", "--gateway-tls=false",
		"--local-stdio-namespaces=*", "--replica-name="+name, "--replica-bind-address="+freeAddr(r.t),
		"--replica-lease-duration=3s", "--manager-namespace="+r.leases)
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
}

// createServers makes n stdio servers s0..s(n-1), watched from now on.
func (r *stdioRig) createServers(n int) []string {
	bin := stdioFixture(r.t)
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		value := r.tenant + "-" + name
		w := fixture.WatchChildrenOf(r.marker+"="+value+"\x00", r.parents) // environ entries end in NUL: s1 is not s10
		r.t.Cleanup(w.Stop)
		r.names, r.watches = append(r.names, name), append(r.watches, w)
		NewWithT(r.t).Expect(env.Client.Create(ctx(r.t), &v1alpha1.McpServer{
			ObjectMeta: metav1.ObjectMeta{Namespace: r.tenant, Name: name},
			Spec: v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStdio, Stdio: &v1alpha1.StdioTransport{
				Command: "/bin/sh", Args: []string{"-c", `trap "" TERM; "$0" "$@"; exec sleep 3600`, bin, "--ignore-sigterm"},
				Env: []corev1.EnvVar{{Name: r.marker, Value: value}}}},
		})).To(Succeed())
	}
	return r.names
}

// check stops the watches and expects one child alive at most of each
// server, and what moved of each (the distinct children seen).
func (r *stdioRig) check(g Gomega, moved func(name string, distinct int)) {
	for i, w := range r.watches {
		w.Stop()
		maxAlive, worst, distinct := w.Result()
		g.Expect(maxAlive).To(Equal(1), "%s: server processes %v lived at once", r.names[i], worst)
		moved(r.names[i], distinct)
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
// a stdio server while an agent calls it through another replica, and
// starts a replacement at once, as a Deployment does: the agent's calls
// wait for the new owner instead of failing (only the one in flight on the
// killed replica may fail), the killed replica's servers, Streamable HTTP
// and stdio, are Ready elsewhere once its Lease has expired (those that
// move to the replacement wait for that too), and no other server moves
// or reconnects but to the replacement.
func TestReplicaKilledCallsWaitForTheNewOwner(t *testing.T) {
	const n = 8
	g := NewWithT(t)
	bin := stdioFixture(t)
	leases, tenant := newNamespace(t, "replicas-"), newNamespace(t, "tenant-")
	rs := startReplicas(t, leases, 3)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("s%d", i)
		if i%2 == 0 {
			createHTTPServer(t, tenant, names[i], serveFixture(t, fixture.Options{}))
			continue
		}
		g.Expect(env.Client.Create(ctx(t), &v1alpha1.McpServer{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: names[i]},
			Spec: v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStdio, Stdio: &v1alpha1.StdioTransport{Command: bin}}})).To(Succeed())
	}
	before := allReadyOn(t, tenant, names, []string{"r1", "r2", "r3"})
	var victim, entry *replica
	for _, r := range rs {
		if r.name == before["s1"].Status.Replica {
			victim = r
		} else {
			entry = r
		}
	}
	cl := startCaller(t, entry.gateway, tenant, "mcp__s1__"+fixture.ToolEcho)
	g.Eventually(cl.succeeded, 30*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 10), "forwarded calls: %v", cl.failed)

	g.Expect(victim.proc.stop(syscall.SIGKILL)).To(HaveOccurred()) // killed
	startReplica(t, leases, "r4")                                  // joins while the killed one's Lease lives on
	survivors := []string{"r4"}
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
		if after[name].Status.Replica == "r4" {
			continue // moved to the replacement
		}
		g.Expect(after[name].Status.Replica).To(Equal(before[name].Status.Replica), name)
		g.Expect(after[name].Status.ConnectionGeneration).To(Equal(before[name].Status.ConnectionGeneration), name)
	}
}

// balancer sends each new TCP connection to a random replica among those
// whose /readyz answered 200 at its last look (every 100 ms), as a Service
// does; a kept-alive connection stays where it is until its server closes
// it.
type balancer struct {
	mu      sync.Mutex
	members []*replica
	ready   []*replica
	stop    chan struct{}
	done    chan struct{}
}

func newBalancer(t *testing.T) *balancer {
	b := &balancer{stop: make(chan struct{}), done: make(chan struct{})}
	go b.watch()
	t.Cleanup(func() { close(b.stop); <-b.done })
	return b
}

func (b *balancer) add(r *replica) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.members = append(b.members, r)
}

func (b *balancer) watch() {
	defer close(b.done)
	hc := &http.Client{Timeout: time.Second}
	for {
		b.mu.Lock()
		members := slices.Clone(b.members)
		b.mu.Unlock()
		var ready []*replica
		for _, r := range members {
			if code, _, _, err := get(hc, "http://"+r.probes+"/readyz", ""); err == nil && code == http.StatusOK {
				ready = append(ready, r)
			}
		}
		b.mu.Lock()
		b.ready = ready
		b.mu.Unlock()
		select {
		case <-b.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// client dials a ready replica's gateway for each new connection.
func (b *balancer) client() *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		b.mu.Lock()
		ready := slices.Clone(b.ready)
		b.mu.Unlock()
		if len(ready) == 0 {
			return nil, errors.New("no ready replica")
		}
		return d.DialContext(ctx, network, ready[rand.IntN(len(ready))].gateway)
	}}}
}

// TestRollingReplacementLosesNoCall replaces both replicas of two, one at
// a time as a rolling update does (a new one Ready, then SIGTERM to an old
// one), while agents of both protocol versions call a Streamable HTTP and
// a stdio server without pause through a Service-like balancer: no call
// fails, and the 2025-11-25 agent keeps its session.
func TestRollingReplacementLosesNoCall(t *testing.T) {
	g := NewWithT(t)
	bin := stdioFixture(t)
	leases, tenant := newNamespace(t, "replicas-"), newNamespace(t, "rolling-")
	lb := newBalancer(t)
	start := func(name string) *replica {
		r := &replica{name: name, gateway: freeAddr(t), probes: freeAddr(t), metrics: freeAddr(t)}
		r.proc = runManager(t, r.probes, "--kubeconfig="+env.KubeconfigPath, "--health-probe-bind-address="+r.probes,
			"--metrics-bind-address=0", "--gateway-bind-address="+r.gateway, "--gateway-auth=none", "--gateway-tls=false",
			"--upstream-allow-cidrs=127.0.0.0/8", "--local-stdio-namespaces=*", "--replica-name="+name,
			"--replica-bind-address="+freeAddr(t), "--replica-lease-duration=3s", "--replica-drain-delay=1s",
			"--manager-namespace="+leases)
		lb.add(r)
		return r
	}
	r1, r2 := start("r1"), start("r2")
	createHTTPServer(t, tenant, "web", serveFixture(t, fixture.Options{}))
	stdio := &v1alpha1.McpServer{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "local"},
		Spec: v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStdio, Stdio: &v1alpha1.StdioTransport{Command: bin}}}
	g.Expect(env.Client.Create(ctx(t), stdio)).To(Succeed())
	allReadyOn(t, tenant, []string{"web", "local"}, []string{"r1", "r2"})

	// The 2025-11-25 agent: a session, both tools in turn.
	url := "http://127.0.0.1:1/namespaces/" + tenant + "/mcp" // a loopback Host (auth is off); the balancer picks the address
	agent := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, nil)
	var cs *mcp.ClientSession
	g.Eventually(func() (err error) {
		cs, err = agent.Connect(ctx(t), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: lb.client()}, // the SDK's default retries, as agents run it
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		return err
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	defer cs.Close()
	session := cs.ID()
	g.Expect(session).NotTo(BeEmpty())
	stateful := &callLoop{}
	stateful.run(t, func(c context.Context, i int) error {
		tool := []string{"mcp__web__echo", "mcp__local__echo"}[i%2]
		res, err := cs.CallTool(c, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "hi"}})
		if err == nil && res.IsError {
			err = errors.New("tool error: " + contentText(res))
		}
		return err
	})
	// The 2026-07-28 agent: no session, a request per call.
	hc := lb.client()
	sessionless := &callLoop{}
	sessionless.run(t, func(c context.Context, i int) error {
		tool := []string{"mcp__web__echo", "mcp__local__echo"}[i%2]
		body, hdr := sessionlessCall(i, tool, `{"text":"still here"}`)
		resp, err := post(c, hc, url, body, hdr)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "still here") || strings.Contains(string(b), `"isError":true`) {
			return fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, b)
		}
		return nil
	})
	waitCalls := func() {
		a, b := stateful.succeeded(), sessionless.succeeded()
		g.Eventually(func() bool { return stateful.succeeded() >= a+10 && sessionless.succeeded() >= b+10 },
			time.Minute, 20*time.Millisecond).Should(BeTrue(), "calls stalled: %v %v", stateful.failed(), sessionless.failed())
	}
	waitCalls()

	start("r3")
	g.Expect(r1.proc.stop(syscall.SIGTERM)).To(Succeed())
	waitCalls()
	start("r4")
	g.Expect(r2.proc.stop(syscall.SIGTERM)).To(Succeed())
	allReadyOn(t, tenant, []string{"web", "local"}, []string{"r3", "r4"})
	waitCalls()

	stateful.stop()
	sessionless.stop()
	for name, l := range map[string]*callLoop{"2025-11-25": stateful, "2026-07-28": sessionless} {
		g.Expect(l.failed()).To(BeEmpty(), "%s calls failed", name)
	}
	g.Expect(cs.ID()).To(Equal(session), "the agent's session")
	t.Logf("2025-11-25: %d calls, longest gap %s; 2026-07-28: %d calls, longest gap %s",
		stateful.succeeded(), stateful.longestGap(), sessionless.succeeded(), sessionless.longestGap())
}

// callLoop runs one agent's calls one after another until stopped, and
// keeps their outcomes and the longest time without a success.
type callLoop struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	ok       int
	failures []string
	last     time.Time
	gap      time.Duration
}

func (l *callLoop) run(t *testing.T, call func(context.Context, int) error) {
	c, cancel := context.WithCancel(context.Background())
	l.cancel, l.done, l.last = cancel, make(chan struct{}), time.Now()
	go func() {
		defer close(l.done)
		for i := 0; c.Err() == nil; i++ {
			err := call(c, i)
			if c.Err() != nil {
				return
			}
			l.mu.Lock()
			if err != nil {
				l.failures = append(l.failures, err.Error())
			} else {
				l.ok++
				now := time.Now()
				l.gap = max(l.gap, now.Sub(l.last))
				l.last = now
			}
			l.mu.Unlock()
			time.Sleep(20 * time.Millisecond) // an agent's pace, not a wait for the test
		}
	}()
	t.Cleanup(l.stop)
}

func (l *callLoop) stop() {
	l.cancel()
	<-l.done
}

func (l *callLoop) succeeded() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok
}

func (l *callLoop) failed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.failures)
}

func (l *callLoop) longestGap() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gap
}
