package main

// The manager's replicas (-replicas): N manager processes against the one
// apiserver, as the Pods of one Deployment are (docs/design.md, "Replicas
// and ownership"), and what the bench reads per replica: its RSS, the
// servers it owns, its metrics, its profiles.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/hack/bench/internal/report"
	"github.com/mcpbridge/operator/internal/testenv"
)

var flagReplicas = flag.Int("replicas", 1, "manager processes (replicas r1..rN, each with its own ports), sharing the Leases and Secrets of one manager namespace")

// managerNamespace is the replicas' --manager-namespace: their Leases and
// the Secrets they share (CA, session keys) live there.
const managerNamespace = "mcpbridge-system"

// The replicas' memory goal, stated with the table in docs/benchmarks.md
// ("Scale"): each replica's RSS ≤ 50 MB + 100 KB per server it owns.
const (
	goalReplicaBase      = 50e6
	goalReplicaPerServer = 100e3
)

// replicaProc is one manager process.
type replicaProc struct {
	*child
	name      string
	metrics   string // http://127.0.0.1:P/metrics
	probes    string
	gateway   string // the gateway's host:port
	pprofAddr string

	hwmReady, hwmEnd, rssEnd int64 // bytes
	shutdown                 time.Duration
	shutdownErr              error
}

// startReplicas creates the manager namespace and runs -replicas managers,
// one after another, each until its McpServer controller has started;
// then it waits until every replica sees all of them live, so that no
// server moves after it was created.
func (b *bench) startReplicas(ctx context.Context, cs kubernetes.Interface, bin string) error {
	if *flagReplicas < 1 {
		return errors.New("-replicas must be at least 1")
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", managerNamespace, err)
	}
	t0 := time.Now()
	for i := range *flagReplicas {
		r, err := b.startReplica(ctx, bin, fmt.Sprintf("r%d", i+1))
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "replica %s pid %d ready after %s\n", r.name, r.Pid(), time.Since(t0).Round(time.Millisecond))
	}
	deadline := time.Now().Add(time.Minute)
	for _, r := range b.managers {
		for {
			m, err := fetchMetrics(r.metrics)
			if err == nil && int(m.sum("mcpbridge_replicas_live", nil)) == len(b.managers) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("replica %s does not see %d replicas live within 1m", r.name, len(b.managers))
			}
			if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
				return err
			}
		}
	}
	b.mgrStartup = time.Since(t0)
	return nil
}

// startReplica runs one manager against the envtest apiserver and waits
// until it is ready and its McpServer controller has started its workers.
func (b *bench) startReplica(ctx context.Context, bin, name string) (*replicaProc, error) {
	var addrs [4]string
	for i := range addrs {
		a, err := testenv.FreeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	metrics, probes, internal, gateway := addrs[0], addrs[1], addrs[2], addrs[3]
	// The fixture upstreams listen on loopback, which the egress policy
	// refuses unless allowed.
	args := []string{"--leader-elect=false", "--gateway-bind-address=" + gateway, "--gateway-auth=none", "--gateway-tls=false",
		"--metrics-bind-address=" + metrics, "--metrics-secure=false", "--health-probe-bind-address=" + probes,
		"--upstream-allow-cidrs=127.0.0.0/8", "--replica-name=" + name, "--replica-bind-address=" + internal,
		"--manager-namespace=" + managerNamespace}
	args = append(args, strings.Fields(*flagManagerArgs)...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = b.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+b.env.KubeconfigPath)
	cmd.Env = append(cmd.Env, strings.Fields(*flagManagerEnv)...)
	if b.certFile != "" {
		cmd.Env = append(cmd.Env, "SSL_CERT_FILE="+b.certFile)
	}
	r := &replicaProc{name: name, metrics: "http://" + metrics + "/metrics", probes: probes, gateway: gateway}
	if *flagPprof != "" {
		var err error
		if r.pprofAddr, err = testenv.FreeAddr(); err != nil {
			return nil, err
		}
		cmd.Env = append(cmd.Env, pprofEnv+"="+r.pprofAddr)
	}
	c, err := startChild("manager-"+name, filepath.Join(b.dir, "manager-"+name+".log"), cmd, nil)
	if err != nil {
		return nil, err
	}
	r.child = c
	b.managers = append(b.managers, r)
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.Done():
			return nil, fmt.Errorf("replica %s exited at start-up: %v; see %s (run with -keep)", name, r.Err(), r.log)
		case <-time.After(20 * time.Millisecond):
		}
		if ready(hc, "http://"+probes+"/readyz") && workersStarted(r.log) {
			return r, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("replica %s's McpServer controller did not start in 60s; see %s (run with -keep)", name, r.log)
		}
	}
}

// anyExited yields the first replica whose process ends.
func (b *bench) anyExited() <-chan *replicaProc {
	out := make(chan *replicaProc, len(b.managers))
	for _, r := range b.managers {
		go func() { <-r.Done(); out <- r }()
	}
	return out
}

// managerMetrics is every replica's /metrics together: a sum over the set
// is the sum over the replicas.
func (b *bench) managerMetrics() (metricSet, error) {
	var all metricSet
	for _, r := range b.managers {
		m, err := fetchMetrics(r.metrics)
		if err != nil {
			return nil, fmt.Errorf("replica %s: %w", r.name, err)
		}
		all = append(all, m...)
	}
	return all, nil
}

// stopReplicas sends SIGTERM to every replica at once and returns the time
// until the last one exited.
func (b *bench) stopReplicas() time.Duration {
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, r := range b.managers {
		wg.Go(func() {
			r.shutdownErr = r.Stop(40 * time.Second)
			r.shutdown = time.Since(t0)
			if r.shutdownErr == nil && r.Err() != nil {
				r.shutdownErr = fmt.Errorf("exit: %w", r.Err())
			}
		})
	}
	wg.Wait()
	return time.Since(t0)
}

// profileFile names a replica's profile: as before with one replica, with
// the replica's name with several.
func profileFile(r *replicaProc, base, ext string) string {
	if *flagReplicas == 1 {
		return filepath.Join(*flagPprof, base+ext)
	}
	return filepath.Join(*flagPprof, base+"-"+r.name+ext)
}

// cpuProfiles takes every replica's CPU profile of the first
// -pprof-seconds from the first create, at once, and the apiserver's.
func (b *bench) cpuProfiles(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(b.managers)+1)
	wg.Go(func() { errs[len(b.managers)] = b.apiProfile(ctx, filepath.Join(*flagPprof, "apiserver-cpu.pprof")) })
	for i, r := range b.managers {
		wg.Go(func() {
			errs[i] = fetch(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", r.pprofAddr, *flagPprofSecs),
				profileFile(r, "manager-cpu", ".pprof"))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// idleProfiles saves every replica's heap and goroutine profiles at the
// end of the idle phase.
func (b *bench) idleProfiles(ctx context.Context) {
	for _, r := range b.managers {
		for _, p := range []struct{ base, ext, path string }{{"manager-heap", ".pprof", "heap?gc=1"}, {"manager-goroutines", ".txt", "goroutine?debug=1"}} {
			if err := fetch(ctx, "http://"+r.pprofAddr+"/debug/pprof/"+p.path, profileFile(r, p.base, p.ext)); err != nil {
				b.notes = append(b.notes, fmt.Sprintf("replica %s profile %s: %v", r.name, p.base, err))
			}
		}
	}
	b.notes = append(b.notes, fmt.Sprintf("-pprof: the manager was built with one added file serving net/http/pprof (go build -overlay); "+
		"profiles in %s: manager-cpu and apiserver-cpu (%d s from the first create), manager-heap and manager-goroutines (end of the idle phase)%s.",
		*flagPprof, *flagPprofSecs, map[bool]string{true: "", false: ", one of each per replica"}[*flagReplicas == 1]))
}

// profiles saves every replica's profile at path (under /debug/pprof/) as
// base-<replica>ext; when names the moment, for the notes.
func (b *bench) profiles(ctx context.Context, when, path, base, ext string) {
	for _, r := range b.managers {
		if err := fetch(ctx, "http://"+r.pprofAddr+"/debug/pprof/"+path, profileFile(r, base, ext)); err != nil {
			b.notes = append(b.notes, fmt.Sprintf("replica %s profile %s: %v", r.name, base, err))
		}
	}
	b.notes = append(b.notes, fmt.Sprintf("-pprof: %s (%s) in %s.", base, when, *flagPprof))
}

// ---- McpToolSets -------------------------------------------------------------

// toolSetState is what the watch saw of one McpToolSet (named as its
// McpServer): each ADDED, MODIFIED and DELETED event is one write.
type toolSetState struct {
	writes []time.Time
}

// watchToolSets counts the writes of the namespace's McpToolSets, which the
// owners write beside the McpServers' status.
func (b *bench) watchToolSets(ctx context.Context, wc client.WithWatch) error {
	list := &v1alpha1.McpToolSetList{}
	if err := wc.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return err
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, watcherFunc(
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return wc.Watch(ctx, &v1alpha1.McpToolSetList{}, &client.ListOptions{Namespace: namespace, Raw: &o})
		}))
	if err != nil {
		return err
	}
	go func() {
		for ev := range rw.ResultChan() {
			ts, ok := ev.Object.(*v1alpha1.McpToolSet)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted) {
				continue
			}
			now := time.Now()
			b.mu.Lock()
			st := b.toolSets[ts.Name]
			if st == nil {
				st = &toolSetState{}
				b.toolSets[ts.Name] = st
			}
			st.writes = append(st.writes, now)
			b.mu.Unlock()
		}
	}()
	return nil
}

// toolSetResults are the McpToolSet writes: per server up to every server
// Ready (its own set's write and its server's Ready status race in the two
// watches), in all, and in the idle phase.
type toolSetResults struct {
	toReady       []int
	ramp, idle    int
	afterReady    int // after every server was Ready, up to the end of the idle phase
	withoutServer int
}

func (b *bench) collectToolSets() toolSetResults {
	b.mu.Lock()
	defer b.mu.Unlock()
	var r toolSetResults
	for name, ts := range b.toolSets {
		st := b.objs[name]
		if st == nil {
			r.withoutServer++
			continue
		}
		n := 0
		for _, t := range ts.writes {
			switch {
			case !t.After(b.lastReady):
				r.ramp++
				n++
			case !b.idleStart.IsZero() && !t.Before(b.idleStart) && !t.After(b.idleEnd):
				r.idle++
				r.afterReady++
			case !t.After(b.idleEnd):
				r.afterReady++
			}
		}
		if !st.readyAt.IsZero() {
			r.toReady = append(r.toReady, n)
		}
	}
	return r
}

// owners counts the servers by status.replica as the watch last saw them.
func (b *bench) owners() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]int{}
	for _, st := range b.objs {
		if st.last != nil {
			out[cmpOr(st.last.Status.Replica, "(none)")]++
		}
	}
	return out
}

// replicaRows prints, per replica, the servers it owns, its RSS against the
// per-replica goal and its shutdown.
func (b *bench) replicaRows(row func(name, value, goal, met string)) {
	owned := b.owners()
	for _, r := range b.managers {
		n := owned[r.name]
		goal := goalReplicaBase + goalReplicaPerServer*float64(n)
		row(fmt.Sprintf("Replica %s: McpServers owned (`status.replica`)", r.name), fmt.Sprint(n), "", "")
		row(fmt.Sprintf("Replica %s: peak RSS (VmHWM) every resource Ready / end of idle; RSS (VmRSS) end of idle", r.name),
			fmt.Sprintf("%s / %s; %s", mb(r.hwmReady), mb(r.hwmEnd), mb(r.rssEnd)),
			fmt.Sprintf("≤ %s (50 MB + 100 KB × %d owned)", mb(int64(goal)), n),
			report.YesNo(r.hwmEnd > 0 && float64(r.hwmEnd) <= goal))
		if r.hwmEnd > 0 && n > 0 {
			// The same goal read at rest: what a replica holds per owned
			// server once its servers are connected, the peak of the
			// connecting (the row above) aside.
			perServer := (float64(r.rssEnd) - goalReplicaBase) / float64(n)
			row(fmt.Sprintf("Replica %s: (RSS end of idle − 50 MB) per owned server", r.name),
				fmt.Sprintf("%.0f KB", perServer/1e3), "≤ 100 KB", report.YesNo(perServer <= goalReplicaPerServer))
		}
	}
	if n := owned["(none)"]; n > 0 {
		row("McpServers with no `status.replica`", fmt.Sprint(n), "0", report.YesNo(false))
	}
}

// shutdownRow is SIGTERM → exit: of the manager, or of every replica at once.
func (b *bench) shutdownRow(row func(name, value, goal, met string)) {
	var errs []string
	var per []string
	ok := true
	for _, r := range b.managers {
		if r.shutdownErr != nil {
			errs = append(errs, r.name+": "+r.shutdownErr.Error())
			ok = false
		}
		per = append(per, fmt.Sprintf("%s %s", r.name, dur(r.shutdown)))
	}
	value := dur(b.shutdown)
	name := "Manager SIGTERM → exit, with every supervisor running"
	if len(b.managers) > 1 {
		name = "SIGTERM to every replica at once → the last exit, with every supervisor running"
		value += " (" + strings.Join(per, ", ") + ")"
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		value += " (" + strings.Join(errs, "; ") + ")"
	}
	row(name, value, "≤ 30 s", report.YesNo(ok && b.shutdown <= 30*time.Second))
}

// logProblemNotes is the error and warn lines of every replica's log.
func (b *bench) logProblemNotes() []string {
	var notes []string
	for _, r := range b.managers {
		who := "manager"
		if len(b.managers) > 1 {
			who = "replica " + r.name
		}
		if lines := logProblems(r.log); len(lines) > 0 {
			notes = append(notes, who+" log, error and warn lines: "+strings.Join(lines, "; "))
		} else {
			notes = append(notes, who+" log: no error or warn lines")
		}
	}
	return notes
}
