package bridge

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/test/fixture"
)

// A Streamable HTTP server over TLS that offers HTTP/2 gets one connection
// for its GET stream and its POSTs, where HTTP/1.1 needs two
// (docs/design.md, "Replicas and ownership": memory).
func TestAServerOverHTTP2KeepsOneConnection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		http2 bool
	}{{"http1.1", false}, {"http2-over-tls", true}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var open, accepted atomic.Int64
			count := func(srv *httptest.Server) {
				srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
					switch st {
					case http.StateNew:
						open.Add(1)
						accepted.Add(1)
					case http.StateClosed, http.StateHijacked:
						open.Add(-1)
					}
				}
			}
			h := httpFixture(t, fixture.Options{}) // stateful: the client opens a GET stream
			var up *httpUpstream
			var opts []func(*Options)
			if tc.http2 {
				var trust func(*Options)
				up, trust = httpServeHTTP2(t, h, count)
				opts = append(opts, trust)
				var given Options
				trust(&given)
				defer func() {
					// Each generation's transport dials with a copy: net/http
					// writes h2 into the one it holds, and two generations
					// sharing one raced (a reconnect dialling while the old
					// transport still did).
					g.Expect(given.tls.NextProtos).To(BeEmpty(), "the configuration the supervisor was given is never written")
				}()
			} else {
				up = httpServeWith(t, h, func(srv *httptest.Server) { count(srv); srv.Start() })
			}
			s, _ := startSupervisor(t, httpPolicy(up.URL()), opts...)
			waitFor(t, s, "Ready", isReady)
			httpEcho(t, s, "first")
			httpEcho(t, s, "second")
			// The SDK opens the GET stream on its own after the handshake.
			g.Eventually(up.requests, eventually).Should(ContainElement(HaveField("Method", http.MethodGet)), "a GET stream")
			if !tc.http2 {
				// The POSTs can't share the stream's connection.
				g.Eventually(open.Load, eventually).Should(BeNumerically(">=", 2), "open connections")
				return
			}
			g.Expect(accepted.Load()).To(Equal(int64(1)), "connections accepted")
			g.Expect(open.Load()).To(Equal(int64(1)), "open connections")
			for _, r := range up.requests() {
				g.Expect(r.Proto).To(Equal(2), "%s %s over HTTP/2", r.Method, r.RPCMethod)
			}
		})
	}
}
