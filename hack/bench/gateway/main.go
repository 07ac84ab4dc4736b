// Command gateway measures tools/call of the fixture's echo tool directly
// against the fixture and through the MCP gateway (internal/gateway), and
// prints a markdown table with the command that reproduces it (
// the gateway adds ≤ 0.5 ms at p50 and keeps ≥ 80% of direct throughput).
//
//	go run ./hack/bench/gateway [-duration=5s] [-callers=1,32] [-auth=none,namespace,servers] [-tracing=memory|batch|control] [-floor] [-cpuprofile=FILE]
//
// The fixture runs as a separate process (bin built into a temp dir, served
// with --http=127.0.0.1:0); -servers supervisors connected to it, the
// gateways and the load-generating clients run in this process. Each -auth
// mode is a gateway of its own over the same registry: none (as with
// --gateway-auth=none), namespace (token authentication, a token for
// mcpbridge.dev whose ServiceAccount may use the namespace's McpServers) and
// servers (a token whose ServiceAccount may use -allowed of the -servers
// McpServers by name, RBAC resourceNames). The token modes review tokens
// and access with a real kube-apiserver (internal/testenv, bin/k8s) and
// cache the answers as the manager does; every gateway is called for the
// first server's echo tool, which every mode may use.
// With -tracing, every mode is measured a second time against a gateway
// and supervisors with tracing on (a second set over the same fixture), in
// the same alternating rounds, and a second table gives what tracing adds;
// -tracing=control leaves the second set untraced, so that the table shows
// the spread of the comparison itself.
// It is a benchmark, not a test: it asserts nothing and exits 0 whether or
// not a goal is met (exit 1 only when it cannot measure at all).
// See docs/design.md, "How it is tested".
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/hack/bench/internal/report"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/testenv"
)

const (
	fixturePkg = "github.com/mcpbridge/operator/test/fixture/cmd/mcp-fixture"
	namespace  = "bench"
	// fixtureEcho is the fixture's tool that answers its text argument.
	fixtureEcho = "echo"
	echoText    = "hello"
)

var (
	flagDuration   = flag.Duration("duration", 5*time.Second, "measured time per cell and path (direct, gateway)")
	flagWarmup     = flag.Duration("warmup", time.Second, "warm-up time per cell and path (same sessions, not recorded)")
	flagRounds     = flag.Int("rounds", 5, "direct and gateway alternate in this many rounds of duration/rounds each")
	flagCallers    = flag.String("callers", "1,32", "comma-separated concurrent callers; each caller has its own client session")
	flagShared     = flag.Bool("shared", true, "also measure every caller count > 1 over one shared client session")
	flagProtocols  = flag.String("protocols", "2026-07-28,2025-11-25", "client protocol versions (2026-07-28: sessionless, 2025-11-25: sessions)")
	flagFixture    = flag.String("fixture", "", "fixture binary (default: go build "+fixturePkg+" into a temp dir)")
	flagCPUProfile = flag.String("cpuprofile", "", "write a CPU profile of this process (agents + gateway + supervisor) to `FILE`; goroutines carry pprof labels role, mode, proto, callers, and tracing on the gateway's")
	flagMemProfile = flag.String("memprofile", "", "write an allocation profile of this process to `FILE` at the end (go tool pprof -sample_index=alloc_space)")
	flagVerbose    = flag.Bool("v", false, "log the supervisor to stderr")
	flagAuth       = flag.String("auth", "none,namespace,servers", "gateways to measure: none, namespace (may use every McpServer), servers (may use -allowed of them by name)")
	flagServers    = flag.Int("servers", 20, "McpServers (supervisors of the same fixture) in the registry")
	flagAllowed    = flag.Int("allowed", 5, "McpServers the servers mode may use by name")
	flagFloor      = flag.Bool("floor", false, "also measure a plain net/http reverse proxy (httputil.ReverseProxy) to the fixture, in the same rounds: what one more net/http hop costs without the gateway")
	flagTracing    = flag.String("tracing", "", "also measure every -auth mode with tracing on, every call sampled, over a second set of "+
		"-servers supervisors: memory (spans exported synchronously to the SDK's in-memory exporter, emptied after every round) "+
		"or batch (the manager's shape: a batch span processor whose exporter drops the spans); control runs the second set untraced too, "+
		"to show how far two identical gateways differ")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// cell is one measured combination; each is measured direct and through
// the gateway.
type cell struct {
	proto    string
	callers  int
	sessions int
}

// result is what one cell measured on one path.
type result struct {
	cell
	mode       string // "direct" or an -auth mode of the gateway
	lat        []time.Duration
	errs       int
	elapsed    time.Duration
	cpuSelf    time.Duration // this process: agents (+ gateway and supervisor)
	cpuFixture time.Duration // the fixture process
	allocSelf  uint64        // heap bytes allocated by this process
	negotiated string        // the agent's protocol version
	upstream   string        // the supervisor's protocol version (gateway only)
	spans      int64         // spans ended during the measured rounds (traced gateways only)
}

func (r result) rate() float64 { return float64(len(r.lat)) / r.elapsed.Seconds() }

// perCall divides d by the successful calls.
func (r result) perCall(d time.Duration) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return d / time.Duration(len(r.lat))
}

type bench struct {
	fixture string
	log     logr.Logger
	modes   []string
	auth    *authEnv   // nil without token modes
	results [][]result // per cell: direct, then one per mode
	notes   []string
}

func run() error {
	b := &bench{log: logr.Discard()}
	if *flagVerbose {
		b.log = funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
	}
	callers, err := parseInts(*flagCallers)
	if err != nil {
		return fmt.Errorf("-callers: %w", err)
	}
	if b.modes, err = parseModes(*flagAuth); err != nil {
		return err
	}
	if *flagTracing != "" && *flagTracing != tracingMemory && *flagTracing != tracingBatch && *flagTracing != tracingControl {
		return fmt.Errorf("-tracing must be %s, %s or %s, not %q", tracingMemory, tracingBatch, tracingControl, *flagTracing)
	}
	if *flagServers < 1 || *flagAllowed < 1 || *flagAllowed > *flagServers {
		return errors.New("-servers and -allowed must be at least 1, -allowed at most -servers")
	}
	if slices.ContainsFunc(b.modes, func(m string) bool { return m != "none" }) {
		if b.auth, err = startAuth(); err != nil {
			return fmt.Errorf("the control plane for the token modes: %w", err)
		}
		defer b.auth.stop()
	}
	if *flagRounds < 1 || *flagDuration/time.Duration(*flagRounds) <= 0 {
		return errors.New("-rounds must be at least 1 and at most -duration in nanoseconds")
	}
	if b.fixture = *flagFixture; b.fixture == "" {
		dir, err := os.MkdirTemp("", "bench-gateway-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if b.fixture, err = buildFixture(dir); err != nil {
			return err
		}
	}
	stopProfile, err := report.CPUProfile(*flagCPUProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	started, loadBefore := time.Now(), report.LoadAvg()
	for _, proto := range strings.Split(*flagProtocols, ",") {
		if err := b.protocol(strings.TrimSpace(proto), callers); err != nil {
			return fmt.Errorf("protocol %s: %w", proto, err)
		}
	}
	b.print(time.Since(started), loadBefore)
	if *flagMemProfile != "" {
		return report.WriteProfile("allocs", *flagMemProfile)
	}
	return nil
}

func buildFixture(dir string) (string, error) {
	bin := filepath.Join(dir, "mcp-fixture")
	return bin, testenv.Build(bin, fixturePkg)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// protocol measures every cell of one client protocol version against one
// fixture process: stateless for 2026-07-28, with sessions for 2025-11-25,
// so that both hops of the gateway speak the protocol the agent asked for.
func (b *bench) protocol(proto string, callers []int) error {
	args := []string{"--protocol=" + proto}
	if proto >= "2026-07-28" {
		args = append(args, "--stateless")
	}
	fx, err := startFixture(b.fixture, args...)
	if err != nil {
		return err
	}
	defer fx.stop()
	gw, err := b.startGateway(proto, fx.url, nil)
	if err != nil {
		return err
	}
	defer gw.stop()
	var traced *gatewayEnv
	if *flagTracing != "" {
		if traced, err = b.startGateway(proto, fx.url, newTracing(*flagTracing)); err != nil {
			return err
		}
		defer traced.stop()
	}
	var cells []cell
	for _, n := range callers {
		cells = append(cells, cell{proto: proto, callers: n, sessions: n})
		if *flagShared && n > 1 {
			cells = append(cells, cell{proto: proto, callers: n, sessions: 1})
		}
	}
	targets := []target{{mode: "direct", url: fx.url, tool: fixtureEcho}}
	if *flagFloor {
		url, stop, err := startProxy(fx.url)
		if err != nil {
			return err
		}
		defer stop()
		targets = append(targets, target{mode: modeProxy, url: url, tool: fixtureEcho})
		url, stop, err = startRelay(fx.url)
		if err != nil {
			return err
		}
		defer stop()
		targets = append(targets, target{mode: modeRelay, url: url, tool: fixtureEcho})
	}
	for _, m := range b.modes {
		targets = append(targets, target{mode: m, url: gw.urls[m], tool: registry.PublicName(serverName(0), fixtureEcho), token: b.auth.token(m)})
		if traced != nil {
			targets = append(targets, target{mode: m + tracedSuffix, url: traced.urls[m], tool: registry.PublicName(serverName(0), fixtureEcho),
				token: b.auth.token(m), tracing: traced.tracing})
		}
	}
	for _, c := range cells {
		fmt.Fprintf(os.Stderr, "%s: %d callers over %d sessions ...\n", proto, c.callers, c.sessions)
		res, err := measure(c, targets, fx.pid)
		if err != nil {
			return fmt.Errorf("%d callers over %d sessions: %w", c.callers, c.sessions, err)
		}
		for i := 1; i < len(res); i++ {
			if res[i].mode != modeProxy && res[i].mode != modeRelay {
				res[i].upstream = gw.upstreamProtocol()
			}
		}
		b.results = append(b.results, res)
	}
	return nil
}

// ---- the fixture process ---------------------------------------------------

type fixtureProc struct {
	cmd *exec.Cmd
	url string
	pid int
}

// startFixture runs the fixture binary with --http=127.0.0.1:0 and reads the
// URL it announces on its first stdout line.
func startFixture(bin string, args ...string) (*fixtureProc, error) {
	cmd := exec.Command(bin, append([]string{"--http=127.0.0.1:0"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	fx := &fixtureProc{cmd: cmd, pid: cmd.Process.Pid}
	line, err := bufio.NewReader(out).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		fx.stop()
		return nil, fmt.Errorf("fixture announced %q: %v", line, err)
	}
	fx.url = url
	return fx, nil
}

func (fx *fixtureProc) stop() {
	_ = fx.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = fx.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = fx.cmd.Process.Kill()
		<-done
	}
}

// ---- the gateway -----------------------------------------------------------

// serverName is the name (and serverName) of the i-th McpServer.
func serverName(i int) string { return fmt.Sprintf("fx%02d", i) }

type gatewayEnv struct {
	sups    []*bridge.Supervisor
	srvs    []*http.Server
	urls    map[string]string // by mode
	cancel  context.CancelFunc
	tracing *benchTracing // nil: tracing off
}

// startGateway runs -servers supervisors connected to upstream, publishing
// into one registry, and a gateway per mode over that registry on a
// loopback port each; it returns once every supervisor is Ready. tr, if not
// nil, traces the supervisors and the gateways.
func (b *bench) startGateway(proto, upstream string, tr *benchTracing) (*gatewayEnv, error) {
	reg := registry.New()
	ctx, cancel := context.WithCancel(context.Background())
	env := &gatewayEnv{cancel: cancel, urls: map[string]string{}, tracing: tr}
	var tp trace.TracerProvider // nil: off
	traced := "off"
	if tr != nil && tr.provider != nil {
		tp, traced = tr.provider, "on"
	}
	// Everything started here (the supervisors' goroutines, the servers'
	// connection goroutines and the upstream calls they make) inherits
	// role=gateway and tracing=on|off in the CPU profile.
	var err error
	pprof.Do(ctx, pprof.Labels("role", "gateway", "proto", proto, "tracing", traced), func(ctx context.Context) {
		for i := range *flagServers {
			p := &policy.Policy{
				ServerName:        serverName(i),
				Transport:         v1alpha1.TransportStreamableHTTP,
				HTTP:              &policy.HTTP{URL: upstream},
				ToolCallTimeout:   30 * time.Second,
				ConnectionTimeout: 10 * time.Second,
				Reconnect:         policy.Reconnect{Enabled: true, InitialDelay: 100 * time.Millisecond, MaxDelay: time.Second, MaxAttempts: 10},
			}
			// The fixture upstream listens on loopback, which the egress
			// policy refuses unless allowed, as --upstream-allow-cidrs=127.0.0.0/8 does.
			sup := bridge.New(bridge.Options{Namespace: namespace, Name: serverName(i), Policy: p, Registry: reg, Log: b.log,
				Egress: egress.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}), TracerProvider: tp})
			sup.Start(ctx)
			env.sups = append(env.sups, sup)
		}
		for _, m := range b.modes {
			g := &gateway.Gateway{Registry: reg, Log: b.log, Auth: b.auth.access(m), TracerProvider: tp}
			var ln net.Listener
			if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				return
			}
			srv, ln := g.Server(ln) // as the manager serves it
			env.srvs = append(env.srvs, srv)
			env.urls[m] = fmt.Sprintf("http://%s/namespaces/%s/mcp", ln.Addr(), namespace)
			go func() { _ = g.Start(ctx) }()
			go func() { _ = srv.Serve(ln) }()
		}
	})
	if err != nil {
		env.stop()
		return nil, err
	}
	for _, sup := range env.sups {
		if err := waitReady(sup, 30*time.Second); err != nil {
			env.stop()
			return nil, err
		}
	}
	return env, nil
}

func waitReady(s *bridge.Supervisor, limit time.Duration) error {
	deadline := time.After(limit)
	for {
		sn := s.Snapshot()
		if sn.Phase == v1alpha1.PhaseReady {
			return nil
		}
		select {
		case <-s.Changes():
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			return fmt.Errorf("supervisor not Ready after %s: phase %s, lastError %v", limit, sn.Phase, sn.LastError)
		}
	}
}

func (env *gatewayEnv) upstreamProtocol() string {
	if info := env.sups[0].Snapshot().ServerInfo; info != nil {
		return info.ProtocolVersion
	}
	return "?"
}

func (env *gatewayEnv) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, srv := range env.srvs {
		_ = srv.Shutdown(ctx)
	}
	env.cancel()
	for _, sup := range env.sups {
		_ = sup.Dispose(ctx)
	}
	if env.tracing != nil && env.tracing.provider != nil {
		_ = env.tracing.provider.Shutdown(ctx)
	}
}

// ---- the load --------------------------------------------------------------

// target is where agents send their calls, with a bearer token unless it
// is empty; tracing is the traced gateway's tracing, nil when off.
type target struct {
	mode, url, tool, token string
	tracing                *benchTracing
}

// measure connects agents to each target, warms them up, then alternates
// between the targets in -rounds rounds, so that a change of machine load
// during the cell hits every target alike. It returns one result per target.
func measure(c cell, targets []target, fixturePid int) (res []result, err error) {
	res = make([]result, len(targets))
	ags := make([]*agents, len(targets))
	defer func() {
		for _, a := range ags {
			a.close()
		}
	}()
	for i, t := range targets {
		res[i].cell, res[i].mode = c, t.mode
		if ags[i], err = connectAgents(c, t); err != nil {
			return nil, fmt.Errorf("%s: %w", t.mode, err)
		}
		res[i].negotiated = ags[i].sessions[0].InitializeResult().ProtocolVersion
		ags[i].load(*flagWarmup)
	}
	slice := *flagDuration / time.Duration(*flagRounds)
	for range *flagRounds {
		for i, a := range ags {
			tr := targets[i].tracing
			tr.reset() // the warm-up's spans, or the last round's, out of the heap and the count
			self0, fx0, alloc0, t0 := cpuSelf(), cpuOf(fixturePid), allocated(), time.Now()
			lat, errs := a.load(slice)
			res[i].elapsed += time.Since(t0)
			res[i].cpuSelf += cpuSelf() - self0
			res[i].cpuFixture += cpuOf(fixturePid) - fx0
			res[i].allocSelf += allocated() - alloc0
			res[i].lat, res[i].errs = append(res[i].lat, lat...), res[i].errs+errs
			res[i].spans += tr.ended()
		}
	}
	return res, nil
}

// agents are the client sessions of one cell and target.
type agents struct {
	c        cell
	t        target
	hc       *http.Client
	sessions []*mcp.ClientSession
	labels   pprof.LabelSet
}

// connectAgents opens c.sessions sessions to t and checks that the tool
// echoes. Everything the agents start (SDK readers, HTTP connections) is
// labelled role=agent in the CPU profile.
func connectAgents(c cell, t target) (a *agents, err error) {
	a = &agents{c: c, t: t, labels: pprof.Labels("role", "agent", "mode", t.mode, "proto", c.proto, "callers", strconv.Itoa(c.callers))}
	// Enough idle connections for every caller: the default transport keeps
	// 2 per host, which would make the agents reconnect, in both modes.
	var rt http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: 2*c.callers + 4, IdleConnTimeout: time.Minute}
	if t.token != "" {
		rt = bearer{token: t.token, next: rt}
	}
	a.hc = &http.Client{Transport: rt}
	client := mcp.NewClient(&mcp.Implementation{Name: "bench-agent", Version: "v0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pprof.Do(ctx, a.labels, func(ctx context.Context) {
		for range c.sessions {
			var s *mcp.ClientSession
			s, err = client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: t.url, HTTPClient: a.hc},
				&mcp.ClientSessionOptions{ProtocolVersion: c.proto})
			if err != nil {
				err = fmt.Errorf("connect: %w", err)
				return
			}
			a.sessions = append(a.sessions, s)
		}
		err = checkEcho(ctx, a.sessions[0], t.tool)
	})
	if err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

func (a *agents) close() {
	if a == nil {
		return
	}
	for _, s := range a.sessions {
		_ = s.Close()
	}
	a.hc.CloseIdleConnections()
}

// bearer sends a token with every request, as an agent does.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func (b bearer) CloseIdleConnections() {
	if c, ok := b.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// checkEcho makes sure that the tool answers and echoes its argument.
func checkEcho(ctx context.Context, s *mcp.ClientSession, tool string) error {
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": echoText}})
	if err != nil {
		return fmt.Errorf("first call: %w", err)
	}
	if got := bridge.RenderText(res); res.IsError || got != echoText {
		return fmt.Errorf("first call answered %q (isError %v)", got, res.IsError)
	}
	return nil
}

// load runs c.callers goroutines, caller i on session i mod sessions, each
// calling the tool back to back until d has passed, and returns the
// latencies of the successful calls and the number of failed ones.
func (a *agents) load(d time.Duration) (all []time.Duration, failed int) {
	end := time.Now().Add(d)
	lats := make([][]time.Duration, a.c.callers)
	errs := make([]int, a.c.callers)
	pprof.Do(context.Background(), a.labels, func(context.Context) {
		var wg sync.WaitGroup
		for i := range a.c.callers {
			wg.Go(func() {
				s := a.sessions[i%len(a.sessions)]
				params := &mcp.CallToolParams{Name: a.t.tool, Arguments: map[string]any{"text": echoText}}
				for t0 := time.Now(); t0.Before(end); t0 = time.Now() {
					res, err := s.CallTool(context.Background(), params)
					if err != nil || res.IsError {
						errs[i]++
						continue
					}
					lats[i] = append(lats[i], time.Since(t0))
				}
			})
		}
		wg.Wait()
	})
	for i := range lats {
		all = append(all, lats[i]...)
		failed += errs[i]
	}
	return all, failed
}

// allocated is the heap bytes this process has allocated so far.
func allocated() uint64 {
	m := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(m)
	return m[0].Value.Uint64()
}

// cpuSelf is this process's user + system CPU time.
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuOf is another process's user + system CPU time; 0 when it is gone.
func cpuOf(pid int) time.Duration {
	st, _ := proc.ReadStat(pid)
	return st.CPU
}

// ---- output ----------------------------------------------------------------

// gatewayMet holds a gateway row to its targets (docs/design.md, "How it is
// tested"): ≤ 0.1 ms added at p50 with --gateway-auth=none, ≤ 0.3 ms with
// tokens and per-server authorization, ≥ 80% of direct throughput; at one
// caller only (with more, both cores are saturated and the p50 is queueing).
func gatewayMet(g result, added time.Duration, ratio float64) string {
	switch g.mode {
	case modeProxy:
		return "no target: the floor of one net/http hop"
	case modeRelay:
		return "no target: the floor of one TCP hop"
	}
	if g.callers != 1 {
		return "no target at " + strconv.Itoa(g.callers) + " callers"
	}
	limit := 100 * time.Microsecond
	if strings.TrimSuffix(g.mode, tracedSuffix) != "none" {
		limit = 300 * time.Microsecond
	}
	return fmt.Sprintf("%s (≤ %s), %s (≥ 80%%)", report.YesNo(added <= limit), msf(limit), report.YesNo(ratio >= 0.8))
}

func (b *bench) print(elapsed time.Duration, loadBefore string) {
	cmd := "go run ./hack/bench/gateway"
	flag.Visit(func(f *flag.Flag) { cmd += " -" + f.Name + "=" + f.Value.String() })
	fmt.Printf("Command: `%s`  \n", cmd)
	fmt.Printf("Date: %s; %d cores (runtime.NumCPU); %s %s/%s; fixture: separate process `mcp-fixture --http=127.0.0.1:0`; "+
		"per cell and path %s measured in %d alternating rounds after %s warm-up; run took %s; 1-min load average %s before, %s after.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH,
		*flagDuration, *flagRounds, *flagWarmup, elapsed.Round(time.Second), loadBefore, report.LoadAvg())
	fmt.Println("| Protocol (agent / upstream) | Callers × sessions | Path | calls | p50 | p99 | calls/s | CPU/call: bench process (gateway's share) | CPU/call: fixture | Alloc/call: bench process | Added p50 | Throughput (CPU-bound) | Met (target from docs/design.md): added p50, throughput |")
	fmt.Println("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
	for _, cell := range b.results {
		d := cell[0]
		b.printRow(d, "", " | | |")
		for _, g := range cell[1:] {
			added := report.Percentile(g.lat, 50) - report.Percentile(d.lat, 50)
			ratio := g.rate() / d.rate()
			// The throughput ratio if CPU were the only limit: direct over
			// gateway CPU per call, both processes summed. It moves less
			// with the machine's other load than calls/s do.
			cpuRatio := float64(d.perCall(d.cpuSelf+d.cpuFixture)) / float64(g.perCall(g.cpuSelf+g.cpuFixture))
			share := fmt.Sprintf(" (%s)", msf(g.perCall(g.cpuSelf)-d.perCall(d.cpuSelf)))
			b.printRow(g, share, fmt.Sprintf(" %s | %.0f%% (%.0f%%) | %s |", msf(added), 100*ratio, 100*cpuRatio,
				gatewayMet(g, added, ratio)))
		}
	}
	fmt.Println()
	fmt.Println("Percentiles are nearest-rank over every successful call of the cell. CPU/call is the user+system CPU of a process during " +
		"the measured rounds divided by the calls: the bench process holds the agents, and in gateway rows also the gateway and " +
		"the supervisor (in brackets: gateway row minus direct row, i.e. the gateway and supervisor alone); the fixture's CPU is " +
		"read from /proc/PID/stat at 10 ms resolution. Alloc/call: heap bytes allocated by the bench process per call " +
		"(runtime/metrics). Throughput: gateway calls/s over direct calls/s; in brackets direct CPU/call over gateway CPU/call, " +
		"both processes summed, i.e. the ratio when CPU is the only limit.")
	for _, n := range b.notes {
		fmt.Println("- " + n)
	}
	if *flagTracing != "" {
		b.printTracing()
	}
}

// printRow prints one path of a cell; share follows the bench CPU, tail
// closes the row.
func (b *bench) printRow(r result, share, tail string) {
	proto := r.negotiated
	mode := r.mode
	if r.mode == modeProxy || r.mode == modeRelay {
		proto += " / " + r.negotiated
		mode = map[string]string{modeProxy: "httputil.ReverseProxy, no gateway", modeRelay: "TCP relay, no gateway"}[r.mode]
	} else if r.mode != "direct" {
		proto += " / " + r.upstream
		auth, traced := strings.CutSuffix(r.mode, tracedSuffix)
		mode = "gateway, auth " + map[string]string{"none": "none",
			"namespace": "token, may use the namespace",
			"servers":   fmt.Sprintf("token, may use %d of %d by name", *flagAllowed, *flagServers)}[auth]
		if traced {
			mode += ", tracing " + *flagTracing
		}
	}
	if r.errs > 0 {
		b.notes = append(b.notes, fmt.Sprintf("%s %s, %d callers: %d calls failed", r.proto, r.mode, r.callers, r.errs))
	}
	fmt.Printf("| %s | %d × %d | %s | %d | %s | %s | %.0f | %s%s | %s | %.0f kB |%s\n", proto, r.callers, r.sessions, mode,
		len(r.lat), msf(report.Percentile(r.lat, 50)), msf(report.Percentile(r.lat, 99)), r.rate(),
		msf(r.perCall(r.cpuSelf)), share, msf(r.perCall(r.cpuFixture)), float64(r.allocSelf)/float64(max(1, len(r.lat)))/1e3, tail)
}

// msf formats a duration in milliseconds with two decimals.
func msf(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
