package bridge

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"

	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

// BenchmarkResyncOfALargeList: one re-sync of a server listing 1,000 tools
// with 256-byte schemas over Streamable HTTP (the fetch, its checks and
// the registry's swap), the list unchanged, as in most of what a storm of
// list_changed makes the supervisor fetch once a second:
//
//	go test -run '^$' -bench ResyncOfALargeList ./internal/bridge/
//
// docs/benchmarks.md, "Isolation", has what it costs under an attack.
func BenchmarkResyncOfALargeList(b *testing.B) {
	h, err := fixture.NewHTTPHandler(fixture.Options{Tools: 1000, SchemaBytes: 256})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	b.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = h.Close()
	})
	cidrs, err := egress.ParseCIDRs("127.0.0.0/8")
	if err != nil {
		b.Fatal(err)
	}
	s := New(Options{Namespace: "bench", Name: "storm", Policy: httpPolicy(srv.URL), Registry: registry.New(),
		Log: logr.Discard(), Egress: egress.New(cidrs)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Start(ctx)
	b.Cleanup(func() { _ = s.Dispose(context.Background()) })
	benchWait(b, s, "Ready", isReady)
	s.mu.Lock()
	g := s.live
	s.mu.Unlock()
	b.ReportAllocs()
	for b.Loop() {
		if stage, err := s.syncTools(ctx, g); err != nil {
			b.Fatalf("%s: %v", stage, err)
		}
	}
}
