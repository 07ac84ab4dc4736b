package gateway

import (
	"bufio"
	"net"
	"net/http"
)

// answerWriter is the gateway's wrapper of a ResponseWriter: it notes when
// the answer starts, with its status (for the request's span) and by
// calling onAnswer once (a session budget's place goes back then). It
// keeps the writer's Flush (the SDK streams SSE), Hijack and Unwrap.
type answerWriter struct {
	http.ResponseWriter
	status   int
	onAnswer func()
	// refused: a budget refused the request with a JSON-RPC error, which
	// status does not show (pacing.go).
	refused bool
	// bodyRead is how many bytes of the request's body were read.
	bodyRead int64
}

func (w *answerWriter) start(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
	if w.onAnswer != nil {
		w.onAnswer()
	}
}

// finish starts the answer if the handler wrote nothing: net/http then
// sends 200 itself.
func (w *answerWriter) finish() { w.start(http.StatusOK) }

func (w *answerWriter) WriteHeader(code int) {
	w.start(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *answerWriter) Write(b []byte) (int, error) {
	w.start(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Flush sends the header too: the answer starts with 200 if not before.
func (w *answerWriter) Flush() {
	w.start(http.StatusOK)
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *answerWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
