package main

// The tables the bench prints.

import (
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/mcpbridge/operator/hack/bench/internal/report"
	"github.com/mcpbridge/operator/internal/bridge"
)

var phaseNames = map[string]string{
	"steady":  "steady (before any event)",
	"rolling": "(a) rolling replacement",
	"sigkill": "(b) SIGKILL of one replica",
}

func (b *bench) print() {
	cmd := "go run ./hack/bench/replicas"
	flag.Visit(func(f *flag.Flag) { cmd += " -" + f.Name + "=" + f.Value.String() })
	fmt.Printf("Command: `%s`  \n", cmd)
	fmt.Printf("Date: %s. Machine: %d cores (`runtime.NumCPU`), %s %s/%s, 1-minute load average %s before and %s after the run.  \n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH,
		b.loadBefore, report.LoadAvg())
	fmt.Printf("Setup: envtest etcd + kube-apiserver; %d manager replicas (`--gateway-auth=none --gateway-tls=false "+
		"--local-stdio-namespaces=* --replica-lease-duration=%s --replica-drain-delay=%s --manager-namespace=%s`, own loopback ports each); "+
		"%d McpServers: %d Local stdio (the fixture as a child of its owner; the Pod runtime needs a node) and %d Streamable HTTP "+
		"on one fixture process; %d agent(s) per protocol version (2025-11-25 on one go-sdk session, 2026-07-28 sessionless), "+
		"each calling every server's `echo` in turn without pause through a Service-like balancer (a new connection to a random "+
		"replica whose /readyz passed at its last look, every 100 ms). (a) for each of the %d replicas: a new replica Ready, "+
		"then SIGTERM to the oldest; (b) SIGKILL to the newest. Server states polled every %s.\n\n",
		*flagReplicas, *flagLease, *flagDrain, managerNamespace, *flagServers, *flagStdio, *flagServers-*flagStdio,
		*flagAgents, *flagReplicas, pollEvery)
	b.printAgents()
	b.printEvents()
	b.printGoals()
}

func (b *bench) printAgents() {
	fmt.Println("| Phase | Agent | Calls answered | Failed calls | Longest gap without a successful call | New sessions |")
	fmt.Println("|---|---|--:|--:|--:|--:|")
	for _, p := range b.phases {
		for _, a := range b.agents {
			st := a.stats[p]
			if st == nil {
				continue
			}
			sessions := "—"
			if a.protocol == "2025-11-25" {
				sessions = fmt.Sprint(st.newSessions)
			}
			fmt.Printf("| %s | %s | %d | %d | %s | %s |\n", phaseNames[p], a.name, st.ok, st.failed, dur(st.gap), sessions)
		}
	}
	fmt.Println()
}

func (b *bench) printEvents() {
	fmt.Println("| Event | Servers moved | SIGTERM → exit | Event → the moved servers Ready |")
	fmt.Println("|---|--:|--:|--:|")
	for _, e := range b.events {
		exit := ""
		if e.exit > 0 {
			exit = dur(e.exit)
		}
		ready := dur(e.ready)
		if e.err != nil {
			ready = "**" + e.err.Error() + "**"
		}
		fmt.Printf("| %s | %d | %s | %s |\n", e.what, e.moved, exit, ready)
	}
	fmt.Println()
}

// printGoals compares with the replicas' goals (docs/design.md, "Replicas
// and ownership", "Shutdown").
func (b *bench) printGoals() {
	sum := func(phase string, f func(*phaseStats) int) (n int) {
		for _, a := range b.agents {
			if st := a.stats[phase]; st != nil {
				n += f(st)
			}
		}
		return n
	}
	failed := func(s *phaseStats) int { return s.failed }
	sessions := func(s *phaseStats) int { return s.newSessions }
	rolling, rollingSessions := sum("rolling", failed), sum("rolling", sessions)
	killed := sum("sigkill", failed)
	k := b.killed
	fmt.Println("| Goal | Measured | Met |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| rolling replacement: 0 failed calls | %d | %s |\n", rolling, report.YesNo(rolling == 0))
	fmt.Printf("| rolling replacement: 0 new sessions | %d | %s |\n", rollingSessions, report.YesNo(rollingSessions == 0))
	after := sum("sigkill", func(s *phaseStats) int { return s.failedAfterKill })
	onItsConn := sum("sigkill", func(s *phaseStats) int { return s.failedAfterKillOnItsConn })
	fmt.Printf("| SIGKILL: at most the calls in flight on it fail: failed calls started before the kill (≤ 1 per agent, %d agents) | %d | %s |\n",
		len(b.agents), killed-after, report.YesNo(killed-after <= len(b.agents)))
	fmt.Printf("| SIGKILL: failed calls started after the kill, sent over a connection the agent's HTTP client had kept to the killed replica (Go's client keeps up to 2 idle connections a host and does not resend a POST) | %d | |\n", onItsConn)
	fmt.Printf("| SIGKILL: failed calls started after the kill, any other | %d | %s |\n", after-onItsConn, report.YesNo(after-onItsConn == 0))
	moved := dur(k.movedReady)
	if k.movedReadyErr != nil {
		moved = k.movedReadyErr.Error()
	}
	fmt.Printf("| SIGKILL: its servers Ready on their new owners (all of them) | %s | |\n", moved)
	fmt.Printf("| SIGKILL: its Streamable HTTP servers Ready on their new owners within the Lease duration (%s) + their reconnect (compared here with the Lease duration alone) | %s | %s |\n",
		*flagLease, kindMoved(k.httpReady, k.movedReadyErr), kindMet(k.httpReady, k.movedReadyErr, *flagLease))
	fmt.Printf("| SIGKILL: its stdio servers Ready on their new owners within the Lease duration + the close barrier (%s: the killed replica's children may run until then, so no second child starts before) + their reconnect (compared here with the two alone) | %s | %s |\n",
		bridge.DefaultCloseBarrier, kindMoved(k.stdioReady, k.movedReadyErr), kindMet(k.stdioReady, k.movedReadyErr, *flagLease+bridge.DefaultCloseBarrier))
	changed := slices.Concat(k.changedOwner, k.changedGen)
	slices.Sort(changed)
	changed = slices.Compact(changed)
	fmt.Printf("| SIGKILL: no server %s did not own changes owner or connectionGeneration (of %d) | %s | %s |\n",
		k.victim, k.others, changedNote(k), report.YesNo(len(changed) == 0))
	fmt.Println()
	var errs []string
	for _, p := range b.phases {
		for _, a := range b.agents {
			if st := a.stats[p]; st != nil && len(st.firstErrors) > 0 {
				errs = append(errs, fmt.Sprintf("%s, %s: %s", phaseNames[p], a.name, strings.Join(st.firstErrors, " | ")))
			}
		}
	}
	if len(errs) > 0 {
		fmt.Println("First failures (up to 3 per agent and phase):")
		fmt.Println()
		for _, e := range errs {
			fmt.Println("- " + e)
		}
		fmt.Println()
	}
}

func changedNote(k killResult) string {
	if len(k.changedOwner)+len(k.changedGen) == 0 {
		return "none"
	}
	return fmt.Sprintf("owner changed: %d %v; generation changed: %d %v", len(k.changedOwner), head(k.changedOwner), len(k.changedGen), head(k.changedGen))
}

func head(xs []string) []string {
	slices.Sort(xs)
	return xs[:min(len(xs), 5)]
}

func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + dur(-d)
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	default:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	}
}

// kindMoved is when the last moved server of one transport was Ready.
func kindMoved(k kindReady, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case k.servers == 0:
		return "none moved"
	}
	return fmt.Sprintf("%s (the last of %d)", dur(k.latest), k.servers)
}

func kindMet(k kindReady, err error, within time.Duration) string {
	if err == nil && k.servers == 0 {
		return "—"
	}
	return report.YesNo(err == nil && k.latest <= within)
}
