// Command scale measures the scale target (docs/design.md, "How it is tested") on this machine and
// prints a markdown table with the command that reproduces it: N McpServers
// (default 1000) on one manager against loopback Streamable HTTP upstreams
// all reach Ready within 60 s of creation, the manager's RSS stays ≤ 300 MB,
// a resource needs ≤ 4 status writes to reach Ready, and an idle, healthy
// fleet makes no apiserver writes. With -replicas=N the manager runs as N
// processes sharing one manager namespace (replicas.go): the table adds the
// servers each owns and its RSS against 50 MB + 100 KB per owned server.
//
//	go run ./hack/bench/scale [-n=1000] [-replicas=1] [-upstreams=1] [-protocol=auto] [-idle=30s]
//
// Everything is a separate process bound to 127.0.0.1: envtest's etcd and
// kube-apiserver (internal/testenv, binaries from bin/k8s or
// KUBEBUILDER_ASSETS), the real manager (go build ./cmd/manager), -replicas
// processes of it, with leader election off, --gateway-auth=none --gateway-tls=false and --upstream-allow-cidrs=127.0.0.0/8,
// and -upstreams fixture HTTP servers
// (go build ./test/fixture/cmd/mcp-fixture, --http=127.0.0.1:0). This
// process creates the resources and watches them: status writes are the
// watch's MODIFIED events. Every process it started is stopped on exit and
// on Ctrl-C (the manager and fixtures also get a signal if this process
// dies; envtest's processes do not, so do not kill -9 it).
//
// With -pprof=DIR the manager is built with one extra file, added by go
// build -overlay and not written to the tree, that serves net/http/pprof on a
// loopback port; the bench saves a CPU profile of the ramp and heap and
// goroutine profiles of the idle fleet into DIR.
//
// It is a benchmark, not a test: it asserts nothing and exits 0 whether or
// not a goal is met (exit 1 only when it cannot measure at all).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/hack/bench/internal/report"
	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/testenv"
)

const (
	fixturePkg = "github.com/mcpbridge/operator/test/fixture/cmd/mcp-fixture"
	managerPkg = "github.com/mcpbridge/operator/cmd/manager"
	namespace  = "scale"
	// builtinTools is how many tools the fixture lists besides --tools.
	builtinTools = 8
	// Goals: docs/design.md, "How it is tested".
	goalReady  = 60 * time.Second
	goalRSS    = 300e6 // bytes; MB here are 10^6 bytes
	goalWrites = 4
)

var (
	flagN         = flag.Int("n", 1000, "McpServers to create")
	flagUpstreams = flag.Int("upstreams", 1, "fixture HTTP server processes; resource i points at upstream i mod this")
	flagProtocol  = flag.String("protocol", "auto", "fixture mode: auto (the fixture's default: every protocol version, stateful handler), 2025-11-25 (stateful, sessions) or 2026-07-28 (--stateless, sessionless)")
	flagTLS       = flag.Bool("tls", false, "the fixtures serve HTTPS (HTTP/2 offered) with a self-signed certificate that the manager trusts through SSL_CERT_FILE")
	flagTools     = flag.Int("tools", 0, "fixture --tools: generated tools besides its 8 built-ins")
	flagCreators  = flag.Int("creators", 32, "concurrent create calls")
	flagIdle      = flag.Duration("idle", 30*time.Second, "idle phase after every resource is Ready, during which writes are counted")
	flagSettle    = flag.Duration("settle", 5*time.Second, "pause between the last Ready and the idle phase (writes in it are reported too)")
	flagTimeout   = flag.Duration("timeout", 5*time.Minute, "stop waiting for Ready this long after the first create")
	flagSample    = flag.Duration("sample", 5*time.Second, "sampling interval of metrics, RSS and CPU; every replica's whole /metrics "+
		"is read each time, which at 1s cost a third of the managers' CPU in a 5,000-server ramp (a Prometheus scrapes every 15-30s)")
	flagManagerArgs = flag.String("manager-args", "", "extra manager flags, space-separated (e.g. \"--zap-log-level=error\")")
	flagManagerEnv  = flag.String("manager-env", "", "extra environment of the manager, space-separated `NAME=VALUE`s (e.g. \"GOMEMLIMIT=150000000\", which only the manager gets)")
	flagManager     = flag.String("manager", "", "manager binary (default: go build "+managerPkg+" into a temp dir)")
	flagFixture     = flag.String("fixture", "", "fixture binary (default: go build "+fixturePkg+" into a temp dir)")
	flagPprof       = flag.String("pprof", "", "profile the manager into `DIR`: build it with one added file (go build -overlay) that serves net/http/pprof on a loopback port, take a CPU profile from the first create for -pprof-seconds, and heap and goroutine profiles at the end of the idle phase")
	flagPprofSecs   = flag.Int("pprof-seconds", 20, "length of the manager's CPU profile with -pprof")
	flagKeep        = flag.Bool("keep", false, "keep the temp dir with the manager's and the fixtures' logs (its path is printed)")
)

func main() {
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	b := &bench{objs: map[string]*objState{}, toolSets: map[string]*toolSetState{}, allReady: make(chan struct{}), stopWatch: func() {}}
	err := b.run(ctx)
	interrupted := ctx.Err() != nil
	// Signals stay caught until everything is stopped: a second Ctrl-C
	// must not leave envtest's etcd and kube-apiserver behind.
	if cerr := b.cleanup(); cerr != nil {
		fmt.Fprintln(os.Stderr, "bench: cleanup:", cerr)
	}
	stop()
	if err != nil {
		if interrupted {
			err = errors.New("interrupted; everything it started has been stopped")
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// ---- state -------------------------------------------------------------------

type bench struct {
	dir        string
	root       string
	env        *testenv.Env
	fixtures   []*child
	urls       []string
	managers   []*replicaProc // the manager's replicas, r1..rN
	apiMetrics func(context.Context) (metricSet, error)
	apiProfile func(ctx context.Context, file string) error // -pprof: the apiserver's CPU profile into file
	etcdPid    int
	apiPid     int
	loadBefore string
	certFile   string        // -tls: the fixtures' certificate, the manager's only root
	mgrStartup time.Duration // exec of the first replica → every replica ready and a member
	stopWatch  context.CancelFunc

	// Creates, by index.
	createStart, createEnd []time.Time
	createErrs             []error
	created                atomic.Int64
	warmUps                []time.Duration

	// Watch state.
	mu            sync.Mutex
	objs          map[string]*objState
	events        []watchEvent
	watchErrs     []string
	leaseRenewals []time.Time // MODIFIED events of the replicas' Leases
	toolSets      map[string]*toolSetState
	readyCount    int
	allReady      chan struct{}
	readyClosed   bool

	samples []sample

	// Phase boundaries and the metrics at each.
	firstCreate, lastCreate, lastReady time.Time
	idleStart, idleEnd                 time.Time
	mgrAt                              map[string]metricSet // "start", "ready", "idle0", "idle1"
	apiAt                              map[string]metricSet
	cpuAt                              map[string]map[string]float64
	shutdown                           time.Duration // SIGTERM to every replica → the last one exited
	notes                              []string
}

type objState struct {
	modified      int
	readyAt       time.Time
	writesToReady int
	phases        []string
	leftReady     int
	last          *v1alpha1.McpServer
}

type watchEvent struct {
	t    time.Time
	typ  watch.EventType
	name string
}

// sample is one point of the timeline.
type sample struct {
	t        time.Time
	created  int
	ready    int
	requests map[string]float64 // manager rest_client_requests_total by method
	depth    float64            // workqueue_depth{name="mcpserver"}
	rss      int64
	cpu      map[string]float64 // seconds of CPU by process role
}

// ---- the run -----------------------------------------------------------------

func (b *bench) run(ctx context.Context) error {
	if *flagN < 1 || *flagUpstreams < 1 || *flagCreators < 1 {
		return errors.New("-n, -upstreams and -creators must be at least 1")
	}
	fixtureArgs, err := protocolArgs(*flagProtocol)
	if err != nil {
		return err
	}
	if *flagTools > 0 {
		fixtureArgs = append(fixtureArgs, "--tools="+strconv.Itoa(*flagTools))
	}
	b.loadBefore = report.LoadAvg()
	if b.root, err = testenv.ModuleRoot(); err != nil {
		return err
	}
	if b.dir, err = os.MkdirTemp("", "bench-scale-"); err != nil {
		return err
	}
	managerBin, fixtureBin := *flagManager, *flagFixture
	if *flagPprof != "" && managerBin != "" {
		return errors.New("-pprof builds the manager itself: drop -manager")
	}
	if managerBin == "" {
		managerBin = filepath.Join(b.dir, "manager")
		var extra []string
		if *flagPprof != "" {
			if err := os.MkdirAll(*flagPprof, 0o755); err != nil {
				return err
			}
			overlay, err := b.pprofOverlay()
			if err != nil {
				return err
			}
			extra = []string{"-overlay", overlay}
		}
		if err := b.build(ctx, managerBin, managerPkg, extra...); err != nil {
			return err
		}
	}
	if fixtureBin == "" {
		fixtureBin = filepath.Join(b.dir, "mcp-fixture")
		if err := b.build(ctx, fixtureBin, fixturePkg); err != nil {
			return err
		}
	}

	if *flagTLS {
		cert, key, err := testenv.LoopbackCertificate(b.dir)
		if err != nil {
			return err
		}
		b.certFile = cert
		fixtureArgs = append(fixtureArgs, "--tls-cert="+cert, "--tls-key="+key)
	}
	for i := range *flagUpstreams {
		p, url, err := startFixture(filepath.Join(b.dir, fmt.Sprintf("fixture-%d.log", i)), fixtureBin, fixtureArgs...)
		if err != nil {
			return fmt.Errorf("fixture %d: %w", i, err)
		}
		b.fixtures, b.urls = append(b.fixtures, p), append(b.urls, url)
	}
	fmt.Fprintf(os.Stderr, "fixtures: %s\n", strings.Join(b.urls, " "))

	fmt.Fprintln(os.Stderr, "starting envtest (etcd + kube-apiserver) ...")
	if b.env, err = testenv.Start(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.findControlPlanePids()
	cfg := rest.CopyConfig(b.env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // as fast as the apiserver answers
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	b.apiMetrics = func(ctx context.Context) (metricSet, error) {
		raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return nil, err
		}
		return parseMetrics(string(raw))
	}
	b.apiProfile = func(ctx context.Context, file string) error {
		raw, err := cs.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(*flagPprofSecs)).DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("the apiserver's CPU profile: %w", err)
		}
		return os.WriteFile(file, raw, 0o644)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}

	if err := b.startReplicas(ctx, cs, managerBin); err != nil {
		return err
	}

	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: b.env.Scheme})
	if err != nil {
		return err
	}
	if err := b.startWatch(ctx, wc); err != nil {
		return err
	}

	if err := b.warmUp(ctx, wc); err != nil {
		return err
	}
	b.mgrAt, b.apiAt, b.cpuAt = map[string]metricSet{}, map[string]metricSet{}, map[string]map[string]float64{}
	b.mark(ctx, "start")
	sampleCtx, stopSampling := context.WithCancel(ctx)
	samplingDone := make(chan struct{})
	go func() { defer close(samplingDone); b.sampleLoop(sampleCtx) }()
	defer func() { stopSampling(); <-samplingDone }()

	cpuProfileDone := make(chan error, 1)
	if *flagPprof != "" {
		go func() { cpuProfileDone <- b.cpuProfiles(ctx) }()
		time.Sleep(100 * time.Millisecond) // the profile has started
	}
	fmt.Fprintf(os.Stderr, "creating %d McpServers with %d concurrent clients ...\n", *flagN, *flagCreators)
	b.createAll(ctx, wc)
	fmt.Fprintf(os.Stderr, "created in %s; waiting for Ready ...\n", b.lastCreate.Sub(b.firstCreate).Round(time.Millisecond))

	timeout := time.NewTimer(time.Until(b.firstCreate.Add(*flagTimeout)))
	defer timeout.Stop()
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
wait:
	for {
		select {
		case <-b.allReady:
			break wait
		case <-timeout.C:
			b.notes = append(b.notes, fmt.Sprintf("stopped waiting after -timeout=%s: %d of %d Ready", *flagTimeout, b.ready(), *flagN))
			break wait
		case r := <-b.anyExited():
			return fmt.Errorf("manager replica %s exited: %v; see %s (run with -keep)", r.name, r.Err(), r.log)
		case <-progress.C:
			fmt.Fprintf(os.Stderr, "  %s: %d/%d Ready\n", time.Since(b.firstCreate).Round(time.Second), b.ready(), *flagN)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.lastReady = b.latestReady()
	for _, r := range b.managers {
		r.hwmReady, _ = proc.Memory(r.Pid(), "VmHWM")
	}
	b.mark(ctx, "ready")
	fmt.Fprintf(os.Stderr, "%d/%d Ready; settling %s, then idle for %s ...\n", b.ready(), *flagN, *flagSettle, *flagIdle)

	if err := sleepCtx(ctx, *flagSettle); err != nil {
		return err
	}
	b.idleStart = time.Now()
	b.mark(ctx, "idle0")
	if err := sleepCtx(ctx, *flagIdle); err != nil {
		return err
	}
	b.idleEnd = time.Now()
	b.mark(ctx, "idle1")
	for _, r := range b.managers {
		r.hwmEnd, _ = proc.Memory(r.Pid(), "VmHWM")
		r.rssEnd, _ = proc.Memory(r.Pid(), "VmRSS")
	}
	stopSampling()
	<-samplingDone
	if *flagPprof != "" {
		if err := <-cpuProfileDone; err != nil {
			b.notes = append(b.notes, fmt.Sprintf("manager CPU profile: %v", err))
		}
		b.idleProfiles(ctx)
	}
	calls := b.callPhase(ctx)

	// Graceful shutdown within 30 s, here with every supervisor.
	// See docs/design.md, "Operations".
	fmt.Fprintln(os.Stderr, "stopping the manager ...")
	b.shutdown = b.stopReplicas()
	time.Sleep(time.Second) // watch events still on their way
	b.print()
	b.printCalls(calls)
	return nil
}

func protocolArgs(p string) ([]string, error) {
	switch p {
	case "auto":
		return nil, nil
	case "2025-11-25":
		return []string{"--protocol=2025-11-25"}, nil
	case "2026-07-28":
		return []string{"--protocol=2026-07-28", "--stateless"}, nil
	}
	return nil, fmt.Errorf("-protocol %q: want auto, 2025-11-25 or 2026-07-28", p)
}

func (b *bench) build(ctx context.Context, out, pkg string, extra ...string) error {
	fmt.Fprintf(os.Stderr, "go build %s %s ...\n", strings.Join(extra, " "), pkg)
	return testenv.BuildContext(ctx, nil, out, pkg, extra...)
}

// pprofEnv names the loopback address the profiling file of -pprof serves on.
const pprofEnv = "MCPBRIDGE_SCALE_BENCH_PPROF"

// pprofOverlay writes a go build -overlay file that adds one file to
// cmd/manager (only in this build; the tree is not touched): it serves
// net/http/pprof on $MCPBRIDGE_SCALE_BENCH_PPROF.
func (b *bench) pprofOverlay() (string, error) {
	src := filepath.Join(b.dir, "pprof.go")
	code := `package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if addr := os.Getenv("` + pprofEnv + `"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
}
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		return "", err
	}
	overlay := filepath.Join(b.dir, "overlay.json")
	target := filepath.Join(b.root, "cmd", "manager", "zz_scale_bench_pprof.go")
	data := fmt.Sprintf(`{"Replace": {%q: %q}}`, target, src)
	return overlay, os.WriteFile(overlay, []byte(data), 0o644)
}

// fetch saves url's body to file.
func fetch(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cleanup stops whatever run started, the manager first (it disposes its
// supervisors while the apiserver still answers), and removes the temp dir.
func (b *bench) cleanup() error {
	var errs []error
	for _, r := range b.managers {
		if err := r.Stop(40 * time.Second); err != nil && !errors.Is(err, proc.ErrAlreadyStopped) {
			errs = append(errs, err)
		}
	}
	for _, f := range b.fixtures {
		if err := f.Stop(5 * time.Second); err != nil && !errors.Is(err, proc.ErrAlreadyStopped) {
			errs = append(errs, err)
		}
	}
	b.stopWatch() // before the apiserver goes: no reconnect attempts
	t0 := time.Now()
	if err := b.env.Stop(); err != nil {
		errs = append(errs, err)
	}
	if b.env != nil {
		fmt.Fprintf(os.Stderr, "envtest stopped in %s\n", time.Since(t0).Round(time.Millisecond))
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

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// ---- processes ---------------------------------------------------------------

// child is a process of the bench (the manager, a fixture) with its log
// file, in its own process group so that a terminal's Ctrl-C reaches only
// the bench, which stops it in order.
type child struct {
	*proc.Process
	log string
}

func startChild(name, logPath string, cmd *exec.Cmd, stdout io.Writer) (*child, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	cmd.Stderr = logf
	cmd.Stdout = stdout
	if stdout == nil {
		cmd.Stdout = logf
	}
	p, err := proc.StartProcess(name, cmd, true, syscall.SIGTERM)
	if err != nil {
		return nil, err
	}
	return &child{Process: p, log: logPath}, nil
}

// startFixture runs the fixture with --http=127.0.0.1:0 and reads the URL it
// announces on its first stdout line.
func startFixture(logPath, bin string, args ...string) (*child, string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, append([]string{"--http=127.0.0.1:0"}, args...)...)
	p, err := startChild("mcp-fixture", logPath, cmd, w)
	w.Close()
	if err != nil {
		r.Close()
		return nil, "", err
	}
	br := bufio.NewReader(r)
	line, err := br.ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, br); r.Close() }()
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		_ = p.Stop(5 * time.Second)
		return nil, "", fmt.Errorf("fixture announced %q: %v", line, err)
	}
	return p, url, nil
}

func ready(hc *http.Client, url string) bool {
	resp, err := hc.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// workersStarted looks for controller-runtime's "Starting workers" line of
// the mcpserver controller in the manager's log.
func workersStarted(logPath string) bool {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.Contains(line, "Starting workers") && strings.Contains(line, "mcpserver") {
			return true
		}
	}
	return false
}

// findControlPlanePids finds envtest's etcd and kube-apiserver among this
// process's children, for their CPU time.
func (b *bench) findControlPlanePids() {
	for _, c := range proc.Children(os.Getpid()) {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c.PID))
		if err != nil {
			continue
		}
		switch strings.TrimSpace(string(comm)) {
		case "etcd":
			b.etcdPid = c.PID
		case "kube-apiserver":
			b.apiPid = c.PID
		}
	}
}

// cpuOf is pid's user + system CPU seconds; 0 when it is gone.
func cpuOf(pid int) float64 {
	if pid == 0 {
		return 0
	}
	st, _ := proc.ReadStat(pid)
	return st.CPU.Seconds()
}

// cpuNow is the CPU seconds used so far by each process of the setup.
func (b *bench) cpuNow() map[string]float64 {
	m := map[string]float64{
		"manager":        0,
		"kube-apiserver": cpuOf(b.apiPid),
		"etcd":           cpuOf(b.etcdPid),
		"bench":          cpuOf(os.Getpid()),
	}
	for _, f := range b.fixtures {
		m["fixture"] += cpuOf(f.Pid())
	}
	for _, r := range b.managers {
		m["manager"] += cpuOf(r.Pid())
	}
	return m
}

var cpuRoles = []string{"manager", "kube-apiserver", "etcd", "fixture", "bench"}

// ---- creating and watching ----------------------------------------------------

func (b *bench) name(i int) string {
	return fmt.Sprintf("mcp-%0*d", len(strconv.Itoa(*flagN-1)), i)
}

// serverNameOf is the spec.serverName of the McpServer named name: its
// tools are mcp__<serverName>__<tool>.
func serverNameOf(name string) string { return "s" + strings.TrimPrefix(name, "mcp-") }

func (b *bench) createAll(ctx context.Context, c client.Client) {
	n := *flagN
	b.createStart, b.createEnd, b.createErrs = make([]time.Time, n), make([]time.Time, n), make([]error, n)
	idx := make(chan int)
	var wg sync.WaitGroup
	for range *flagCreators {
		wg.Go(func() {
			for i := range idx {
				name := b.name(i)
				obj := &v1alpha1.McpServer{
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
					Spec: v1alpha1.McpServerSpec{
						ServerName:     serverNameOf(name),
						Transport:      v1alpha1.TransportStreamableHTTP,
						StreamableHTTP: &v1alpha1.StreamableHTTPTransport{URL: b.urls[i%len(b.urls)]},
					},
				}
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				b.createStart[i] = time.Now()
				b.createErrs[i] = c.Create(cctx, obj)
				b.createEnd[i] = time.Now()
				b.created.Add(1)
				cancel()
			}
		})
	}
	for i := range n {
		select {
		case idx <- i:
		case <-ctx.Done():
		}
	}
	close(idx)
	wg.Wait()
	for i := range n {
		if b.createStart[i].IsZero() {
			continue
		}
		if b.firstCreate.IsZero() || b.createStart[i].Before(b.firstCreate) {
			b.firstCreate = b.createStart[i]
		}
		if b.createStart[i].After(b.lastCreate) {
			b.lastCreate = b.createStart[i]
		}
	}
}

// warmUp sends server-side dry-run creates (nothing is stored, the manager
// sees nothing), so that one-time costs of the first create of the kind in
// a fresh apiserver are not charged to the measured creates.
func (b *bench) warmUp(ctx context.Context, c client.Client) error {
	for i := range 3 {
		obj := &v1alpha1.McpServer{
			ObjectMeta: metav1.ObjectMeta{Name: "warm-up", Namespace: namespace},
			Spec: v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStreamableHTTP,
				StreamableHTTP: &v1alpha1.StreamableHTTPTransport{URL: b.urls[0]}},
		}
		t0 := time.Now()
		if err := c.Create(ctx, obj, client.DryRunAll); err != nil {
			return fmt.Errorf("dry-run create: %w", err)
		}
		b.warmUps = append(b.warmUps, time.Since(t0))
		fmt.Fprintf(os.Stderr, "warm-up dry-run create %d: %s\n", i, time.Since(t0))
	}
	return nil
}

type watcherFunc func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)

func (f watcherFunc) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return f(ctx, o)
}

// startWatch watches the namespace's McpServers from before the first
// create; a watch the apiserver ends is resumed from the last version seen,
// so no event is lost.
func (b *bench) startWatch(ctx context.Context, wc client.WithWatch) error {
	list := &v1alpha1.McpServerList{}
	if err := wc.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	b.stopWatch = cancel
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, watcherFunc(
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return wc.Watch(ctx, &v1alpha1.McpServerList{}, &client.ListOptions{Namespace: namespace, Raw: &o})
		}))
	if err != nil {
		return err
	}
	if err := b.watchLeaseRenewals(ctx, wc); err != nil {
		return err
	}
	if err := b.watchToolSets(ctx, wc); err != nil {
		return err
	}
	go func() {
		for ev := range rw.ResultChan() {
			now := time.Now()
			if ev.Type == watch.Bookmark {
				continue
			}
			m, ok := ev.Object.(*v1alpha1.McpServer)
			if !ok {
				if ev.Type == watch.Error {
					b.mu.Lock()
					b.watchErrs = append(b.watchErrs, fmt.Sprintf("%v", ev.Object))
					b.mu.Unlock()
				}
				continue
			}
			b.observe(now, ev.Type, m)
		}
	}()
	return nil
}

// leaseNamespace holds the replicas' Leases (--manager-namespace), where
// nothing else writes Leases.
const leaseNamespace = managerNamespace

// watchLeaseRenewals records when the replicas renew their Leases: a
// write per replica every third of --replica-lease-duration, whatever the
// fleet's size, which the idle row reports apart from the fleet's writes.
func (b *bench) watchLeaseRenewals(ctx context.Context, wc client.WithWatch) error {
	list := &coordinationv1.LeaseList{}
	if err := wc.List(ctx, list, client.InNamespace(leaseNamespace)); err != nil {
		return err
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, watcherFunc(
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return wc.Watch(ctx, &coordinationv1.LeaseList{}, &client.ListOptions{Namespace: leaseNamespace, Raw: &o})
		}))
	if err != nil {
		return err
	}
	go func() {
		for ev := range rw.ResultChan() {
			if ev.Type == watch.Modified {
				b.mu.Lock()
				b.leaseRenewals = append(b.leaseRenewals, time.Now())
				b.mu.Unlock()
			}
		}
	}()
	return nil
}

// renewalsBetween counts the Lease renewals seen in [from, to].
func (b *bench) renewalsBetween(from, to time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, t := range b.leaseRenewals {
		if !t.Before(from) && !t.After(to) {
			n++
		}
	}
	return n
}

func isReady(m *v1alpha1.McpServer) bool {
	c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionReady)
	return m.Status.Phase == v1alpha1.PhaseReady && c != nil && c.Status == metav1.ConditionTrue &&
		c.ObservedGeneration == m.Generation
}

func (b *bench) observe(now time.Time, typ watch.EventType, m *v1alpha1.McpServer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, watchEvent{t: now, typ: typ, name: m.Name})
	st := b.objs[m.Name]
	if st == nil {
		st = &objState{}
		b.objs[m.Name] = st
	}
	st.last = m
	switch typ {
	case watch.Added:
	case watch.Modified:
		st.modified++
	default:
		return
	}
	if p := string(m.Status.Phase); p != "" && (len(st.phases) == 0 || st.phases[len(st.phases)-1] != p) {
		st.phases = append(st.phases, p)
	}
	switch {
	case isReady(m) && st.readyAt.IsZero():
		st.readyAt, st.writesToReady = now, st.modified
		b.readyCount++
		if b.readyCount == *flagN && !b.readyClosed {
			b.readyClosed = true
			close(b.allReady)
		}
	case !isReady(m) && !st.readyAt.IsZero():
		st.leftReady++
	}
}

func (b *bench) ready() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.readyCount
}

func (b *bench) latestReady() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var t time.Time
	for _, st := range b.objs {
		if st.readyAt.After(t) {
			t = st.readyAt
		}
	}
	return t
}

// ---- sampling ----------------------------------------------------------------

// mark records the manager's and the apiserver's metrics and every
// process's CPU time at a phase boundary.
func (b *bench) mark(ctx context.Context, at string) {
	if m, err := b.managerMetrics(); err == nil {
		b.mgrAt[at] = m
	} else {
		b.notes = append(b.notes, fmt.Sprintf("manager metrics at %s: %v", at, err))
	}
	if m, err := b.apiMetrics(ctx); err == nil {
		b.apiAt[at] = m
	} else {
		b.notes = append(b.notes, fmt.Sprintf("apiserver metrics at %s: %v", at, err))
	}
	b.cpuAt[at] = b.cpuNow()
}

func (b *bench) sampleLoop(ctx context.Context) {
	t := time.NewTicker(*flagSample)
	defer t.Stop()
	for {
		s := sample{t: time.Now(), cpu: b.cpuNow()}
		for _, r := range b.managers {
			rss, _ := proc.Memory(r.Pid(), "VmRSS")
			s.rss += rss
		}
		if m, err := b.managerMetrics(); err == nil {
			s.requests = m.by("rest_client_requests_total", "method", nil)
			s.depth = m.sum("workqueue_depth", map[string]string{"name": "mcpserver"})
		}
		s.created = int(b.created.Load())
		b.mu.Lock()
		s.ready = b.readyCount
		b.samples = append(b.samples, s)
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ---- Prometheus text format ---------------------------------------------------

type metric struct {
	name   string
	labels map[string]string
	value  float64
}

type metricSet []metric

func fetchMetrics(url string) (metricSet, error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(string(data))
}

// parseMetrics reads the samples of the Prometheus text format, a
// histogram's or summary's as its _bucket, _sum and _count series.
func parseMetrics(text string) (metricSet, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	samples, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.Now()}, slices.Collect(maps.Values(fams))...)
	if err != nil {
		return nil, err
	}
	out := make(metricSet, 0, len(samples))
	for _, smp := range samples {
		m := metric{name: string(smp.Metric[model.MetricNameLabel]), labels: map[string]string{}, value: float64(smp.Value)}
		for k, v := range smp.Metric {
			if k != model.MetricNameLabel {
				m.labels[string(k)] = string(v)
			}
		}
		out = append(out, m)
	}
	return out, nil
}

func (ms metricSet) match(m metric, name string, filter map[string]string) bool {
	if m.name != name {
		return false
	}
	for k, v := range filter {
		if m.labels[k] != v {
			return false
		}
	}
	return true
}

func (ms metricSet) sum(name string, filter map[string]string) float64 {
	var s float64
	for _, m := range ms {
		if ms.match(m, name, filter) {
			s += m.value
		}
	}
	return s
}

// by sums name per value of label.
func (ms metricSet) by(name, label string, filter map[string]string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range ms {
		if ms.match(m, name, filter) {
			out[m.labels[label]] += m.value
		}
	}
	return out
}

func (ms metricSet) has(name string) bool {
	return slices.ContainsFunc(ms, func(m metric) bool { return m.name == name })
}

// delta is b minus a, per key, leaving out zeros.
func delta(a, b map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range b {
		if d := v - a[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func fmtCounts(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.0f", k, m[k])
	}
	return strings.Join(parts, ", ")
}

var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "DELETECOLLECTION": true, "APPLY": true}

func writesOnly(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if writeVerbs[strings.ToUpper(k)] {
			out[k] = v
		}
	}
	return out
}

func total(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// apiWrites is the apiserver's write requests between two scrapes, by
// "resource[/subresource] VERB code", leaving out reads.
func apiWrites(a, b metricSet) map[string]float64 {
	key := func(m metric) string {
		r := m.labels["resource"]
		if sr := m.labels["subresource"]; sr != "" {
			r += "/" + sr
		}
		return r + " " + m.labels["verb"] + " " + m.labels["code"]
	}
	sum := func(ms metricSet) map[string]float64 {
		out := map[string]float64{}
		for _, m := range ms {
			if m.name == "apiserver_request_total" && writeVerbs[m.labels["verb"]] {
				out[key(m)] += m.value
			}
		}
		return out
	}
	return delta(sum(a), sum(b))
}

// apiLatency is the apiserver's mean time per request between two scrapes
// for the McpServer and McpToolSet requests, by "resource[/subresource]
// VERB": whether a slow ramp waited on the apiserver.
func apiLatency(a, b metricSet) string {
	key := func(m metric) string {
		r := m.labels["resource"]
		if sr := m.labels["subresource"]; sr != "" {
			r += "/" + sr
		}
		return r + " " + m.labels["verb"]
	}
	sums := func(ms metricSet, name string) map[string]float64 {
		out := map[string]float64{}
		for _, m := range ms {
			if r := m.labels["resource"]; m.name == name && (r == "mcpservers" || r == "mcptoolsets") {
				out[key(m)] += m.value
			}
		}
		return out
	}
	sum := delta(sums(a, "apiserver_request_duration_seconds_sum"), sums(b, "apiserver_request_duration_seconds_sum"))
	count := delta(sums(a, "apiserver_request_duration_seconds_count"), sums(b, "apiserver_request_duration_seconds_count"))
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%s %.1f ms (%.0f)", k, 1000*sum[k]/count[k], count[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// ---- output ------------------------------------------------------------------

// results gathers what the watch saw, per resource.
type results struct {
	lat         []time.Duration // create start → Ready seen, per Ready resource
	writes      []int           // MODIFIED events up to and including the first Ready one
	over4       int
	afterReady  int // MODIFIED events after the resource's first Ready, up to the end of the idle phase
	shutdownMod int // MODIFIED events after the idle phase (the manager's shutdown)
	leftReady   int
	notReady    []string
	createErrs  int
	firstErr    error
	phaseSeqs   map[string]int
	protocols   map[string]int
	tools       map[int32]int
	within60    int
	idleMod     int // MODIFIED events in the idle window
	settleMod   int // MODIFIED events between all Ready and the idle window
	idleEvents  map[string]int
	createDur   []time.Duration
}

func (b *bench) collect() results {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := results{phaseSeqs: map[string]int{}, protocols: map[string]int{}, tools: map[int32]int{}, idleEvents: map[string]int{}}
	for i := range *flagN {
		r.createDur = append(r.createDur, b.createEnd[i].Sub(b.createStart[i]))
		if err := b.createErrs[i]; err != nil {
			r.createErrs++
			if r.firstErr == nil {
				r.firstErr = err
			}
		}
		st := b.objs[b.name(i)]
		if st == nil || st.readyAt.IsZero() {
			phase := "never seen"
			if st != nil && st.last != nil {
				phase = string(st.last.Status.Phase)
			}
			r.notReady = append(r.notReady, b.name(i)+" ("+phase+")")
			if st == nil {
				continue
			}
		} else {
			d := st.readyAt.Sub(b.createStart[i])
			r.lat = append(r.lat, d)
			if d <= goalReady {
				r.within60++
			}
			r.writes = append(r.writes, st.writesToReady)
			if st.writesToReady > goalWrites {
				r.over4++
			}
		}
		r.leftReady += st.leftReady
		r.phaseSeqs[strings.Join(st.phases, " → ")]++
		if st.last != nil {
			if si := st.last.Status.ServerInfo; si != nil {
				r.protocols[si.ProtocolVersion]++
			}
			r.tools[st.last.Status.ToolCount]++
		}
	}
	for _, e := range b.events {
		if st := b.objs[e.name]; e.typ == watch.Modified && st != nil && !st.readyAt.IsZero() && e.t.After(st.readyAt) {
			if e.t.After(b.idleEnd) {
				r.shutdownMod++
			} else {
				r.afterReady++
			}
		}
		switch {
		case !b.idleStart.IsZero() && !e.t.Before(b.idleStart) && !e.t.After(b.idleEnd):
			r.idleEvents[string(e.typ)]++
			if e.typ == watch.Modified {
				r.idleMod++
			}
		case e.typ == watch.Modified && e.t.After(b.lastReady) && e.t.Before(b.idleStart):
			r.settleMod++
		}
	}
	return r
}

// tlsNote says how the fixtures serve with -tls.
func tlsNote() string {
	if !*flagTLS {
		return ""
	}
	return " over HTTPS with a self-signed certificate, HTTP/2 offered, which the manager trusts as its only root through `SSL_CERT_FILE`"
}

func (b *bench) print() {
	r := b.collect()
	n := *flagN
	cmd := "go run ./hack/bench/scale"
	flag.Visit(func(f *flag.Flag) { cmd += " -" + f.Name + "=" + f.Value.String() })
	mode := map[string]string{
		"auto":       "the fixture's default HTTP mode (`--protocol=auto`: every version the SDK supports, stateful handler with sessions)",
		"2025-11-25": "`--protocol=2025-11-25` (stateful, sessions)",
		"2026-07-28": "`--protocol=2026-07-28 --stateless` (sessionless)",
	}[*flagProtocol]

	fmt.Printf("Command: `%s`  \n", cmd)
	fmt.Printf("Date: %s. Machine: %d cores (`runtime.NumCPU`), %s %s/%s, 1-minute load average %s before and %s after the run.  \n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH,
		b.loadBefore, report.LoadAvg())
	fmt.Printf("Setup: envtest etcd + kube-apiserver; %s of the manager binary (`go build ./cmd/manager`, `--leader-elect=false --gateway-auth=none --gateway-tls=false --upstream-allow-cidrs=127.0.0.0/8 "+
		"--replica-name=rI --manager-namespace=%s`%s, each with its own loopback ports, started one after another; "+
		"every replica ready and seeing all of them live %s after the first exec); %d fixture process(es) (`mcp-fixture --http=127.0.0.1:0`%s) in %s, %d tools each; "+
		"%d McpServers (streamable-http, one serverName each, spec defaults) created by %d concurrent clients; "+
		"negotiated protocol in status: %s.\n\n",
		replicasNote(), managerNamespace, argsNote(), b.mgrStartup.Round(time.Millisecond), len(b.fixtures), tlsNote(), mode, *flagTools+builtinTools,
		n, *flagCreators, fmtIntCounts(r.protocols))

	fmt.Println("| Measurement | Value | Goal | Met |")
	fmt.Println("|---|--:|---|---|")
	row := func(name, value, goal, met string) { fmt.Printf("| %s | %s | %s | %s |\n", name, value, goal, met) }
	row("McpServers created / Ready (Ready condition True, phase Ready)", fmt.Sprintf("%d / %d", n-r.createErrs, len(r.lat)), "all", report.YesNo(len(r.lat) == n))
	span := b.lastCreate.Sub(b.firstCreate)
	row("First → last create call", fmt.Sprintf("%s (%.0f creates/s)", dur(span), float64(n)/math.Max(span.Seconds(), 1e-3)), "", "")
	row("Create call duration: p50 / max", fmt.Sprintf("%s / %s", dur(report.Percentile(r.createDur, 50)), dur(slices.Max(r.createDur))), "", "")
	if len(r.lat) > 0 {
		row("Create → Ready per resource: p50", dur(report.Percentile(r.lat, 50)), "", "")
		row("Create → Ready per resource: p99", dur(report.Percentile(r.lat, 99)), "", "")
		row("Create → Ready per resource: max", dur(slices.Max(r.lat)), "≤ 60 s", report.YesNo(len(r.lat) == n && slices.Max(r.lat) <= goalReady))
		row("Resources Ready within 60 s of their create call", fmt.Sprintf("%d / %d", r.within60, n), "all", report.YesNo(r.within60 == n))
		if len(r.lat) == n {
			row("First create → every resource Ready", dur(b.lastReady.Sub(b.firstCreate)), "≤ 60 s (stricter reading)", report.YesNo(b.lastReady.Sub(b.firstCreate) <= goalReady))
			row("Last create → every resource Ready", dur(b.lastReady.Sub(b.lastCreate)), "", "")
		} else {
			row("First create → every resource Ready", fmt.Sprintf("not reached (%d of %d)", len(r.lat), n), "≤ 60 s (stricter reading)", report.YesNo(false))
		}
		row("Status writes to reach Ready (watch MODIFIED events): max", strconv.Itoa(slices.Max(r.writes)), "≤ 4", report.YesNo(slices.Max(r.writes) <= goalWrites))
		row("Status writes to reach Ready: mean", fmt.Sprintf("%.2f", mean(r.writes)), "", "")
		row("Resources that needed more than 4 writes", strconv.Itoa(r.over4), "0", report.YesNo(r.over4 == 0))
	}
	row("Writes to McpServers after their Ready, up to the end of the idle phase", strconv.Itoa(r.afterReady), "", "")
	ts := b.collectToolSets()
	if len(ts.toReady) > 0 {
		row("McpToolSet writes per server (watch ADDED/MODIFIED/DELETED) up to every resource Ready: max", strconv.Itoa(slices.Max(ts.toReady)), "", "")
		row("McpToolSet writes per server up to every resource Ready: mean", fmt.Sprintf("%.2f", mean(ts.toReady)), "", "")
	}
	row("McpToolSet writes from the first create to every resource Ready / after, up to the end of the idle phase",
		fmt.Sprintf("%d / %d", ts.ramp, ts.afterReady), "", "")
	if m := b.managers[0]; len(b.managers) == 1 {
		row("Manager peak RSS (VmHWM) up to every resource Ready", mb(m.hwmReady), "≤ 300 MB", report.YesNo(m.hwmReady > 0 && m.hwmReady <= goalRSS))
		row("Manager peak RSS (VmHWM) at the end of the idle phase", mb(m.hwmEnd), "≤ 300 MB", report.YesNo(m.hwmEnd > 0 && m.hwmEnd <= goalRSS))
		row("Manager RSS (VmRSS) at the end of the idle phase", mb(m.rssEnd), "", "")
	}
	b.replicaRows(row)
	idle := fmt.Sprintf("%s idle", dur(b.idleEnd.Sub(b.idleStart)))
	row("McpServer writes seen by the watch, "+idle, fmt.Sprintf("%d (events: %s)", r.idleMod, fmtIntCounts(r.idleEvents)), "0", report.YesNo(r.idleMod == 0))
	row("McpToolSet writes seen by the watch, "+idle, strconv.Itoa(ts.idle), "0", report.YesNo(ts.idle == 0))
	m0, m1 := b.mgrAt["idle0"], b.mgrAt["idle1"]
	if m0 != nil && m1 != nil {
		req := delta(m0.by("rest_client_requests_total", "method", nil), m1.by("rest_client_requests_total", "method", nil))
		w := writesOnly(req)
		row("Manager apiserver requests (`rest_client_requests_total`), "+idle, fmtCounts(req), "", "")
		renewals := b.renewalsBetween(b.idleStart, b.idleEnd)
		row("of which writes (POST/PUT/PATCH/DELETE)", fmt.Sprintf("%.0f", total(w)), "", "")
		row("of those, the replicas renewing their own Leases (one per replica per third of `--replica-lease-duration`, whatever the fleet)", strconv.Itoa(renewals), "", "")
		// The watch and the metrics are read apart: a renewal at the
		// window's edge may count on one side only. The apiserver's count by
		// resource below decides.
		row("of those, writes for the fleet (±1 for a renewal at the window's edge)", fmt.Sprintf("%.0f", total(w)-float64(renewals)), "", "")
		rec := m1.sum("controller_runtime_reconcile_total", map[string]string{"controller": "mcpserver"}) -
			m0.sum("controller_runtime_reconcile_total", map[string]string{"controller": "mcpserver"})
		row("Manager reconciles, "+idle, fmt.Sprintf("%.0f", rec), "", "")
	}
	if a0, a1 := b.apiAt["idle0"], b.apiAt["idle1"]; a0 != nil && a1 != nil {
		writes := apiWrites(a0, a1)
		row("Apiserver write requests by resource (`apiserver_request_total`), "+idle, fmtCounts(writes), "", "")
		fleet := 0.0
		for k, n := range writes {
			if !strings.HasPrefix(k, "leases ") {
				fleet += n
			}
		}
		row("of those, to anything but the replicas' Leases", fmt.Sprintf("%.0f", fleet), "0", report.YesNo(fleet == 0))
	}
	row("McpServer writes between every resource Ready and the idle phase ("+dur(b.idleStart.Sub(b.lastReady))+")", strconv.Itoa(r.settleMod), "", "")
	b.shutdownRow(row)
	row("McpServer writes during the manager's shutdown", strconv.Itoa(r.shutdownMod), "", "")
	fmt.Println()

	b.printRamp(r)
	b.printTimeline()
	b.printNotes(r)
}

func argsNote() string {
	note := ""
	if *flagManagerArgs != "" {
		note += " `" + *flagManagerArgs + "`"
	}
	if *flagManagerEnv != "" {
		note += " with `" + *flagManagerEnv + "` in its environment"
	}
	return note
}

func replicasNote() string {
	if *flagReplicas == 1 {
		return "one replica"
	}
	return fmt.Sprintf("%d replicas", *flagReplicas)
}

// printRamp is what the ramp (first create → every resource Ready) cost.
func (b *bench) printRamp(r results) {
	m0, m1 := b.mgrAt["start"], b.mgrAt["ready"]
	a0, a1 := b.apiAt["start"], b.apiAt["ready"]
	c0, c1 := b.cpuAt["start"], b.cpuAt["ready"]
	wall := b.lastReady.Sub(b.firstCreate)
	fmt.Printf("Ramp (first create → every resource Ready, %s):\n\n", dur(wall))
	if m0 != nil && m1 != nil {
		req := delta(m0.by("rest_client_requests_total", "method", nil), m1.by("rest_client_requests_total", "method", nil))
		codes := delta(m0.by("rest_client_requests_total", "code", nil), m1.by("rest_client_requests_total", "code", nil))
		fmt.Printf("- Manager apiserver requests: %s (by code: %s); peak rate %s.\n", fmtCounts(req), fmtCounts(codes), b.peakRate())
		rec := delta(m0.by("controller_runtime_reconcile_total", "result", map[string]string{"controller": "mcpserver"}),
			m1.by("controller_runtime_reconcile_total", "result", map[string]string{"controller": "mcpserver"}))
		rt := m1.sum("controller_runtime_reconcile_time_seconds_sum", map[string]string{"controller": "mcpserver"}) -
			m0.sum("controller_runtime_reconcile_time_seconds_sum", map[string]string{"controller": "mcpserver"})
		fmt.Printf("- Reconciles: %s; %.1f s in Reconcile in total (%.1f ms each on average; 8 workers).\n",
			fmtCounts(rec), rt, 1000*rt/math.Max(total(rec), 1))
		if m1.has("rest_client_rate_limiter_duration_seconds_count") {
			fmt.Printf("- Client-side rate limiter wait: %.2f s in total.\n",
				m1.sum("rest_client_rate_limiter_duration_seconds_sum", nil)-m0.sum("rest_client_rate_limiter_duration_seconds_sum", nil))
		} else {
			fmt.Println("- `rest_client_rate_limiter_duration_seconds` is not exported by the manager (controller-runtime registers it only on request).")
		}
	}
	if a0 != nil && a1 != nil {
		w := apiWrites(a0, a1)
		mine := map[string]float64{}
		for k, v := range w {
			if strings.HasPrefix(k, "mcpservers") || strings.HasPrefix(k, "events") {
				mine[k] = v
			}
		}
		fmt.Printf("- Apiserver writes to McpServers and Events: %s.\n", fmtCounts(mine))
		fmt.Printf("- Apiserver time per request, mean (`apiserver_request_duration_seconds`, server side): %s.\n", apiLatency(a0, a1))
	}
	if c0 != nil && c1 != nil {
		var parts []string
		for _, role := range cpuRoles {
			d := c1[role] - c0[role]
			parts = append(parts, fmt.Sprintf("%s %.1f s (%.2f cores)", role, d, d/math.Max(wall.Seconds(), 1e-3)))
		}
		fmt.Printf("- CPU time: %s.\n", strings.Join(parts, ", "))
	}
	var seqs []string
	for s, c := range r.phaseSeqs {
		seqs = append(seqs, fmt.Sprintf("%s ×%d", cmpOr(s, "(no status)"), c))
	}
	sort.Strings(seqs)
	fmt.Printf("- Phases seen by the watch per resource: %s.\n", strings.Join(seqs, "; "))
	if m1 := b.mgrAt["idle1"]; m1 != nil {
		fmt.Printf("- Manager (all replicas together) at the end of the idle phase: %.0f goroutines, Go heap in use %s "+
			"(objects, live and not yet collected, %s; next collection at %s), goroutine stacks %s, Go runtime total from the OS %s, %.0f open fds.\n",
			m1.sum("go_goroutines", nil), mb(int64(m1.sum("go_memstats_heap_inuse_bytes", nil))),
			mb(int64(m1.sum("go_memstats_heap_alloc_bytes", nil))), mb(int64(m1.sum("go_memstats_next_gc_bytes", nil))),
			mb(int64(m1.sum("go_memstats_stack_inuse_bytes", nil))),
			mb(int64(m1.sum("go_memstats_sys_bytes", nil))), m1.sum("process_open_fds", nil))
	}
	fmt.Println()
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// peakRate is the highest manager request rate between two samples.
func (b *bench) peakRate() string {
	var best float64
	var at time.Duration
	for i := 1; i < len(b.samples); i++ {
		s0, s1 := b.samples[i-1], b.samples[i]
		if s0.requests == nil || s1.requests == nil {
			continue
		}
		r := total(delta(s0.requests, s1.requests)) / s1.t.Sub(s0.t).Seconds()
		if r > best {
			best, at = r, s1.t.Sub(b.firstCreate)
		}
	}
	return fmt.Sprintf("%.0f requests/s (at %s)", best, dur(at))
}

// printTimeline prints the samples from the first create until shortly
// after every resource was Ready, at most about 30 rows.
func (b *bench) printTimeline() {
	var rows []sample
	for _, s := range b.samples {
		if !s.t.Before(b.firstCreate.Add(-*flagSample)) && !s.t.After(b.lastReady.Add(2**flagSample)) {
			rows = append(rows, s)
		}
	}
	if len(rows) < 2 {
		return
	}
	step := max(1, (len(rows)+29)/30)
	fmt.Println("Timeline (t from the first create; rates and CPU over the preceding interval):")
	fmt.Println()
	fmt.Println("| t | created | Ready | manager requests/s (by method) | workqueue depth | manager RSS (all replicas) | CPU cores: manager / apiserver / etcd / fixture / bench |")
	fmt.Println("|--:|--:|--:|---|--:|--:|---|")
	for i := step; i < len(rows); i += step {
		s0, s1 := rows[i-step], rows[i]
		secs := s1.t.Sub(s0.t).Seconds()
		rates := map[string]float64{}
		if s0.requests != nil && s1.requests != nil {
			for k, v := range delta(s0.requests, s1.requests) {
				rates[k] = math.Round(v / secs)
			}
		}
		var cpu []string
		for _, role := range cpuRoles {
			cpu = append(cpu, fmt.Sprintf("%.2f", (s1.cpu[role]-s0.cpu[role])/secs))
		}
		fmt.Printf("| %.1f s | %d | %d | %s | %.0f | %s | %s |\n", s1.t.Sub(b.firstCreate).Seconds(), s1.created, s1.ready,
			fmtCounts(rates), s1.depth, mb(s1.rss), strings.Join(cpu, " / "))
	}
	fmt.Println()
}

// idleBuckets is the manager's apiserver requests and its RSS at the end of
// each bucket of the idle phase (5 s, or a twelfth of a longer phase).
func (b *bench) idleBuckets() (bucket time.Duration, requests, rss string) {
	bucket = max(5*time.Second, (b.idleEnd.Sub(b.idleStart) / 12).Round(time.Second))
	var counts []float64
	var mem []int64
	var prev map[string]float64
	for _, s := range b.samples {
		if s.requests == nil {
			continue
		}
		if !s.t.Before(b.idleStart) && !s.t.After(b.idleEnd.Add(*flagSample)) {
			i := int(s.t.Sub(b.idleStart) / bucket)
			for len(counts) <= i {
				counts, mem = append(counts, 0), append(mem, 0)
			}
			if prev != nil {
				counts[i] += total(delta(prev, s.requests))
			}
			mem[i] = s.rss
		}
		prev = s.requests
	}
	var rq, rs []string
	for i := range counts {
		rq, rs = append(rq, strconv.FormatFloat(counts[i], 'f', 0, 64)), append(rs, strconv.FormatFloat(float64(mem[i])/1e6, 'f', 0, 64))
	}
	return bucket, strings.Join(rq, ", "), strings.Join(rs, ", ")
}

// idleCPU is the manager's CPU (all replicas, in cores) over the idle
// phase's samples: what a quiet fleet costs, collections included.
func (b *bench) idleCPU() float64 {
	var first, last *sample
	for i := range b.samples {
		s := &b.samples[i]
		if s.cpu == nil || s.t.Before(b.idleStart) || s.t.After(b.idleEnd.Add(*flagSample)) {
			continue
		}
		if first == nil {
			first = s
		}
		last = s
	}
	if first == nil || last == first {
		return 0
	}
	return (last.cpu["manager"] - first.cpu["manager"]) / last.t.Sub(first.t).Seconds()
}

func (b *bench) printNotes(r results) {
	var notes []string
	bucket, rq, rss := b.idleBuckets()
	notes = append(notes, fmt.Sprintf("Idle phase per %s from its start (from the samples): manager apiserver requests %s; manager RSS (MB) %s; manager CPU %.3f cores over the phase.",
		bucket, rq, rss, b.idleCPU()))
	if r.createErrs > 0 {
		notes = append(notes, fmt.Sprintf("%d creates failed; the first: %v", r.createErrs, r.firstErr))
	}
	if len(r.notReady) > 0 {
		show := r.notReady[:min(len(r.notReady), 10)]
		notes = append(notes, fmt.Sprintf("%d resources never Ready, e.g. %s", len(r.notReady), strings.Join(show, ", ")))
	}
	if r.leftReady > 0 {
		notes = append(notes, fmt.Sprintf("%d status writes took a resource out of Ready after it was Ready", r.leftReady))
	}
	notes = append(notes, fmt.Sprintf("Tool counts in status: %s.", fmtIntCounts(r.tools)))
	if len(b.warmUps) > 0 {
		var w []string
		for _, d := range b.warmUps {
			w = append(w, dur(d))
		}
		notes = append(notes, fmt.Sprintf("Before the measurement, %d server-side dry-run creates (not stored, not seen by the manager) took %s; "+
			"they keep a one-time delay of the apiserver's first create of the kind (about 2 s in some runs) out of the measured creates.",
			len(w), strings.Join(w, ", ")))
	}
	b.mu.Lock()
	if len(b.watchErrs) > 0 {
		notes = append(notes, fmt.Sprintf("watch errors: %s", strings.Join(b.watchErrs, "; ")))
	}
	b.mu.Unlock()
	notes = append(notes, b.logProblemNotes()...)
	notes = append(notes, b.notes...)
	fmt.Println("Percentiles are nearest-rank. Create → Ready runs from just before the create call to the watch event that shows " +
		"the resource Ready; status writes are the watch's MODIFIED events of the resource up to and including that one (the " +
		"bench never updates a resource; the manager writes status only).")
	for _, n := range notes {
		fmt.Println("- " + n)
	}
}

// logProblems summarizes the error and warn lines of a JSON (zap production)
// log: the distinct messages with their counts.
func logProblems(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `"level":"error"`) && !strings.Contains(line, `"level":"warn"`) {
			continue
		}
		msg := line
		if _, after, ok := strings.Cut(line, `"msg":"`); ok {
			msg, _, _ = strings.Cut(after, `"`)
		}
		counts[msg]++
	}
	var out []string
	for msg, c := range counts {
		out = append(out, fmt.Sprintf("%q ×%d", msg, c))
	}
	sort.Strings(out)
	return out
}

func fmtIntCounts[K comparable](m map[K]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%v ×%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func mean(xs []int) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s int
	for _, x := range xs {
		s += x
	}
	return float64(s) / float64(len(xs))
}

func dur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	default:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	}
}

func mb(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/1e6) }
