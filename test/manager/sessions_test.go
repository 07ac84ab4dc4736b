package manager_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/test/fixture"
)

// TestASessionDeletedOnOneReplicaIsEndedOnEvery runs two managers, then a
// third: a 2025-11-25 session an agent deletes on one replica is answered
// 404 on the others, whether they had taken it up or not, and on a replica
// that starts after the DELETE, while a session nobody ended is still taken
// up there.
func TestASessionDeletedOnOneReplicaIsEndedOnEvery(t *testing.T) {
	g := NewWithT(t)
	leases, tenant := newNamespace(t, "ended-"), newNamespace(t, "tenant-")
	rs := startReplicas(t, leases, 2)
	createHTTPServer(t, tenant, "s0", serveFixture(t, fixture.Options{}))
	allReadyOn(t, tenant, []string{"s0"}, []string{"r1", "r2"})
	open := func() string {
		agent := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, nil)
		cs, err := agent.Connect(ctx(t), &mcp.StreamableClientTransport{Endpoint: "http://" + rs[0].gateway + "/namespaces/" + tenant + "/mcp",
			HTTPClient: &http.Client{}, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cs.ID()).NotTo(BeEmpty())
		t.Cleanup(func() { _ = cs.Close() })
		return cs.ID()
	}
	held, unseen, live := open(), open(), open()

	g.Expect(sessionRequest(t, http.MethodPost, rs[1], tenant, held)).To(Equal(http.StatusOK), "taken up on r2")
	for _, sid := range []string{held, unseen} {
		g.Expect(sessionRequest(t, http.MethodDelete, rs[0], tenant, sid)).To(Equal(http.StatusNoContent))
	}
	for name, sid := range map[string]string{"held": held, "unseen": unseen} {
		g.Eventually(func() int { return sessionRequest(t, http.MethodPost, rs[1], tenant, sid) },
			10*time.Second, 50*time.Millisecond).Should(Equal(http.StatusNotFound), "the %s session on r2", name)
	}

	r3 := startReplica(t, leases, "r3")
	g.Eventually(func() int { return sessionRequest(t, http.MethodPost, r3, tenant, live) },
		10*time.Second, 50*time.Millisecond).Should(Equal(http.StatusOK), "a session nobody ended, on r3")
	g.Eventually(func() int { return sessionRequest(t, http.MethodPost, r3, tenant, unseen) },
		10*time.Second, 50*time.Millisecond).Should(Equal(http.StatusNotFound), "a session deleted before r3 started")
	g.Consistently(func() int { return sessionRequest(t, http.MethodPost, r3, tenant, unseen) },
		2*time.Second, 100*time.Millisecond).Should(Equal(http.StatusNotFound))
}

// sessionRequest sends a 2025-11-25 tools/list (POST) or a DELETE with
// session id sid to a replica's gateway, and returns the status.
func sessionRequest(t *testing.T, method string, r *replica, ns, sid string) int {
	t.Helper()
	c, cancel := context.WithTimeout(ctx(t), 10*time.Second)
	defer cancel()
	body := ""
	if method == http.MethodPost {
		body = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	}
	req, err := http.NewRequestWithContext(c, method, "http://"+r.gateway+"/namespaces/"+ns+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
