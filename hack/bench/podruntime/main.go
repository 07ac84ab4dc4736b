// Command podruntime measures the Pod runtime on the real node of `make
// test-e2e` (internal/testcluster), against the Pod runtime's design targets
// in docs/design.md, "How it is tested":
//
//   - a server process killed inside its Pod: its tools back (the McpServer
//     Ready at the next generation) at p50 ≤ initialDelayMs + the same
//     server's Local cold start + 50 ms;
//   - a deleted Pod: Ready again in its replacement at p50 ≤ 3 s;
//   - a tools/call through the tunnel to a Pod IP adds ≤ 0.3 ms at p50 over
//     the Local runtime (a child's pipes);
//   - 50 Pod-runtime McpServers all Ready ≤ 60 s, the manager's RSS growing
//     ≤ 1 MB per server;
//   - idle servers (idle.go): a sleeping server's first call through the
//     gateway answered at p50 ≤ the node's Pod start + the server's cold
//     start + 100 ms, both measured in the same run; 100 idle servers hold
//     0 Pods, and the manager's RSS per idle server.
//
// It runs only inside hack/e2e-sandbox.sh, like the e2e suite; the script
// builds and starts it:
//
//	hack/bench-podruntime.sh [-kills=20] [-deletes=10] [-servers=50] [-calls=2000] [-idle-servers=100] [-wakes=20]
//
// The operator is deployed from config/default through test/e2e/config, as
// the e2e suite does. It is a benchmark, not a test: it asserts nothing and
// exits 0 whether or not a goal is met (1 only when it cannot measure).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/hack/bench/internal/report"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/testcluster"
)

const (
	managerImage = "ghcr.io/mcpbridge/operator:dev"
	fixtureImage = "mcpbridge.dev/e2e/mcp-fixture:dev"
	// fixtureInImage is the fixture's path in its image.
	fixtureInImage = "/mcp-fixture"
	systemNS       = "mcpbridge-system"
	benchNS        = "bench-pods"
	tunnelNS       = "bench-tunnel"

	goalDeleted  = 3 * time.Second
	goalAddedP50 = 300 * time.Microsecond
	goalFleet    = 60 * time.Second
	goalRSS      = 1 << 20 // bytes per server
	// killSlack is what the kill goal allows beyond the delay and the cold
	// start.
	killSlack = 50 * time.Millisecond
	timeout   = 3 * time.Minute
)

var (
	flagKills        = flag.Int("kills", 20, "server processes killed inside their Pod, one after another")
	flagDeletes      = flag.Int("deletes", 10, "server Pods deleted, one after another")
	flagServers      = flag.Int("servers", 50, "Pod-runtime McpServers created at once for the fleet row")
	flagCalls        = flag.Int("calls", 2000, "sequential echo calls per round and runtime")
	flagRounds       = flag.Int("rounds", 5, "Local and Pod calls alternate in this many rounds")
	flagWarmup       = flag.Int("warmup", 200, "echo calls per runtime before measuring")
	flagColdStarts   = flag.Int("cold-starts", 20, "Local cold starts (spawn, initialize, tools/list) of the fixture")
	flagInitialDelay = flag.Duration("initial-delay", 100*time.Millisecond, "reconnect.initialDelayMs of the killed server (maxDelayMs is twice that)")
	flagFixture      = flag.String("fixture", "bin/mcp-fixture", "the fixture binary, for the Local runtime's rows")
	// With the default request of 50m, a 2-core node schedules 38 servers
	// beside the manager; the fleet row is about the manager, not the node.
	flagSteps    = flag.String("steps", "cold,calls,kills,deletes,idle,wake,fleet", "which rows to measure (the operator is deployed for kills, deletes, idle, wake and fleet)")
	flagFleetCPU = flag.String("fleet-cpu-request", "10m", "spec.stdio.resources.requests.cpu of the fleet's servers (empty: the default, 50m)")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// results are what the table shows.
type results struct {
	coldStarts, kills, deletes []time.Duration
	localCalls, podCalls       []time.Duration
	fleetReady, fleetPodsReady time.Duration
	fleetReadyN                int
	rssBefore, rssAfter        int64
	idle                       idleResults
}

type bench struct {
	cluster *testcluster.Cluster
	watcher client.WithWatch
	fixture string
	res     results
}

func run() error {
	started, loadBefore := time.Now(), report.LoadAvg()
	fixture, err := filepath.Abs(*flagFixture)
	if err != nil {
		return err
	}
	ctx := context.Background()
	cluster, err := testcluster.Start(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: stop the cluster:", err)
		}
	}()
	for _, name := range []string{"manager", "mcp-fixture"} {
		if err := cluster.ImportImage(ctx, cluster.Image(name)); err != nil {
			return err
		}
	}
	w, err := client.NewWithWatch(cluster.Config, client.Options{Scheme: cluster.Client.Scheme()})
	if err != nil {
		return err
	}
	b := &bench{cluster: cluster, watcher: w, fixture: fixture}
	steps := []struct {
		key, name string
		fn        func(context.Context) error
	}{
		{"cold", "Local cold starts", b.coldStarts},
		{"calls", "tools/call, Local and through a Pod's tunnel", b.calls},
		{"", "deploy the operator", b.deploy},
		{"kills", "kills inside the Pod", b.killsInPod},
		{"deletes", "deleted Pods", b.deletedPods},
		{"idle", "idle servers", b.idle},
		{"wake", "wakes", b.wakes},
		{"fleet", "fleet", b.fleet},
		{"", "undeploy", b.undeploy},
	}
	wanted := strings.Split(*flagSteps, ",")
	for _, s := range steps {
		if s.key != "" && !slices.Contains(wanted, s.key) {
			continue
		}
		began := time.Now()
		fmt.Fprintf(os.Stderr, "bench: %s ...\n", s.name)
		if err := s.fn(ctx); err != nil {
			b.print(started, loadBefore) // what was measured so far
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(os.Stderr, "bench: %s took %s\n", s.name, time.Since(began).Round(time.Millisecond))
	}
	b.print(started, loadBefore)
	return nil
}

// ---------------------------------------------------------------------------
// The Local runtime, and tools/call both ways: supervisors in this process,
// a Local one over the fixture as its child and a Pod one over a tunnel to
// the shim in a Pod (made from podruntime's rendering, without the
// operator, so that no manager holds the shim's one tunnel).

func (b *bench) coldStarts(ctx context.Context) error {
	for range *flagColdStarts {
		began := time.Now()
		s, err := startSupervisor(ctx, localPolicy(b.fixture), nil)
		if err != nil {
			return err
		}
		b.res.coldStarts = append(b.res.coldStarts, time.Since(began))
		if err := dispose(s); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) calls(ctx context.Context) error {
	c := b.cluster.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tunnelNS}}); err != nil {
		return err
	}
	p, creds, err := createStandalone(ctx, c, tunnelNS, "tunnel", 1)
	if err != nil {
		return err
	}
	pod, err := b.readyPod(ctx, tunnelNS, "tunnel")
	if err != nil {
		return err
	}
	local, err := startSupervisor(ctx, localPolicy(b.fixture), nil)
	if err != nil {
		return err
	}
	defer func() { _ = dispose(local) }()
	remote, err := startSupervisor(ctx, p, &bridge.PodTunnel{Pods: staticPod{pod}, Token: creds.Token, Cert: creds.Cert})
	if err != nil {
		return err
	}
	defer func() { _ = dispose(remote) }()
	for _, s := range []*bridge.Supervisor{local, remote} {
		if _, err := echoes(ctx, s, *flagWarmup); err != nil {
			return err
		}
	}
	for range *flagRounds {
		l, err := echoes(ctx, local, *flagCalls)
		if err != nil {
			return err
		}
		r, err := echoes(ctx, remote, *flagCalls)
		if err != nil {
			return err
		}
		b.res.localCalls, b.res.podCalls = append(b.res.localCalls, l...), append(b.res.podCalls, r...)
	}
	return deleteNamespace(ctx, b.cluster, tunnelNS)
}

// createStandalone creates the fixture's Deployment and token Secret in ns,
// rendered by podruntime as the manager renders them but with replicas
// Pods and no McpServer, and returns the policy and credentials a
// supervisor in this program needs to reach the shim.
func createStandalone(ctx context.Context, c client.Client, ns, name string, replicas int32) (*policy.Policy, podruntime.Credentials, error) {
	obj := &v1alpha1.McpServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "bench"},
		Spec: v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStdio, Stdio: &v1alpha1.StdioTransport{
			Command: fixtureInImage, Image: fixtureImage, ImagePullPolicy: corev1.PullNever}}}
	p, err := policy.Resolve(ns, obj.Name, &obj.Spec, policy.Values{}, policy.RuntimeConfig{})
	if err != nil {
		return nil, podruntime.Credentials{}, err
	}
	creds, err := podruntime.NewCredentials(obj)
	if err != nil {
		return nil, podruntime.Credentials{}, err
	}
	d, err := podruntime.Deployment(obj, p, creds.Token, podruntime.Options{ShimImage: managerImage})
	if err != nil {
		return nil, podruntime.Credentials{}, err
	}
	d.Spec.Replicas = &replicas
	secret := podruntime.TokenSecret(obj, creds, d.Spec.Template.Annotations[podruntime.TemplateHashAnnotation])
	// No McpServer owns them here: the garbage collector would delete them.
	secret.OwnerReferences, d.OwnerReferences = nil, nil
	if err := c.Create(ctx, secret); err != nil {
		return nil, podruntime.Credentials{}, err
	}
	return p, creds, c.Create(ctx, d)
}

// staticPod is the PodSource of a Pod that stays.
type staticPod struct{ pod bridge.PodInfo }

func (s staticPod) Current() (bridge.PodInfo, bool, <-chan struct{}) { return s.pod, true, nil }

func localPolicy(fixture string) *policy.Policy {
	return &policy.Policy{
		ServerName: "fx", Transport: v1alpha1.TransportStdio,
		Stdio:           &policy.Stdio{Command: fixture, Runtime: v1alpha1.RuntimeLocal},
		ToolCallTimeout: 10 * time.Second, ConnectionTimeout: 30 * time.Second,
		Reconnect: policy.Reconnect{Enabled: true, InitialDelay: 100 * time.Millisecond, MaxDelay: time.Second, MaxAttempts: 5},
	}
}

// startSupervisor starts a supervisor and waits until it is Ready.
func startSupervisor(ctx context.Context, p *policy.Policy, pod *bridge.PodTunnel) (*bridge.Supervisor, error) {
	s := bridge.New(bridge.Options{Namespace: "bench", Name: "fx", Policy: p, Registry: registry.New(),
		Log: logr.Discard(), Pod: pod})
	s.Start(ctx)
	deadline := time.After(timeout)
	for {
		sn := s.Snapshot()
		switch sn.Phase {
		case v1alpha1.PhaseReady:
			return s, nil
		case v1alpha1.PhaseFailed:
			_ = dispose(s)
			return nil, fmt.Errorf("supervisor failed: %s", sn.Message)
		}
		select {
		case <-s.Changes():
		case <-deadline:
			_ = dispose(s)
			return nil, fmt.Errorf("not Ready after %s: %+v", timeout, sn.LastError)
		}
	}
}

func dispose(s *bridge.Supervisor) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Dispose(ctx)
}

// echoes times n sequential calls of the fixture's echo tool.
func echoes(ctx context.Context, s *bridge.Supervisor, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	args := map[string]any{"text": "hello"}
	for range n {
		began := time.Now()
		if _, err := s.CallTool(ctx, "echo", args); err != nil {
			return nil, err
		}
		out = append(out, time.Since(began))
	}
	return out, nil
}

// readyPod waits for the Ready Pod of the McpServer name.
func (b *bench) readyPod(ctx context.Context, ns, name string) (bridge.PodInfo, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var pods corev1.PodList
		if err := b.cluster.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(podruntime.Labels(name))); err != nil {
			return bridge.PodInfo{}, err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.PodIP != "" && podReady(&p) {
				return bridge.PodInfo{Name: p.Name, UID: string(p.UID), IP: p.Status.PodIP, Ready: true}, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return bridge.PodInfo{}, fmt.Errorf("no Ready Pod of %s/%s after %s", ns, name, timeout)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// The operator, deployed as the e2e suite does.

func (b *bench) deploy(ctx context.Context) error {
	overlay := filepath.Join(b.cluster.Root(), "test", "e2e", "config")
	if _, err := b.cluster.Kubectl(ctx, "apply", "--server-side", "-k", overlay); err != nil {
		return err
	}
	if _, err := b.cluster.Kubectl(ctx, "-n", systemNS, "rollout", "status", "deployment/mcpbridge-manager", "--timeout=3m"); err != nil {
		return err
	}
	return b.cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}})
}

func (b *bench) undeploy(ctx context.Context) error {
	if err := deleteNamespace(ctx, b.cluster, benchNS); err != nil {
		return err
	}
	overlay := filepath.Join(b.cluster.Root(), "test", "e2e", "config")
	_, err := b.cluster.Kubectl(ctx, "delete", "-k", overlay, "--wait=true", "--timeout=3m")
	return err
}

func deleteNamespace(ctx context.Context, c *testcluster.Cluster, ns string) error {
	_, err := c.Kubectl(ctx, "delete", "namespace", ns, "--wait=true", "--timeout=3m")
	return err
}

// server is the fixture in its image as a Pod-runtime McpServer.
func server(name string) *v1alpha1.McpServer {
	initial := int32(flagInitialDelay.Milliseconds())
	return &v1alpha1.McpServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: name},
		Spec: v1alpha1.McpServerSpec{
			Transport: v1alpha1.TransportStdio,
			Stdio: &v1alpha1.StdioTransport{Command: fixtureInImage, Image: fixtureImage,
				ImagePullPolicy: corev1.PullNever},
			Reconnect: &v1alpha1.ReconnectPolicy{InitialDelayMs: &initial, MaxDelayMs: ptr(2 * initial), MaxAttempts: ptr(int32(1000))},
		},
	}
}

// withFleetCPU sets -fleet-cpu-request on a server of the fleet or idle
// rows.
func withFleetCPU(s *v1alpha1.McpServer) *v1alpha1.McpServer {
	if *flagFleetCPU != "" {
		s.Spec.Stdio.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(*flagFleetCPU)}}
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// watchServers watches the McpServers of benchNS from now on.
func (b *bench) watchServers(ctx context.Context) (watch.Interface, error) {
	return b.watcher.Watch(ctx, &v1alpha1.McpServerList{}, client.InNamespace(benchNS))
}

// until reads w until cond holds for the McpServer name, and returns when
// the event that showed it arrived.
func until(w watch.Interface, name string, cond func(*v1alpha1.McpServer) bool) (time.Time, *v1alpha1.McpServer, error) {
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return time.Time{}, nil, errors.New("the watch ended")
			}
			at := time.Now()
			if s, ok := ev.Object.(*v1alpha1.McpServer); ok && s.Name == name && cond(s) {
				return at, s, nil
			}
		case <-deadline:
			return time.Time{}, nil, fmt.Errorf("%s: not there after %s", name, timeout)
		}
	}
}

func readyAt(gen int64) func(*v1alpha1.McpServer) bool {
	return func(s *v1alpha1.McpServer) bool {
		return s.Status.Phase == v1alpha1.PhaseReady && s.Status.ConnectionGeneration >= gen && s.Status.ToolCount > 0
	}
}

// killedServer creates the McpServer the kills and deletes rows use, once.
func (b *bench) killedServer(ctx context.Context, w watch.Interface) (*v1alpha1.McpServer, error) {
	s := &v1alpha1.McpServer{}
	err := b.cluster.Client.Get(ctx, client.ObjectKey{Namespace: benchNS, Name: "killed"}, s)
	if err == nil {
		return s, nil
	}
	if err := b.cluster.Client.Create(ctx, server("killed")); err != nil {
		return nil, err
	}
	_, s, err = until(w, "killed", readyAt(1))
	return s, err
}

// withKilled runs fn with a watch of benchNS and the Ready McpServer the
// kills and deletes rows share.
func (b *bench) withKilled(ctx context.Context, fn func(watch.Interface, *v1alpha1.McpServer) error) error {
	w, err := b.watchServers(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	s, err := b.killedServer(ctx, w)
	if err != nil {
		return err
	}
	return fn(w, s)
}

func (b *bench) killsInPod(ctx context.Context) error {
	return b.withKilled(ctx, func(w watch.Interface, s *v1alpha1.McpServer) error { return b.kills(ctx, w, s) })
}

func (b *bench) kills(ctx context.Context, w watch.Interface, s *v1alpha1.McpServer) error {
	for range *flagKills {
		// A connection that outlived the stability window: every kill
		// starts a fresh outage, whose first retry waits initialDelayMs.
		time.Sleep(2**flagInitialDelay + 50*time.Millisecond)
		pid, err := serverPID(ctx, b.cluster, s)
		if err != nil {
			return err
		}
		killed := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return err
		}
		var at time.Time
		if at, s, err = until(w, "killed", readyAt(s.Status.ConnectionGeneration+1)); err != nil {
			return err
		}
		b.res.kills = append(b.res.kills, at.Sub(killed))
	}
	return nil
}

func (b *bench) deletedPods(ctx context.Context) error {
	return b.withKilled(ctx, func(w watch.Interface, s *v1alpha1.McpServer) error { return b.deletes(ctx, w, s) })
}

func (b *bench) deletes(ctx context.Context, w watch.Interface, s *v1alpha1.McpServer) error {
	for range *flagDeletes {
		old := &corev1.Pod{}
		if err := b.cluster.Client.Get(ctx, client.ObjectKey{Namespace: benchNS, Name: s.Status.PodName}, old); err != nil {
			return err
		}
		deleted := time.Now()
		if err := b.cluster.Client.Delete(ctx, old); err != nil {
			return err
		}
		gen := s.Status.ConnectionGeneration + 1
		replaced := func(s *v1alpha1.McpServer) bool { return readyAt(gen)(s) && s.Status.PodName != old.Name }
		var at time.Time
		var err error
		if at, s, err = until(w, "killed", replaced); err != nil {
			return err
		}
		b.res.deletes = append(b.res.deletes, at.Sub(deleted))
		if err := waitGone(ctx, b.cluster, old); err != nil {
			return err
		}
	}
	return b.cluster.Client.Delete(ctx, s)
}

func (b *bench) fleet(ctx context.Context) error {
	mgr, err := managerPID(ctx, b.cluster)
	if err != nil {
		return err
	}
	if b.res.rssBefore, err = settledRSS(mgr); err != nil {
		return err
	}
	w, err := b.watchServers(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	created := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, *flagServers)
	for i := range *flagServers {
		wg.Go(func() {
			s := withFleetCPU(server(fmt.Sprintf("s-%02d", i)))
			if err := b.cluster.Client.Create(ctx, s); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	ready := map[string]bool{}
	deadline := time.After(timeout)
	for len(ready) < *flagServers {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("the watch ended")
			}
			if s, ok := ev.Object.(*v1alpha1.McpServer); ok && strings.HasPrefix(s.Name, "s-") && readyAt(1)(s) {
				ready[s.Name] = true
				b.res.fleetReady = time.Since(created)
			}
		case <-deadline:
			b.res.fleetReadyN = len(ready)
			return fmt.Errorf("%d of %d Ready after %s", len(ready), *flagServers, timeout)
		}
	}
	b.res.fleetReadyN = len(ready)
	if b.res.fleetPodsReady, err = lastPodReady(ctx, b.cluster, created); err != nil {
		return err
	}
	b.res.rssAfter, err = settledRSS(mgr)
	return err
}

// lastPodReady is when the last Pod of benchNS became Ready, after since
// (the Ready condition's time: whole seconds).
func lastPodReady(ctx context.Context, c *testcluster.Cluster, since time.Time) (time.Duration, error) {
	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods, client.InNamespace(benchNS)); err != nil {
		return 0, err
	}
	var last time.Time
	for _, p := range pods.Items {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && cond.LastTransitionTime.After(last) {
				last = cond.LastTransitionTime.Time
			}
		}
	}
	return last.Sub(since), nil
}

// serverPID is the fixture process in the server's Pod.
func serverPID(ctx context.Context, c *testcluster.Cluster, s *v1alpha1.McpServer) (int, error) {
	pod := &corev1.Pod{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Status.PodName}, pod); err != nil {
		return 0, err
	}
	return podProcess(pod, "mcp-fixture")
}

func managerPID(ctx context.Context, c *testcluster.Cluster) (int, error) {
	p, err := managerPod(ctx, c.Client)
	if err != nil {
		return 0, err
	}
	return podProcess(p, "manager")
}

// managerPod is the operator's Ready manager Pod.
func managerPod(ctx context.Context, c client.Client) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(systemNS), client.MatchingLabels{"app.kubernetes.io/component": "manager"}); err != nil {
		return nil, err
	}
	for i, p := range pods.Items {
		if p.DeletionTimestamp == nil && podReady(&p) {
			return &pods.Items[i], nil
		}
	}
	return nil, errors.New("no Ready manager Pod")
}

// podProcess finds the process named comm in the Pod's cgroup.
func podProcess(pod *corev1.Pod, comm string) (int, error) {
	pids, err := testcluster.PodProcesses(pod.UID)
	if err != nil {
		return 0, err
	}
	for _, pid := range pids {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == comm {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no %s process in Pod %s", comm, pod.Name)
}

func waitGone(ctx context.Context, c *testcluster.Cluster, pod *corev1.Pod) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		pids, err := testcluster.PodProcesses(pod.UID)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("Pod %s still has processes after %s", pod.Name, timeout)
}

// settledRSS is the median of the manager's VmRSS over 5 samples 1 s apart,
// after 5 s without new work.
func settledRSS(pid int) (int64, error) {
	time.Sleep(5 * time.Second)
	var xs []int64
	for range 5 {
		v, err := vmRSS(pid)
		if err != nil {
			return 0, err
		}
		xs = append(xs, v)
		time.Sleep(time.Second)
	}
	slices.Sort(xs)
	return xs[len(xs)/2], nil
}

func vmRSS(pid int) (int64, error) { return proc.Memory(pid, "VmRSS") }

// ---------------------------------------------------------------------------

func (b *bench) print(started time.Time, loadBefore string) {
	r := &b.res
	p50 := func(xs []time.Duration) time.Duration { return report.Percentile(xs, 50) }
	p99 := func(xs []time.Duration) time.Duration { return report.Percentile(xs, 99) }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	us := func(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }
	mb := func(v int64) string { return fmt.Sprintf("%.1f MB", float64(v)/(1<<20)) }

	killGoal := *flagInitialDelay + p50(r.coldStarts) + killSlack
	added := p50(r.podCalls) - p50(r.localCalls)
	perServer := (r.rssAfter - r.rssBefore) / int64(max(1, *flagServers))

	fmt.Printf("Command: `hack/bench-podruntime.sh %s`  \n", strings.Join(os.Args[1:], " "))
	fmt.Printf("%s, %d cores, load (1 min) %s before and %s after, %s in all.\n\n",
		time.Now().Format("2006-01-02"), runtime.NumCPU(), loadBefore, report.LoadAvg(), time.Since(started).Round(time.Second))
	fmt.Println("| Pod runtime | n | p50 | p99 | Goal | Met |")
	fmt.Println("|---|--:|--:|--:|---|---|")
	// Only the rows of the steps asked for (-steps); a step that failed
	// midway shows what it measured.
	ran := func(step string) bool { return slices.Contains(strings.Split(*flagSteps, ","), step) }
	if ran("cold") {
		fmt.Printf("| Local cold start of the fixture (spawn, initialize, tools/list) | %d | %s | %s | | |\n",
			len(r.coldStarts), ms(p50(r.coldStarts)), ms(p99(r.coldStarts)))
	}
	if ran("kills") {
		fmt.Printf("| server process killed in its Pod → McpServer Ready at the next generation (status) | %d | %s | %s | p50 ≤ %s (initialDelayMs %s + cold start + 50 ms) | %s |\n",
			len(r.kills), ms(p50(r.kills)), ms(p99(r.kills)), ms(killGoal), flagInitialDelay, report.YesNo(len(r.kills) > 0 && p50(r.kills) <= killGoal))
	}
	if ran("deletes") {
		fmt.Printf("| server Pod deleted → McpServer Ready in its replacement (status) | %d | %s | %s | p50 ≤ 3 s | %s |\n",
			len(r.deletes), ms(p50(r.deletes)), ms(p99(r.deletes)), report.YesNo(len(r.deletes) > 0 && p50(r.deletes) <= goalDeleted))
	}
	if ran("calls") {
		fmt.Printf("| tools/call echo, Local runtime (child's pipes) | %d | %s | %s | | |\n",
			len(r.localCalls), us(p50(r.localCalls)), us(p99(r.localCalls)))
	}
	if ran("calls") {
		fmt.Printf("| tools/call echo, Pod runtime (tunnel to the Pod IP) | %d | %s | %s | | |\n",
			len(r.podCalls), us(p50(r.podCalls)), us(p99(r.podCalls)))
	}
	if ran("calls") {
		fmt.Printf("| added by the tunnel at p50 | | %s | | ≤ 300 µs | %s |\n", us(added), report.YesNo(len(r.podCalls) > 0 && added <= goalAddedP50))
	}
	if ran("fleet") {
		fmt.Printf("| %d Pod-runtime McpServers (cpu request %s) created at once → all Ready | %d Ready | %s | | ≤ 60 s | %s |\n",
			*flagServers, cmp.Or(*flagFleetCPU, "50m"), r.fleetReadyN, ms(r.fleetReady), report.YesNo(r.fleetReadyN == *flagServers && r.fleetReady <= goalFleet))
	}
	if ran("fleet") {
		fmt.Printf("| of which: the last server Pod Ready (kubelet; whole seconds) | | %s | | | |\n", ms(r.fleetPodsReady))
	}
	if ran("fleet") {
		fmt.Printf("| manager RSS: %s before, %s with the %d servers | | %s per server | | ≤ 1 MB per server | %s |\n",
			mb(r.rssBefore), mb(r.rssAfter), *flagServers, mb(perServer), report.YesNo(r.rssAfter > 0 && perServer <= goalRSS))
	}
	if ran("idle") || ran("wake") {
		fmt.Println()
		fmt.Println("| Idle servers | n | p50 | p90 | Goal | Met |")
		fmt.Println("|---|--:|--:|--:|---|---|")
	}
	if ran("idle") {
		b.printIdle()
	}
	if ran("wake") {
		b.printWakes()
	}
}
