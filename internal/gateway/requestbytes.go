package gateway

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/mcpbridge/operator/internal/jsonspan"
)

// Request bytes. An agent's request is held in memory from the moment the
// gateway reads it until it is answered, and a message the fast path leaves
// to the SDK is decoded into Go values as well, which for a body of many
// small values costs tens of times its bytes: eight agents sending 4 MiB
// tools/list requests of small objects without pause held 952 MiB of heap,
// and another tenant's p99 went from 4 ms to 707 ms. So both count in the namespace's
// budget of bytes held (--gateway-max-result-bytes-per-namespace) until the
// request is answered: the body as it is read (its Content-Length at once,
// when it has one), and decodedBytesPerValue for each value of a message
// left to the SDK. Beyond the budget the request is answered 429 before
// more of it is read or decoded. See docs/design.md, "Budgets".

// decodedBytesPerValue is what a value of a message is taken to cost once
// the SDK has decoded it (a map entry, an interface, a slice element and
// what the decoder allocates on the way): the 4 MiB lists above held about
// 100 bytes of heap a value, counted with jsonspan.Values.
const decodedBytesPerValue = 128

// errRequestBytes ends the read of a body that would pass the budget.
var errRequestBytes = errors.New("the request would pass the namespace's budget of bytes held in memory")

// holdRequest takes what r's body will hold from the namespace's budget:
// all of it at once when its length is known; otherwise the body is
// wrapped so that it is taken as it is read. It answers 429 and
// returns false when the body's length alone would pass the budget. The
// caller closes the lease once r is answered.
func (v *view) holdRequest(w http.ResponseWriter, r *http.Request) (*lease, bool) {
	held := &lease{pool: &v.e.results}
	if r.ContentLength > 0 && !held.Take(r.ContentLength) {
		v.refuseRequestBytes(w)
		return nil, false
	}
	if r.ContentLength < 0 {
		r.Body = &heldBody{ReadCloser: r.Body, held: held}
	}
	return held, true
}

// holdDecoded takes what the SDK's decoding of body will hold, or answers
// 429 and returns false.
func (v *view) holdDecoded(w http.ResponseWriter, held *lease, body []byte) bool {
	if held.Take(decodedBytesPerValue * int64(jsonspan.Values(body))) {
		return true
	}
	v.refuseRequestBytes(w)
	return false
}

// refuseRequestBytes answers a request that would pass the namespace's
// budget of bytes held; its connection is read again after the pause.
func (v *view) refuseRequestBytes(w http.ResponseWriter) {
	v.refuse(limitResultBytes)
	w.Header().Set("Retry-After", "1")
	http.Error(w, fmt.Sprintf("the request was not served: the requests, arguments and results held in memory for namespace %s "+
		"would pass its budget of %s (%s); retry later", v.e.ns, formatBytes(v.e.results.max), FlagMaxResultBytesPerNamespace),
		http.StatusTooManyRequests)
}

// refuseUnread answers 429, before a byte of its body is read, a request
// whose body may be large while the namespace's large bodies are paced
// (pacing.go), and returns true.
func (v *view) refuseUnread(w http.ResponseWriter, r *http.Request) bool {
	wait := v.e.bodies.wait(r.ContentLength)
	if wait == 0 {
		return false
	}
	v.refuse(limitLargeBodies)
	w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
	http.Error(w, fmt.Sprintf("the request was not served: namespace %s was sent bodies over %s that were refused once read "+
		"(over its budget of %s, %s, or the gateway's body limit) or decoded by the SDK's path (a method other than tools/call); "+
		"such bodies are read at a second for each %s, and none for %s more, so this one was refused unread; retry later",
		v.e.ns, formatBytes(pacedBodyBytes), formatBytes(v.e.results.max), FlagMaxResultBytesPerNamespace,
		formatBytes(refusedBytesPerSecond), wait.Round(time.Millisecond)), http.StatusTooManyRequests)
	return true
}

// refuseDecoding answers 429 to a request whose body over pacedBodyBytes
// the SDK would decode while it decodes another of the namespace's.
func (v *view) refuseDecoding(w http.ResponseWriter) {
	v.refuse(limitLargeBodies)
	w.Header().Set("Retry-After", "1")
	http.Error(w, fmt.Sprintf("the request was not served: another body over %s sent to namespace %s is being decoded by the SDK's path "+
		"(a method other than tools/call), which decodes one at a time; retry later", formatBytes(pacedBodyBytes), v.e.ns),
		http.StatusTooManyRequests)
}

// heldBody is a request body of unknown length whose bytes are taken from
// held as they are read.
type heldBody struct {
	io.ReadCloser
	held *lease
}

func (b *heldBody) Read(p []byte) (int, error) {
	if !b.held.Take(int64(len(p))) {
		return 0, errRequestBytes
	}
	n, err := b.ReadCloser.Read(p)
	b.held.Return(int64(len(p) - n))
	return n, err
}
