package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// sessionlessList is a 2026-07-28 tools/list whose _meta carries pad.
func sessionlessList(pad string) (string, map[string]string) {
	body := `{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"` +
		sessionlessProto + `","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},` +
		`"pad":` + pad + `}}}`
	return body, map[string]string{"Mcp-Protocol-Version": sessionlessProto, "Mcp-Method": "tools/list"}
}

// postUnsized posts body without a Content-Length (chunked).
func (e *testEnv) postUnsized(body string, header map[string]string) (int, http.Header, []byte) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	resp, b, err := e.postFrom(ctx, io.MultiReader(strings.NewReader(body)), header)
	if err != nil {
		e.t.Fatalf("POST: %v", err)
	}
	return resp.StatusCode, resp.Header, b
}

// TestARequestOverTheBudgetIsRefusedBeforeItIsServed: a body that would
// pass the namespace's bytes held is answered 429 with Retry-After and the
// flag's name, whether its length is known (taken before it is read) or not
// (taken as it is read); it is counted, its bytes are given back, and a
// small request goes on.
func TestARequestOverTheBudgetIsRefusedBeforeItIsServed(t *testing.T) {
	for _, unsized := range []bool{false, true} {
		t.Run(map[bool]string{false: "with a length", true: "of unknown length"}[unsized], func(t *testing.T) {
			g := NewWithT(t)
			e := newTestEnv(t, envOptions{budgets: Budgets{ResultBytesPerNamespace: 64 << 10}})
			post := e.mustPost
			if unsized {
				post = e.postUnsized
			}
			before := refusalCount(t, testNS, limitResultBytes)
			code, h, body := post(sessionlessList(`"` + strings.Repeat("x", 128<<10) + `"`))
			g.Expect(code).To(Equal(http.StatusTooManyRequests), "%.300s", body)
			g.Expect(h.Get("Retry-After")).To(Equal("1"))
			g.Expect(string(body)).To(ContainSubstring("held in memory for namespace " + testNS))
			g.Expect(string(body)).To(ContainSubstring(FlagMaxResultBytesPerNamespace))
			g.Expect(refusalCount(t, testNS, limitResultBytes)).To(Equal(before + 1))
			g.Eventually(e.view().e.results.held.Load, waitLimit).Should(BeZero())

			code, _, body = post(sessionlessList(`"small"`))
			g.Expect(code).To(Equal(http.StatusOK), "%.300s", body)
			g.Eventually(e.view().e.results.held.Load, waitLimit).Should(BeZero(), "given back once the request is served")
		})
	}
}

// TestTheSDKsDecodingCountsAgainstTheNamespaceBytes: a message the fast
// path leaves to the SDK counts decodedBytesPerValue for each of its
// values, so that a small body of many values, which the SDK would decode
// into far more memory, is refused with the flag's name; the same values
// as a fast call's arguments, which stay bytes, are not.
func TestTheSDKsDecodingCountsAgainstTheNamespaceBytes(t *testing.T) {
	g := NewWithT(t)
	e := newTestEnv(t, envOptions{budgets: Budgets{ResultBytesPerNamespace: 1 << 20}})
	zeros := func(n int) string { return "[" + strings.Repeat("0,", n-1) + "0]" }
	// 32 KiB of 16,384 values: 2 MiB once decoded, by the estimate.
	code, h, body := e.mustPost(sessionlessList(zeros(16 << 10)))
	g.Expect(code).To(Equal(http.StatusTooManyRequests), "%.300s", body)
	g.Expect(h.Get("Retry-After")).To(Equal("1"))
	g.Expect(string(body)).To(ContainSubstring(FlagMaxResultBytesPerNamespace))
	g.Eventually(e.view().e.results.held.Load, waitLimit).Should(BeZero())

	code, _, body = e.mustPost(sessionlessList(zeros(1 << 10)))
	g.Expect(code).To(Equal(http.StatusOK), "%.300s", body)

	call, hdr := sessionlessCall(1, echoPublic, `{"values":`+zeros(16<<10)+`}`)
	code, _, body = e.mustPost(call, hdr)
	g.Expect(code).To(Equal(http.StatusOK))
	_, res := fastAnswer(t, http.Header{"Content-Type": {"application/json"}}, body)
	g.Expect(res.IsError).To(BeFalse(), "%.300s", body)
	g.Eventually(e.view().e.results.held.Load, waitLimit).Should(BeZero(), "given back once the call is answered")
}
