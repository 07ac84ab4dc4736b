package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/hack/bench/internal/report"
	"github.com/mcpbridge/operator/internal/proc"
)

// The calls phase (-calls): after the idle phase, with the whole fleet
// Ready, -callers agents open a session each at one replica (agent k at
// replica k mod N), list every tool, and call the servers' echo tools
// through the replicas' gateways without pause, each call to a server
// picked at random, so that most calls are forwarded to their owner when
// there are several replicas. What it reports is what agents cost a
// manager that holds a large fleet: the replicas' memory and CPU as the
// sessions open and the agents list, their CPU per call and how often their
// collectors ran (docs/design.md, "Garbage while quiet, and while busy").
var (
	flagCalls   = flag.Duration("calls", 0, "after the idle phase, agents call the servers' echo tools through the gateways for this long (0: no calls phase)")
	flagCallers = flag.Int("callers", 8, "agents in the calls phase, each on its own session at replica (its index mod -replicas), calling without pause")
)

// callStats is what the calls phase measured.
type callStats struct {
	wall       time.Duration
	lat        []time.Duration
	failed     int
	firstErrs  []string
	byReplica  []replicaCalls
	listed     []int           // tools each agent listed after it connected
	listTook   []time.Duration // how long each agent's list took
	benchCPU   float64
	setupError error
}

// replicaCalls is one replica's share of the calls phase.
type replicaCalls struct {
	entered  int     // calls its gateway received from the agents
	cpu      float64 // seconds of CPU over the phase
	gcCycles float64
	gogcEnd  float64 // go_gc_gogc_percent at the phase's end
	// VmRSS before the agents opened their sessions, once they had, once
	// they had listed the tools and after the calls; VmHWM before the
	// sessions, after the lists and after the calls.
	rssBefore, rssOpened, rssListed, rssAfter int64
	hwmBefore, hwmListed, hwmAt               int64
	// CPU seconds the replica used while the sessions opened, and while
	// the agents listed the tools.
	cpuOpening, cpuListing float64
}

// callPhase runs the calls phase; an agent that cannot open its session
// makes the phase's figures meaningless and is reported as such.
func (b *bench) callPhase(ctx context.Context) callStats {
	var st callStats
	if *flagCalls <= 0 || *flagCallers < 1 {
		return st
	}
	st.byReplica = make([]replicaCalls, len(b.managers))
	for i, r := range b.managers {
		st.byReplica[i].hwmBefore, _ = proc.Memory(r.Pid(), "VmHWM")
		st.byReplica[i].rssBefore, _ = proc.Memory(r.Pid(), "VmRSS")
		st.byReplica[i].cpuOpening = -cpuOf(r.Pid())
	}
	// The first session in the namespace makes each replica's gateway
	// build its view of the namespace's tools.
	sessions, err := b.openCallers(ctx)
	if err != nil {
		st.setupError = err
		return st
	}
	defer func() {
		for _, cs := range sessions {
			_ = cs.Close()
		}
	}()
	for i, r := range b.managers {
		st.byReplica[i].rssOpened, _ = proc.Memory(r.Pid(), "VmRSS")
		c := cpuOf(r.Pid())
		st.byReplica[i].cpuOpening += c
		st.byReplica[i].cpuListing = -c
	}
	if st.listed, st.listTook, err = listAll(ctx, sessions); err != nil {
		st.setupError = err
		return st
	}
	for i, r := range b.managers {
		st.byReplica[i].rssListed, _ = proc.Memory(r.Pid(), "VmRSS")
		st.byReplica[i].hwmListed, _ = proc.Memory(r.Pid(), "VmHWM")
		st.byReplica[i].cpuListing += cpuOf(r.Pid())
	}
	if *flagPprof != "" {
		b.profiles(ctx, "the sessions open and every tool listed", "heap?gc=1", "manager-heap-sessions", ".pprof")
	}
	gc0, bench0 := b.gcAndCPU(&st), cpuOf(os.Getpid())
	fmt.Fprintf(os.Stderr, "calls phase: %d agents for %s ...\n", len(sessions), *flagCalls)

	var mu sync.Mutex
	pctx, stop := context.WithTimeout(ctx, *flagCalls)
	defer stop()
	t0 := time.Now()
	var wg sync.WaitGroup
	for k, cs := range sessions {
		wg.Go(func() {
			lat, failed, errs := callLoop(pctx, cs, b)
			mu.Lock()
			defer mu.Unlock()
			st.lat = append(st.lat, lat...)
			st.failed += failed
			st.byReplica[k%len(b.managers)].entered += len(lat) + failed
			for _, e := range errs {
				if len(st.firstErrs) < 3 {
					st.firstErrs = append(st.firstErrs, e)
				}
			}
		})
	}
	wg.Wait()
	st.wall = time.Since(t0)
	st.benchCPU = cpuOf(os.Getpid()) - bench0
	gc1 := b.gcAndCPU(&st)
	for i, r := range b.managers {
		rc := &st.byReplica[i]
		rc.gcCycles = gc1[i].gc - gc0[i].gc
		rc.cpu = gc1[i].cpu - gc0[i].cpu
		rc.gogcEnd = gc1[i].gogc
		rc.hwmAt, _ = proc.Memory(r.Pid(), "VmHWM")
		rc.rssAfter, _ = proc.Memory(r.Pid(), "VmRSS")
	}
	return st
}

// openCallers opens one session per agent, agent k at replica k mod N.
func (b *bench) openCallers(ctx context.Context) ([]*mcp.ClientSession, error) {
	var out []*mcp.ClientSession
	for k := range *flagCallers {
		r := b.managers[k%len(b.managers)]
		c := mcp.NewClient(&mcp.Implementation{Name: "scale-agent", Version: "v0"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + r.gateway + "/namespaces/" + namespace + "/mcp"},
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			for _, o := range out {
				_ = o.Close()
			}
			return nil, fmt.Errorf("agent %d at replica %s: %w", k, r.name, err)
		}
		out = append(out, cs)
	}
	return out, nil
}

// listAll has every agent list the namespace's tools, as an agent does
// after it connects, one agent after another: the tools each listed and
// how long each took.
func listAll(ctx context.Context, sessions []*mcp.ClientSession) (counts []int, took []time.Duration, err error) {
	for k, cs := range sessions {
		t0 := time.Now()
		n := 0
		for _, err := range cs.Tools(ctx, nil) {
			if err != nil {
				return nil, nil, fmt.Errorf("agent %d's tools/list: %w", k, err)
			}
			n++
		}
		counts, took = append(counts, n), append(took, time.Since(t0))
	}
	return counts, took, nil
}

// callLoop calls random servers' echo tools one after another until ctx
// ends; a call cut off by the phase's end is not counted.
func callLoop(ctx context.Context, cs *mcp.ClientSession, b *bench) (lat []time.Duration, failed int, errs []string) {
	for ctx.Err() == nil {
		tool := "mcp__" + serverNameOf(b.name(rand.IntN(*flagN))) + "__echo"
		t := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "scale"}})
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
		case res.IsError:
			err = errors.New(toolText(res))
		default:
			lat = append(lat, time.Since(t))
			continue
		}
		failed++
		if len(errs) < 3 {
			errs = append(errs, fmt.Sprintf("%s: %.200s", tool, err))
		}
	}
	return
}

func toolText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, " ")
}

// gcPoint is a replica's collector count, GOGC and CPU at one moment.
type gcPoint struct{ gc, gogc, cpu float64 }

func (b *bench) gcAndCPU(st *callStats) []gcPoint {
	out := make([]gcPoint, len(b.managers))
	for i, r := range b.managers {
		out[i].cpu = cpuOf(r.Pid())
		m, err := fetchMetrics(r.metrics)
		if err != nil {
			st.firstErrs = append(st.firstErrs, fmt.Sprintf("replica %s's metrics: %v", r.name, err))
			continue
		}
		out[i].gc = m.sum("go_gc_duration_seconds_count", nil)
		out[i].gogc = m.sum("go_gc_gogc_percent", nil)
	}
	return out
}

// printCalls prints the calls phase's table.
func (b *bench) printCalls(st callStats) {
	if *flagCalls <= 0 {
		return
	}
	fmt.Printf("Calls phase (`-calls=%s -callers=%d`): after the idle phase, each agent (go-sdk, protocol 2025-11-25, a session of its own at replica "+
		"`index mod %d`, in the bench's process) lists every tool (all pages) once, one agent after another, and then calls a random server's `echo` through that replica's gateway without pause; "+
		"a call to a server another replica owns is forwarded to its owner.\n\n", *flagCalls, *flagCallers, len(b.managers))
	if st.setupError != nil {
		fmt.Printf("Not measured: %v\n\n", st.setupError)
		return
	}
	calls := len(st.lat)
	fmt.Println("| Measurement | Value |")
	fmt.Println("|---|--:|")
	row := func(name, value string) { fmt.Printf("| %s | %s |\n", name, value) }
	var took []string
	for _, d := range st.listTook {
		took = append(took, fmt.Sprintf("%.2f s", d.Seconds()))
	}
	row("Tools each agent listed after it connected (all pages, one agent after another); how long each list took",
		fmt.Sprintf("%v; %s", st.listed, strings.Join(took, ", ")))
	row("Calls answered / failed", fmt.Sprintf("%d / %d", calls, st.failed))
	row("Calls/s", fmt.Sprintf("%.0f", float64(calls)/st.wall.Seconds()))
	if calls > 0 {
		row("Call p50 / p99", fmt.Sprintf("%.2f / %.2f ms", ms(report.Percentile(st.lat, 50)), ms(report.Percentile(st.lat, 99))))
	}
	var cpu, gc float64
	for i, r := range b.managers {
		rc := st.byReplica[i]
		cpu += rc.cpu
		gc += rc.gcCycles
		row(fmt.Sprintf("Replica %s: calls its gateway received; its CPU; its collections; GOGC at the end", r.name),
			fmt.Sprintf("%d; %.2f s; %.0f; %.0f", rc.entered, rc.cpu, rc.gcCycles, rc.gogcEnd))
		row(fmt.Sprintf("Replica %s: VmRSS before the sessions → with them open → after every agent listed the tools → after the calls", r.name),
			fmt.Sprintf("%s → %s → %s → %s", mb(rc.rssBefore), mb(rc.rssOpened), mb(rc.rssListed), mb(rc.rssAfter)))
		row(fmt.Sprintf("Replica %s: VmHWM before the sessions → after the lists → after the calls", r.name),
			fmt.Sprintf("%s → %s → %s", mb(rc.hwmBefore), mb(rc.hwmListed), mb(rc.hwmAt)))
		row(fmt.Sprintf("Replica %s: CPU while the sessions opened; while the agents listed the tools", r.name),
			fmt.Sprintf("%.2f s; %.2f s", rc.cpuOpening, rc.cpuListing))
	}
	if calls > 0 {
		row("Replicas' CPU per answered call (all replicas: entry, forwarding, owner)", fmt.Sprintf("%.3f ms", cpu*1e3/float64(calls)))
		row("Answered calls per collection (all replicas)", fmt.Sprintf("%.0f", float64(calls)/max(gc, 1)))
	}
	row("The bench process's CPU (the agents)", fmt.Sprintf("%.2f s", st.benchCPU))
	fmt.Println()
	for _, e := range st.firstErrs {
		fmt.Println("- " + e)
	}
	if len(st.firstErrs) > 0 {
		fmt.Println()
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
