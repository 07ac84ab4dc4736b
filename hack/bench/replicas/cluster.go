package main

// The cluster of the bench: envtest, the manager's replicas as processes,
// the fixtures, the McpServers, and what the bench reads of them.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/proc"
)

const (
	// managerNamespace holds the replicas' Leases and shared Secrets.
	managerNamespace = "mcpbridge-system"
	// tenant holds the McpServers the agents call.
	tenant = "bench"
)

// replica is one manager process, as one Pod of the Deployment.
type replica struct {
	*proc.Process
	name, gateway, probes, metrics, log string
	started                             time.Time
}

// startReplica runs a manager named name and waits until its /readyz
// passes and it sees want replicas live (itself included).
func (b *bench) startReplica(ctx context.Context, name string, want int) (*replica, error) {
	addrs, err := freeAddrs(4)
	if err != nil {
		return nil, err
	}
	r := &replica{name: name, gateway: addrs[0], probes: addrs[1], metrics: addrs[2], log: filepath.Join(b.dir, "manager-"+name+".log")}
	args := []string{"--leader-elect=false", "--gateway-bind-address=" + r.gateway, "--gateway-auth=none", "--gateway-tls=false",
		"--metrics-bind-address=" + r.metrics, "--metrics-secure=false", "--health-probe-bind-address=" + r.probes,
		"--upstream-allow-cidrs=127.0.0.0/8", "--local-stdio-namespaces=*",
		"--replica-name=" + name, "--replica-bind-address=" + addrs[3], "--manager-namespace=" + managerNamespace,
		"--replica-lease-duration=" + flagLease.String(), "--replica-drain-delay=" + flagDrain.String()}
	args = append(args, strings.Fields(*flagManagerArgs)...)
	cmd := exec.Command(b.managerBin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+b.env.KubeconfigPath)
	logf, err := os.Create(r.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = logf, logf
	r.started = time.Now()
	if r.Process, err = proc.StartProcess("manager-"+name, cmd, true, syscall.SIGTERM); err != nil {
		return nil, err
	}
	b.replicas = append(b.replicas, r)
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.Done():
			return nil, fmt.Errorf("replica %s exited at start-up: %v; see %s (run with -keep)", name, r.Err(), r.log)
		case <-time.After(20 * time.Millisecond):
		}
		if readyz(hc, r.probes) && r.live() == want {
			return r, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("replica %s not ready with %d replicas live within 2m; see %s (run with -keep)", name, want, r.log)
		}
	}
}

// live is mcpbridge_replicas_live on r's metrics, -1 when unreadable.
func (r *replica) live() int {
	resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + r.metrics + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "mcpbridge_replicas_live "); ok {
			var n float64
			if _, err := fmt.Sscan(v, &n); err == nil {
				return int(n)
			}
		}
	}
	return -1
}

func readyz(hc *http.Client, probes string) bool {
	resp, err := hc.Get("http://" + probes + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// kill sends SIGKILL to r's process group, as the kubelet does to a
// container, and waits for it to be reaped.
func (r *replica) kill() {
	_ = syscall.Kill(-r.Pid(), syscall.SIGKILL)
	<-r.Done()
}

func freeAddrs(n int) ([]string, error) {
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // all open at once: n distinct ports
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// startFixture runs the fixture with --http=127.0.0.1:0 and reads the URL it
// announces on its first stdout line.
func (b *bench) startFixture() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(b.dir, "fixture.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(b.fixtureBin, "--http=127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = w, logf
	p, err := proc.StartProcess("mcp-fixture", cmd, true, syscall.SIGTERM)
	w.Close()
	if err != nil {
		r.Close()
		return err
	}
	b.fixture = p
	br := bufio.NewReader(r)
	line, err := br.ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, br); r.Close() }()
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		return fmt.Errorf("fixture announced %q: %v", line, err)
	}
	b.fixtureURL = url
	return nil
}

// createNamespaces makes the manager's namespace and the tenant's.
func (b *bench) createNamespaces(ctx context.Context) error {
	for _, ns := range []string{managerNamespace, tenant} {
		if err := b.env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}
	return nil
}

// serverName is the i-th McpServer: the first -local-stdio are Local
// stdio servers (the fixture as a child of their owner), the others
// Streamable HTTP ones on the one fixture process.
func serverName(i int) string {
	if i < *flagStdio {
		return fmt.Sprintf("%s%03d", stdioPrefix, i)
	}
	return fmt.Sprintf("http-%03d", i)
}

const stdioPrefix = "stdio-"

// latestByKind is the latest of at among Streamable HTTP and among stdio
// servers, with how many of each there are.
func latestByKind(at map[string]time.Duration) (http, stdio kindReady) {
	for name, d := range at {
		k := &http
		if strings.HasPrefix(name, stdioPrefix) {
			k = &stdio
		}
		k.servers++
		k.latest = max(k.latest, d)
	}
	return http, stdio
}

// kindReady is when the last of servers of one transport was Ready.
type kindReady struct {
	servers int
	latest  time.Duration
}

func (b *bench) createServers(ctx context.Context) error {
	for i := range *flagServers {
		obj := &v1alpha1.McpServer{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: serverName(i)}}
		if i < *flagStdio {
			obj.Spec = v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStdio, Stdio: &v1alpha1.StdioTransport{Command: b.fixtureBin}}
		} else {
			obj.Spec = v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStreamableHTTP,
				StreamableHTTP: &v1alpha1.StreamableHTTPTransport{URL: b.fixtureURL}}
		}
		if err := b.env.Client.Create(ctx, obj); err != nil {
			return fmt.Errorf("create %s: %w", obj.Name, err)
		}
	}
	return nil
}

// serverState is what the bench compares of a server before and after.
type serverState struct {
	replica    string
	generation int64
	ready      bool
}

func (b *bench) serverStates(ctx context.Context) (map[string]serverState, error) {
	list := &v1alpha1.McpServerList{}
	if err := b.env.Client.List(ctx, list, client.InNamespace(tenant)); err != nil {
		return nil, err
	}
	out := map[string]serverState{}
	for _, m := range list.Items {
		out[m.Name] = serverState{replica: m.Status.Replica, generation: m.Status.ConnectionGeneration,
			ready: m.Status.Phase == v1alpha1.PhaseReady}
	}
	return out, nil
}

// pollEvery is how often the bench lists the McpServers while it waits
// for them: the resolution of the "Ready after" figures.
const pollEvery = 50 * time.Millisecond

// waitServers lists the McpServers every pollEvery until ok holds for the
// named ones, and returns the time since t0 when it first did.
func (b *bench) waitServers(ctx context.Context, t0 time.Time, names []string, ok func(serverState) bool) (time.Duration, error) {
	all, _, err := b.waitEach(ctx, t0, names, ok)
	return all, err
}

// waitEach waits as waitServers does, and also says when each server was
// first seen ok (from t0, to the poll).
func (b *bench) waitEach(ctx context.Context, t0 time.Time, names []string, ok func(serverState) bool) (time.Duration, map[string]time.Duration, error) {
	deadline := time.Now().Add(*flagWaitMax)
	at := make(map[string]time.Duration, len(names))
	for {
		if st, err := b.serverStates(ctx); err == nil {
			now := time.Since(t0)
			for _, n := range names {
				if _, seen := at[n]; !seen {
					if s, found := st[n]; found && ok(s) {
						at[n] = now
					}
				}
			}
			if len(at) == len(names) {
				return now, at, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, at, fmt.Errorf("not within %s", *flagWaitMax)
		}
		select {
		case <-ctx.Done():
			return 0, at, ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// ownedBy names the servers that st gives to replica.
func ownedBy(st map[string]serverState, replica string) []string {
	var out []string
	for n, s := range st {
		if s.replica == replica {
			out = append(out, n)
		}
	}
	return out
}

func allNames() []string {
	out := make([]string, *flagServers)
	for i := range out {
		out[i] = serverName(i)
	}
	return out
}

// cleanup stops every replica (SIGTERM, then SIGKILL after 40 s), the
// fixture and envtest, and removes the temp dir.
func (b *bench) cleanup() error {
	var errs []error
	for _, r := range b.replicas {
		if err := r.Stop(40 * time.Second); err != nil && !errors.Is(err, proc.ErrAlreadyStopped) {
			errs = append(errs, err)
		}
	}
	if b.fixture != nil {
		if err := b.fixture.Stop(5 * time.Second); err != nil && !errors.Is(err, proc.ErrAlreadyStopped) {
			errs = append(errs, err)
		}
	}
	if b.env != nil {
		if err := b.env.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if b.dir != "" {
		if *flagKeep {
			fmt.Fprintf(os.Stderr, "logs kept in %s\n", b.dir)
		} else if err := os.RemoveAll(b.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
