// Command replicas measures what the replicas promise an agent (docs/design.md, "Replicas and
// ownership" and "Sessions on every replica": no failed call and no new
// session in a rolling replacement; a SIGKILL moves only the killed
// replica's servers) on this machine and prints a markdown table with the
// command that reproduces it:
// -replicas manager processes (default 3) share -servers McpServers
// (default 100: -local-stdio Local stdio servers, the rest Streamable HTTP)
// while agents of both protocol versions call every server's echo in turn
// without pause through a Service-like balancer; then (a) a rolling
// replacement (a new replica Ready, then SIGTERM to an old one, for each
// old one) and (b) SIGKILL of one replica.
//
//	go run ./hack/bench/replicas [-replicas=3] [-servers=100] [-local-stdio=10] [-agents=2]
//
// It prints, per phase and agent: failed calls, the longest time without a
// successful call, and the new sessions of the 2025-11-25 agents; per
// event: the servers that moved and the time until they were Ready on
// their new owner; and whether a server the killed replica did not own
// changed owner or connectionGeneration.
//
// Everything is a separate process on 127.0.0.1: envtest's etcd and
// kube-apiserver, the manager binary (go build ./cmd/manager) once per
// replica with --replica-name, its own ports and one shared
// --manager-namespace, and one fixture process serving the HTTP servers
// (the stdio servers are children of their owner). The Pod runtime needs a
// node, which this program has not: its stdio servers are Local
// (--local-stdio-namespaces=*), whose handoff is the same break before make.
// The balancer, as in test/manager's replica tests, sends each new TCP
// connection to a random replica whose /readyz passed at its last look
// (every 100 ms); kept-alive connections stay until their server closes
// them.
//
// It is a benchmark, not a test: it asserts nothing and exits 0 whether or
// not a goal is met (exit 1 only when it cannot measure at all).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mcpbridge/operator/hack/bench/internal/report"
	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/testenv"
)

const (
	fixturePkg = "github.com/mcpbridge/operator/test/fixture/cmd/mcp-fixture"
	managerPkg = "github.com/mcpbridge/operator/cmd/manager"
)

var (
	flagReplicas    = flag.Int("replicas", 3, "manager replicas before and after the rolling replacement")
	flagServers     = flag.Int("servers", 100, "McpServers")
	flagStdio       = flag.Int("local-stdio", 10, "of -servers, how many are Local stdio servers (the fixture as their owner's child); the rest are Streamable HTTP")
	flagAgents      = flag.Int("agents", 1, "agents per protocol version (2025-11-25 on one session each, 2026-07-28 sessionless)")
	flagLease       = flag.Duration("lease", 10*time.Second, "the replicas' --replica-lease-duration (the shipped default)")
	flagDrain       = flag.Duration("drain", 3*time.Second, "the replicas' --replica-drain-delay (the shipped default)")
	flagSteady      = flag.Duration("steady", 10*time.Second, "calls before the first event")
	flagBetween     = flag.Duration("between", 5*time.Second, "calls after each event's servers are Ready again, before the next")
	flagCallTimeout = flag.Duration("call-timeout", 60*time.Second, "an agent's deadline for one call")
	flagWaitMax     = flag.Duration("wait-max", 2*time.Minute, "give up waiting for servers to be Ready after an event after this long")
	flagManagerArgs = flag.String("manager-args", "", "extra manager flags, space-separated")
	flagManager     = flag.String("manager", "", "manager binary (default: go build "+managerPkg+" into a temp dir)")
	flagFixture     = flag.String("fixture", "", "fixture binary (default: go build "+fixturePkg+" into a temp dir)")
	flagKeep        = flag.Bool("keep", false, "keep the temp dir with the replicas' and the fixture's logs (its path is printed)")
)

type bench struct {
	dir                    string
	env                    *testenv.Env
	managerBin, fixtureBin string
	fixture                *proc.Process
	fixtureURL             string
	replicas               []*replica // every replica started, in order
	lb                     *balancer
	agents                 []*agent
	loadBefore             string
	events                 []event
	phases                 []string
	killed                 killResult
}

// event is one step of a phase: a replica joining, stopping or killed.
type event struct {
	phase, what string
	moved       int           // servers that changed owner
	exit        time.Duration // SIGTERM → the process exited
	ready       time.Duration // the event → the moved servers Ready on their new owner
	err         error
}

// killResult is what the SIGKILL did to the servers the killed replica did
// not own.
type killResult struct {
	victim        string
	others        int
	changedOwner  []string
	changedGen    []string
	movedReady    time.Duration
	movedReadyErr error
	// The moved servers by transport: a killed replica's stdio servers
	// start elsewhere only after the close barrier (its children may run
	// until then).
	httpReady, stdioReady kindReady
}

func main() {
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	b := &bench{}
	err := b.run(ctx)
	interrupted := ctx.Err() != nil
	// Signals stay caught until everything is stopped.
	if b.lb != nil {
		b.lb.close()
	}
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

func (b *bench) run(ctx context.Context) error {
	if *flagReplicas < 2 || *flagServers < 1 || *flagStdio < 0 || *flagStdio > *flagServers || *flagAgents < 1 {
		return errors.New("want -replicas ≥ 2, -servers ≥ 1, 0 ≤ -local-stdio ≤ -servers, -agents ≥ 1")
	}
	b.loadBefore = report.LoadAvg()
	if err := b.prepare(ctx); err != nil {
		return err
	}
	b.lb = newBalancer()
	for i := range *flagReplicas {
		r, err := b.startReplica(ctx, fmt.Sprintf("r%d", i+1), i+1)
		if err != nil {
			return err
		}
		b.lb.add(r)
	}
	fmt.Fprintf(os.Stderr, "%d replicas ready; creating %d McpServers ...\n", *flagReplicas, *flagServers)
	if err := b.createServers(ctx); err != nil {
		return err
	}
	if _, err := b.waitServers(ctx, time.Now(), allNames(), func(s serverState) bool { return s.ready }); err != nil {
		return fmt.Errorf("McpServers Ready: %w", err)
	}
	if err := b.startAgents(); err != nil {
		return err
	}
	defer b.stopAgents()
	b.setPhase("steady")
	fmt.Fprintf(os.Stderr, "all Ready; agents calling for %s ...\n", *flagSteady)
	if err := sleepCtx(ctx, *flagSteady); err != nil {
		return err
	}
	b.setPhase("rolling")
	if err := b.rolling(ctx); err != nil {
		return err
	}
	b.setPhase("sigkill")
	if err := b.sigkill(ctx); err != nil {
		return err
	}
	b.stopAgents()
	b.print()
	return nil
}

// prepare builds what is not given, starts the fixture and envtest.
func (b *bench) prepare(ctx context.Context) error {
	var err error
	if b.dir, err = os.MkdirTemp("", "bench-replicas-"); err != nil {
		return err
	}
	b.managerBin, b.fixtureBin = *flagManager, *flagFixture
	for _, x := range []struct {
		bin *string
		pkg string
	}{{&b.managerBin, managerPkg}, {&b.fixtureBin, fixturePkg}} {
		if *x.bin != "" {
			continue
		}
		*x.bin = filepath.Join(b.dir, filepath.Base(x.pkg))
		fmt.Fprintf(os.Stderr, "go build %s ...\n", x.pkg)
		if err := testenv.BuildContext(ctx, nil, *x.bin, x.pkg); err != nil {
			return err
		}
	}
	if err := b.startFixture(); err != nil {
		return fmt.Errorf("fixture: %w", err)
	}
	fmt.Fprintln(os.Stderr, "starting envtest (etcd + kube-apiserver) ...")
	if b.env, err = testenv.Start(); err != nil {
		return err
	}
	return b.createNamespaces(ctx)
}

func (b *bench) startAgents() error {
	for i := range *flagAgents {
		for _, p := range []string{"2025-11-25", "2026-07-28"} {
			// Offsets spread the agents over the servers.
			a := newAgent(fmt.Sprintf("%s #%d", p, i+1), p, len(b.agents)*(*flagServers)/(2**flagAgents))
			a.setPhase("steady")
			if err := a.start(b.lb); err != nil {
				return fmt.Errorf("agent %s: %w", a.name, err)
			}
			b.agents = append(b.agents, a)
		}
	}
	return nil
}

func (b *bench) stopAgents() {
	for _, a := range b.agents {
		if a.cancel != nil {
			select {
			case <-a.done:
			default:
				a.closeGap()
				a.stop()
			}
		}
	}
}

func (b *bench) setPhase(p string) {
	for _, a := range b.agents {
		a.setPhase(p)
	}
	b.phases = append(b.phases, p)
}

// live is the replicas not yet stopped, in start order.
func (b *bench) live() []*replica {
	var out []*replica
	for _, r := range b.replicas {
		select {
		case <-r.Done():
		default:
			out = append(out, r)
		}
	}
	return out
}

// rolling replaces every replica, one at a time, as a Deployment's rolling
// update with maxSurge 1 does: a new replica Ready, then SIGTERM to the
// oldest.
func (b *bench) rolling(ctx context.Context) error {
	olds := b.live()
	for i, old := range olds {
		name := fmt.Sprintf("r%d", len(olds)+i+1)
		fmt.Fprintf(os.Stderr, "rolling: %s joins ...\n", name)
		before, err := b.serverStates(ctx)
		if err != nil {
			return err
		}
		t0 := time.Now()
		r, err := b.startReplica(ctx, name, len(olds)+1)
		if err != nil {
			return err
		}
		b.lb.add(r)
		ev := event{phase: "rolling", what: fmt.Sprintf("%s joins (exec → every server Ready again)", name)}
		ev.ready, ev.err = b.waitServers(ctx, t0, allNames(), func(s serverState) bool { return s.ready })
		ev.moved = b.movedSince(ctx, before)
		b.events = append(b.events, ev)

		fmt.Fprintf(os.Stderr, "rolling: SIGTERM to %s ...\n", old.name)
		st, err := b.serverStates(ctx)
		if err != nil {
			return err
		}
		owned := ownedBy(st, old.name)
		ev = event{phase: "rolling", what: fmt.Sprintf("SIGTERM to %s (→ its servers Ready elsewhere)", old.name), moved: len(owned)}
		t1 := time.Now()
		exited := make(chan error, 1)
		go func() {
			err := old.Stop(40 * time.Second)
			ev.exit = time.Since(t1) // read only after the receive below
			exited <- err
		}()
		ready, werr := b.waitServers(ctx, t1, owned, func(s serverState) bool { return s.ready && s.replica != old.name })
		if err := <-exited; err != nil && werr == nil {
			werr = err
		}
		ev.ready, ev.err = ready, werr
		b.events = append(b.events, ev)
		if err := sleepCtx(ctx, *flagBetween); err != nil {
			return err
		}
	}
	return nil
}

// movedSince counts the servers whose owner is not what before said.
func (b *bench) movedSince(ctx context.Context, before map[string]serverState) int {
	now, err := b.serverStates(ctx)
	if err != nil {
		return -1
	}
	n := 0
	for name, s := range now {
		if before[name].replica != s.replica {
			n++
		}
	}
	return n
}

// sigkill kills the newest live replica and waits for its servers on the
// others, then checks that no other server moved or reconnected.
func (b *bench) sigkill(ctx context.Context) error {
	live := b.live()
	victim := live[len(live)-1]
	before, err := b.serverStates(ctx)
	if err != nil {
		return err
	}
	owned := ownedBy(before, victim.name)
	fmt.Fprintf(os.Stderr, "SIGKILL to %s (%d servers) ...\n", victim.name, len(owned))
	t0 := time.Now()
	victim.kill()
	for _, a := range b.agents {
		a.killed(t0, victim.gateway)
	}
	ready, at, werr := b.waitEach(ctx, t0, owned, func(s serverState) bool { return s.ready && s.replica != victim.name })
	b.events = append(b.events, event{phase: "sigkill", what: fmt.Sprintf("SIGKILL to %s (→ its servers Ready elsewhere)", victim.name),
		moved: len(owned), ready: ready, err: werr})
	if err := sleepCtx(ctx, *flagBetween); err != nil {
		return err
	}
	after, err := b.serverStates(ctx)
	if err != nil {
		return err
	}
	b.killed = killResult{victim: victim.name, movedReady: ready, movedReadyErr: werr}
	b.killed.httpReady, b.killed.stdioReady = latestByKind(at)
	for name, s := range before {
		if s.replica == victim.name {
			continue
		}
		b.killed.others++
		a := after[name]
		if a.replica != s.replica {
			b.killed.changedOwner = append(b.killed.changedOwner, name)
		}
		if a.generation != s.generation {
			b.killed.changedGen = append(b.killed.changedGen, name)
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
