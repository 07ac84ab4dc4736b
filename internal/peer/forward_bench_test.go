package peer_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/internal/peer"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/testenv"
)

// What forwarding a call to the owning replica adds to it: two replicas in
// one process on loopback, over mutual TLS and one HTTP/2 connection,
// with a trivial local caller on the owner (docs/design.md, "Forwarding
// between replicas"):
//
//	go test ./internal/peer -run XXX -bench Forward -benchtime 2s
//
// Benchmarks, not tests: a missed target is logged, never a failure. The
// CA Secret lives on a real control plane, started for the benchmark and
// used before the timed calls only.

// forwardTarget is what a forward may add to a call at p50 (docs/design.md,
// "How it is tested").
const forwardTarget = 200 * time.Microsecond

const forwardWarmup = 500

// A small call and result, as a typical tool's.
var (
	benchArgs   = json.RawMessage(`{"query":"replicas","limit":10}`)
	benchResult = json.RawMessage(`{"content":[{"type":"text","text":"three replicas, one owner per server, calls forwarded to it"}],"structuredContent":{"count":3}}`)
)

// BenchmarkForward: each iteration makes one call the owner's way (the
// local caller, directly) and one forwarded from another replica, so that
// a change of load hits both alike; added-p50-us is the difference of
// their medians, cpu-ns/op the process's CPU for both (client and endpoint
// sides included).
func BenchmarkForward(b *testing.B) {
	ctx := ctrl.LoggerInto(context.Background(), logr.Discard())
	owner := trivialCaller{result: benchResult}
	local := func(ns, o string) (registry.Caller, bool) { return owner, ns == "team" && o == "team/search" }
	env, err := testenv.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops"}}); err != nil {
		b.Fatal(err)
	}
	a := benchReplica(b, ctx, c, "replica-a", func(string, string) (registry.Caller, bool) { return nil, false })
	bRep := benchReplica(b, ctx, c, "replica-b", local)
	to := peer.Target{Name: "replica-b", Address: bRep.Endpoint().Addr().String()}
	call := peer.Call{Namespace: "team", Owner: "team/search", Tool: "search", Arguments: benchArgs}
	direct := func() time.Duration {
		start := time.Now()
		if _, _, err := owner.CallToolJSON(ctx, call.Tool, call.Arguments); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	forwarded := func() time.Duration {
		start := time.Now()
		if _, _, err := a.Client().Call(ctx, to, call); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for range forwardWarmup {
		direct()
		forwarded()
	}
	var d, f testenv.Latencies
	cpu0 := testenv.CPUTime()
	for b.Loop() {
		d = append(d, direct())
		f = append(f, forwarded())
	}
	b.ReportMetric(float64(testenv.CPUTime()-cpu0)/float64(len(f)), "cpu-ns/op")
	d.Report(b, "direct", "us")
	f.Report(b, "forwarded", "us")
	added := f.Percentile(50) - d.Percentile(50)
	b.ReportMetric(float64(added)/float64(time.Microsecond), "added-p50-us")
	b.ReportMetric(float64(f.Percentile(99)-d.Percentile(99))/float64(time.Microsecond), "added-p99-us")
	testenv.Target(b, "added by forwarding at p50", added, "≤ "+forwardTarget.String(), added <= forwardTarget)
	b.Logf("load average %s", testenv.LoadAvg())
}

// benchReplica runs a replica until the benchmark ends.
func benchReplica(b *testing.B, ctx context.Context, c client.Client, name string, local peer.LocalFunc) *peer.Replica {
	b.Helper()
	r, err := peer.New(peer.Config{Name: name, Namespace: "ops", BindAddress: "127.0.0.1:0", Client: c, Local: local, Log: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	for _, run := range r.Runnables() {
		go func() {
			if err := run.Start(ctx); err != nil {
				b.Error(err)
			}
			done <- struct{}{}
		}()
	}
	b.Cleanup(func() { cancel(); <-done; <-done })
	select {
	case <-r.Issued():
	case <-time.After(10 * time.Second):
		b.Fatal("no certificate within 10s")
	}
	<-r.Endpoint().Bound()
	return r
}

// trivialCaller answers every call with its result at once.
type trivialCaller struct{ result json.RawMessage }

func (c trivialCaller) CallToolJSON(context.Context, string, json.RawMessage) (json.RawMessage, bool, error) {
	return c.result, false, nil
}

func (c trivialCaller) CallTool(context.Context, string, any) (*mcp.CallToolResult, error) {
	return nil, errors.New("the benchmark calls the JSON path")
}
