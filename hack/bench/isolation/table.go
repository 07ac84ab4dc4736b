package main

import (
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/mcpbridge/operator/hack/bench/internal/report"
	"github.com/mcpbridge/operator/test/fixture"
)

// ---- memory ------------------------------------------------------------------

type memPeak struct{ heap, rss uint64 }

func (m *memPeak) reset() { m.heap, m.rss = 0, 0 }

func (m *memPeak) sample() {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	m.heap = max(m.heap, s[0].Value.Uint64())
	m.rss = max(m.rss, rss())
}

// rss is the resident set of this process (VmRSS), in bytes.
func rss() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.Fields(v)[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// ---- the table -----------------------------------------------------------------

func printTable(unloaded, loaded victimRun, a attackCounts, changes [2]int64, mem *memPeak, hists [2][]metrics.Sample, loadBefore string) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
	p := func(r victimRun, q float64) time.Duration { return report.Percentile(r.Lat, q) }
	fmt.Printf("`go run ./hack/bench/isolation -duration=%s -rate=%d -sessions=%d -oversized=%d -flooders=%d -attacker-nice=%d"+
		" -tokens=%t -token-flooders=%d -probers=%d -phantoms=%d -storm-tools=%d -heavy=%d -tls=%t -handshakers=%d` (load average %s before, %s after)\n\n",
		*flagDuration, *flagRate, *flagSessions, *flagUnread, *flagFlooders, *flagNice,
		*flagTokens, *flagForgers, *flagProbers, *flagPhantoms, *flagStorm, *flagHeavy, *flagTLS, *flagHandshakers, loadBefore, report.LoadAvg())
	fmt.Println("| Victim run | Calls | Failures | p50 | p99 |")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range []struct {
		name string
		run  victimRun
	}{{"unloaded", unloaded}, {"under attack", loaded}} {
		fmt.Printf("| %s | %d | %d | %s | %s |\n", r.name, len(r.run.Lat), r.run.Failures, ms(p(r.run, 50)), ms(p(r.run, 99)))
	}
	fmt.Println()
	fmt.Printf("Attacker: %d sessions opened, %d initialize refused with 429; %d answers of 12 MiB received, %d calls refused "+
		"by the result-byte budget, %d by the in-flight budgets, %d answered, %d other errors.\n\n",
		a.SessionsOK, a.Sessions429, a.Held, a.RefusedBytes, a.RefusedCalls, a.Calls, a.OtherErrors)
	if *flagHandshakers > 0 {
		fmt.Printf("Lists on a new connection each (-tls=%t): %d answered.\n\n", *flagTLS, a.Handshakes)
	}
	if *flagHeavy > 0 {
		fmt.Printf("Heavy lists: %d answered, %d refused with 429, %d ended by the gateway's closing the connection while the body was sent (first: %q).\n\n",
			a.HeavyOK, a.Heavy429, a.HeavyCut, a.HeavyCutErr)
	}
	if *flagTokens {
		fmt.Printf("Forged tokens: %d refused with 401 after a TokenReview, %d with 429 by the TokenReview limits. "+
			"Probers' lists: %d refused with 403, %d with 429 by the SubjectAccessReview limits (per request and per identity).\n\n",
			a.Forged401, a.Forged429, a.Probes403, a.Probes429)
	}
	if *flagStorm > 0 {
		fmt.Printf("Storm: the attacker's published tools changed %d times in %s under attack (its upstream changes its list every %s and announces each change), %d times while the victim ran alone.\n\n",
			changes[1], *flagDuration, fixture.MinListChangedEvery, changes[0])
		fmt.Printf("The storm's server after the attack: %s.\n\n", stormState())
	}
	fmt.Println("| Gateway's process under attack | Count | p99 | max |")
	fmt.Println("|---|--:|--:|--:|")
	for i, h := range runtimeHists {
		n, b := histDelta(hists[0][i], hists[1][i], 0.99, 1)
		fmt.Printf("| %s (bucket bounds) | %d | ≤ %.2f ms | ≤ %.2f ms |\n", h.what, n, b[0]*1e3, b[1]*1e3)
	}
	fmt.Println()
	fmt.Println("| Goal (docs/design.md, Budgets) | Measured | Met |")
	fmt.Println("|---|---|---|")
	ratio := float64(p(loaded, 99)) / float64(max(p(unloaded, 99), 1))
	fmt.Printf("| victim p99 under attack ≤ 2× unloaded | %.2f× | %s |\n", ratio, report.YesNo(ratio <= 2))
	fmt.Printf("| victim failures under attack = 0 | %d | %s |\n", loaded.Failures, report.YesNo(loaded.Failures == 0))
	fmt.Printf("| peak RSS of the gateway's process under the manager's %d MiB limit | %d MiB (heap objects %d MiB) | %s |\n",
		memoryLimit>>20, mem.rss>>20, mem.heap>>20, report.YesNo(mem.rss < memoryLimit))
	if a.FirstToolError != "" {
		fmt.Printf("\nFirst tool error the attacker got: %.300s\n", a.FirstToolError)
	}
	if loaded.FirstErr != "" {
		fmt.Printf("\nFirst victim failure under attack: %s\n", loaded.FirstErr)
	}
}

// runtimeHists are the Go runtime's histograms of the gateway's process
// that show how long its goroutines waited: to run once runnable, and for
// the garbage collector's stop-the-world pauses.
var runtimeHists = []struct{ name, what string }{
	{"/sched/latencies:seconds", "runnable goroutine waits to run"},
	{"/sched/pauses/total/gc:seconds", "GC stop-the-world pauses"},
}

func readHists() []metrics.Sample {
	s := make([]metrics.Sample, len(runtimeHists))
	for i, h := range runtimeHists {
		s[i].Name = h.name
	}
	metrics.Read(s)
	return s
}

// histDelta is what a histogram counted between two reads: how many, and
// the upper bounds of the buckets of the quantiles qs.
func histDelta(before, after metrics.Sample, qs ...float64) (uint64, []float64) {
	a, b := after.Value.Float64Histogram(), before.Value.Float64Histogram()
	counts := make([]uint64, len(a.Counts))
	var total uint64
	for i := range a.Counts {
		counts[i] = a.Counts[i] - b.Counts[i]
		total += counts[i]
	}
	bounds := make([]float64, len(qs))
	for k, q := range qs {
		var acc uint64
		for i, c := range counts {
			acc += c
			if acc > 0 && float64(acc) >= q*float64(total) {
				bounds[k] = a.Buckets[i+1]
				break
			}
		}
	}
	return total, bounds
}

// printControl prints the control run (-control), if there was one: the
// victim's p99 there against its p99 under attack tells what the gateway
// added to the attack's cost on this machine.
func printControl(unloaded, loaded victimRun, c *controlRun) {
	if c == nil {
		return
	}
	p99 := func(r victimRun) time.Duration { return report.Percentile(r.Lat, 99) }
	fmt.Printf("\nControl (-control): the victim's agent through the gateway, while %d of the attacker's agents call its hostile upstream "+
		"directly, without pause (%d answers of 12 MiB received, %d errors), and nothing reaches the gateway but the victim's calls:\n\n",
		c.agents, c.received, c.errors)
	fmt.Println("| Victim run | Calls | Failures | p50 | p99 | p99 against unloaded | p99 under attack against this run |")
	fmt.Println("|---|---|---|---|---|--:|--:|")
	fmt.Printf("| control | %d | %d | %.2f ms | %.2f ms | %.2f× | %.2f× |\n", len(c.victim.Lat), c.victim.Failures,
		float64(report.Percentile(c.victim.Lat, 50))/1e6, float64(p99(c.victim))/1e6,
		float64(p99(c.victim))/float64(max(p99(unloaded), 1)), float64(p99(loaded))/float64(max(p99(c.victim), 1)))
}

// stormState says what phase the storm's supervisor is in, with its
// generation, failed attempts and last error.
func stormState() string {
	if stormSupervisor == nil {
		return "not supervised"
	}
	sn := stormSupervisor.Snapshot()
	state := fmt.Sprintf("%s, connection generation %d, %d failed attempts", sn.Phase, sn.Generation, sn.FailedAttempts)
	if sn.LastError != nil {
		state += ", last error: " + sn.LastError.Error()
	}
	return state
}
