package bridge

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

const eventually = 20 * time.Second

// stdioPolicy runs the fixture binary with args and short, test-sized delays.
func stdioPolicy(args ...string) *policy.Policy {
	return &policy.Policy{
		ServerName:        "fx",
		Transport:         v1alpha1.TransportStdio,
		Stdio:             &policy.Stdio{Command: fixtureBin, Args: args},
		ToolCallTimeout:   10 * time.Second,
		ConnectionTimeout: 10 * time.Second,
		Reconnect:         policy.Reconnect{Enabled: true, InitialDelay: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond, MaxAttempts: 5},
	}
}

// httpPolicy connects to url over Streamable HTTP, with a reconnect budget
// that outlasts the tests' 20 s bounds, so that a slow recovery is never
// mistaken for an exhausted budget.
func httpPolicy(url string) *policy.Policy {
	p := stdioPolicy()
	p.Transport, p.Stdio, p.HTTP = v1alpha1.TransportStreamableHTTP, nil, &policy.HTTP{URL: url}
	p.Reconnect.MaxAttempts = 200
	return p
}

// forEachTransport runs fn with a policy for the fixture over stdio and one
// for it over Streamable HTTP (stateful).
func forEachTransport(t *testing.T, fn func(t *testing.T, p *policy.Policy)) {
	up := httpServe(t, httpFixture(t, fixture.Options{}))
	for _, tc := range []struct {
		name string
		p    *policy.Policy
	}{{"stdio", stdioPolicy()}, {"streamable-http", httpPolicy(up.URL())}} {
		t.Run(tc.name, func(t *testing.T) { fn(t, tc.p) })
	}
}

// startSupervisor starts a supervisor and disposes it when the test ends.
func startSupervisor(t *testing.T, p *policy.Policy, mutate ...func(*Options)) (*Supervisor, *registry.Registry) {
	t.Helper()
	reg := registry.New()
	o := Options{Namespace: "ns", Name: "srv", Policy: p, Registry: reg, Log: testr.New(t),
		CloseBarrier: 3 * time.Second, Egress: loopbackEgress(t, "127.0.0.0/8", "::1/128")}
	for _, m := range mutate {
		m(&o)
	}
	s := New(o)
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		if err := s.Dispose(dctx); err != nil {
			t.Errorf("dispose: %v", err)
		}
		cancel()
	})
	return s, reg
}

// loopbackEgress allows the upstreams of tests, which listen on loopback,
// and fails the test instead of dialling anything that is not loopback:
// a broken egress policy never sends a packet off this machine.
func loopbackEgress(t *testing.T, allow ...string) *egress.Policy {
	t.Helper()
	cidrs, err := egress.ParseCIDRs(strings.Join(allow, ","))
	if err != nil {
		t.Fatal(err)
	}
	return egress.New(cidrs).WithDialHook(func(network, address string) error {
		if ap, err := netip.ParseAddrPort(address); err == nil && ap.Addr().Unmap().IsLoopback() {
			return nil
		}
		t.Errorf("the egress policy let %s %s through to the dialer", network, address)
		return errors.New("test: never dial a non-loopback address")
	})
}

// waitFor waits until the snapshot satisfies cond, and returns it.
func waitFor(t *testing.T, s *Supervisor, what string, cond func(Snapshot) bool) Snapshot {
	t.Helper()
	return waitForWithin(t, s, what, eventually, cond)
}

// waitForWithin is waitFor with its own bound, for the few tests that move
// many megabytes (slow under -race on a loaded machine).
func waitForWithin(t *testing.T, s *Supervisor, what string, within time.Duration, cond func(Snapshot) bool) Snapshot {
	t.Helper()
	var sn Snapshot
	NewWithT(t).Eventually(func() bool {
		sn = s.Snapshot()
		return cond(sn)
	}, within, 5*time.Millisecond).Should(BeTrue(), func() string {
		return fmt.Sprintf("waiting for %s; last snapshot: %+v", what, sn)
	})
	return sn
}

func isReady(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReady }

func toolNames(tools []registry.Tool) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.Name
	}
	return out
}

func eventsPath(t *testing.T) string { return filepath.Join(t.TempDir(), "events") }

// pidOf reads the fixture's pid tool result.
func pidOf(t *testing.T, res *mcp.CallToolResult) int {
	t.Helper()
	text := RenderText(res)
	pid, err := strconv.Atoi(strings.TrimSpace(text))
	if err != nil {
		if m, ok := res.StructuredContent.(map[string]any); ok {
			if f, ok := m["pid"].(float64); ok {
				return int(f)
			}
		}
		t.Fatalf("pid result %q: %v", text, err)
	}
	return pid
}

// hasTool: tools holds the tool the server listed as raw.
func hasTool(tools []registry.Tool, raw string) bool {
	return slices.ContainsFunc(tools, func(t registry.Tool) bool { return t.RawName == raw })
}

// waitEvents waits until the fixture's events file satisfies cond, and
// returns its events.
func waitEvents(t *testing.T, path, what string, cond func([]fixture.Event) bool) []fixture.Event {
	t.Helper()
	var evs []fixture.Event
	NewWithT(t).Eventually(func() (bool, error) {
		var err error
		evs, err = fixture.ReadEvents(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, StopTrying("read events").Wrap(err)
		}
		return cond(evs), nil
	}, eventually, 5*time.Millisecond).Should(BeTrue(), func() string {
		return fmt.Sprintf("waiting for %s; events: %+v", what, evs)
	})
	return evs
}

// waitEvent waits until an event of the fixture's events file matches, and
// returns the first that does.
func waitEvent(t *testing.T, path, what string, match func(fixture.Event) bool) fixture.Event {
	t.Helper()
	evs := waitEvents(t, path, what, func(evs []fixture.Event) bool { return slices.ContainsFunc(evs, match) })
	return evs[slices.IndexFunc(evs, match)]
}
