package bridge

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/jsonspan"
	"github.com/mcpbridge/operator/internal/registry"
)

// Reading the answer to a request the supervisor posted itself (rawcall.go):
// a JSON body or an SSE stream, bounded like the SDK's reader.

// maxMessageBytes bounds one JSON body or one SSE event, as the SDK's
// DefaultMaxEventSize does: an upstream must not grow the manager's memory
// without limit.
const maxMessageBytes = 16 << 20

var (
	// errStreamEnded: the server ended the stream before answering. Like
	// the SDK, that fails the call, not the connection.
	errStreamEnded = errors.New("the event stream ended before the answer")
	errNotOurs     = errors.New("a message for another request")
	errTooLarge    = fmt.Errorf("a message from the server exceeds %d MiB", maxMessageBytes>>20)
)

// checkCallResponse turns an HTTP failure into an error the supervisor
// classifies like the SDK's: a 404 on a session is a lost session, and a
// JSON-RPC error in the body (from 2026-07-28 servers answer invalid params
// with 400) is the server's answer, not a transport failure.
func checkCallResponse(resp *http.Response) error {
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyLimit))
	if resp.StatusCode == http.StatusNotFound && resp.Request.Header.Get("Mcp-Session-Id") != "" {
		return fmt.Errorf("%w: the server answered HTTP 404", mcp.ErrSessionMissing)
	}
	var a answer
	if json.Unmarshal(body, &a) == nil && a.Error != nil {
		return a.Error
	}
	return fmt.Errorf("the server answered HTTP %d: %s", resp.StatusCode, Truncate(string(bytes.TrimSpace(body)), 256))
}

// errorBodyLimit bounds what is read of a failed response.
const errorBodyLimit = 64 << 10

// answer is the part of a JSON-RPC message the call reads when the
// message is not the plain answer resultFor reads in place. It is decoded
// with encoding/json, not jsonrpc.DecodeMessage, whose reader allocates a
// 32 KiB buffer per message: over 20x the time of matchAnswer for a small
// result (BenchmarkFramingMatchAnswer*, docs/benchmarks.md). The result is
// not decoded: json.RawMessage would copy it, and a result may be 16 MiB;
// memberValue finds it in the message instead.
type answer struct {
	ID    json.RawMessage `json:"id"`
	Error *jsonrpc.Error  `json:"error"`
}

// readAnswer returns the result of the response to id.
func readAnswer(resp *http.Response, id string) (json.RawMessage, error) {
	res, _, err := readAnswerFrom(context.Background(), resp, id, nil, otherEvents{})
	return res, err
}

// readAnswerFrom is readAnswer that also returns the id of the last SSE
// event seen, from which an ended stream can be resumed. What it holds of
// the answer is counted into rb (nil: uncounted); the result it returns
// shares the memory of what was read, so that it is held once. Every other
// message of an SSE stream goes to others. An SSE stream is read at its
// pace (readEvents) until ctx ends.
func readAnswerFrom(ctx context.Context, resp *http.Response, id string, rb registry.ResultBytes, others otherEvents) (json.RawMessage, string, error) {
	media := mediaType(resp.Header.Get("Content-Type"))
	switch media {
	case "application/json":
		body, err := readBody(resp.Body, resp.ContentLength, rb)
		switch {
		case errors.Is(err, errTooLarge): // past maxMessageBytes (readBody), or the transport's cappedBody
			return nil, "", errTooLarge
		case errors.Is(err, registry.ErrResultBudget):
			return nil, "", registry.ErrResultBudget
		case err != nil:
			return nil, "", fmt.Errorf("reading the answer: %v", err) // not EOF: a call failure, not a lost session
		}
		res, err := matchAnswer(body, id)
		if errors.Is(err, errNotOurs) {
			return nil, "", errors.New("the server answered with the id of another request")
		}
		return res, "", err
	case "text/event-stream":
		return readEvents(ctx, resp.Body, id, rb, others)
	default:
		return nil, "", fmt.Errorf("the server answered with content type %q", media)
	}
}

// mediaType is the media type of a Content-Type value as
// mime.ParseMediaType gives it; the two an MCP server answers with, written
// plainly, are taken as they are, since ParseMediaType allocates a map of
// parameters for every response.
func mediaType(contentType string) string {
	switch contentType {
	case "application/json", "text/event-stream":
		return contentType
	}
	media, _, _ := mime.ParseMediaType(contentType)
	return media
}

// matchAnswer decodes one message: the answer to id, or errNotOurs.
func matchAnswer(data []byte, id string) (json.RawMessage, error) {
	if res := resultFor(data, id); res != nil {
		return res, nil
	}
	var a answer
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("invalid JSON-RPC message from the server: %w", err)
	}
	if string(a.ID) != strconv.Quote(id) {
		if a.Error != nil && (len(a.ID) == 0 || string(a.ID) == "null") {
			return nil, a.Error // an error the server could not tie to a request (a parse error)
		}
		return nil, errNotOurs
	}
	if a.Error != nil {
		return nil, a.Error
	}
	res := memberValue(data, "result")
	if len(res) == 0 {
		return nil, errors.New("the server answered without a result")
	}
	return res, nil
}

// resultFor is the common case of matchAnswer read in place, in one pass
// after a validity check: a JSON object whose id is id, without an error,
// with a result, which it returns. Members are matched as decoding into
// answer and memberValue match them. Anything else is nil, for the full
// decode to answer as it did.
//
// The check is jsonspan.Valid, segmentio's validator, which accepts what
// encoding/json's does (FuzzMatchAnswerAgreesWithEncodingJSON) many times
// faster: with encoding/json's, reading an answer of 12 MiB held a core for
// about 35 ms, long enough to delay other tenants' calls on the same
// replica (docs/design.md, "Budgets"). Data nested deeper than the SDK
// decodes takes the full decode, which refuses it.
func resultFor(data []byte, id string) json.RawMessage {
	if !jsonspan.Valid(data) {
		return nil
	}
	var gotID, res []byte
	for key, value := range members(data) {
		switch {
		case fieldIs(key, "id"):
			gotID = value
		case fieldIs(key, "error"):
			if string(value) != "null" {
				return nil
			}
		}
		if jsonspan.StringIs(key, "result") {
			res = value
		}
	}
	if len(res) == 0 || len(gotID) != len(id)+2 || string(gotID) != strconv.Quote(id) {
		return nil
	}
	return res
}

// otherEvents is what readEvents does with the events of a stream that do
// not answer its request.
type otherEvents struct {
	// pace, the namespace's (Shares; nil: none), is what every such
	// event, its lines and bytes, waits for before it is handed on and
	// what it holds is given back: each stream's own pace lets a message
	// of the largest size pass at once, which many calls in flight, and
	// many servers, would multiply (docs/design.md, "Budgets").
	pace *pace
	// handle gets each such message (nil: dropped).
	handle func(data []byte)
}

// readEvents reads an SSE stream up to the "message" event that answers id;
// the messages before it (progress and log notifications, a list_changed)
// go to others and are not forwarded. It returns the id of the last event
// seen, for a resumption. The lines of the event being read are counted
// into rb (nil: uncounted) and given back when the event is not the
// answer. The stream is read at a pace of its own (paced) until ctx ends.
func readEvents(ctx context.Context, body io.Reader, id string, rb registry.ResultBytes, others otherEvents) (json.RawMessage, string, error) {
	pr := paced(ctx, body)
	held := &heldBytes{rb: rb}
	r := newEventStream(&pr, held)
	defer r.release()
	var ev sseEvent
	lastID := ""
	var all, junk lineCount // of the event being read; junk: not its data
	for {
		line, err := readEventLine(&r)
		eof := errors.Is(err, io.EOF)
		if err != nil && !eof {
			return nil, lastID, others.failed(ctx, junk, err)
		}
		all.add(line)
		data := false
		if len(line) > 0 {
			if data, err = ev.add(line, held); err != nil {
				return nil, lastID, others.failed(ctx, junk, err)
			}
		}
		if !data {
			junk.add(line)
		}
		if len(line) == 0 || eof { // an event ends with a blank line or with the stream
			if ev.id != "" {
				lastID = ev.id
			}
			if res, merr := ev.match(id); !errors.Is(merr, errNotOurs) {
				return res, lastID, merr
			}
			if err := others.wait(ctx, all); err != nil {
				return nil, lastID, err
			}
			if others.handle != nil && ev.hasData {
				others.handle(ev.data)
			}
			ev, all, junk = sseEvent{}, lineCount{}, lineCount{}
			held.giveBackBut(r.counted())
		}
		if eof {
			return nil, lastID, errStreamEnded
		}
	}
}

// lineCount is what lines of a stream came to.
type lineCount struct{ lines, bytes int }

func (c *lineCount) add(line []byte) { c.lines, c.bytes = c.lines+1, c.bytes+len(line)+1 }

// wait waits for the pace, if any, to allow what an event that was not
// the answer came to, or for ctx to end.
func (o otherEvents) wait(ctx context.Context, c lineCount) error {
	if o.pace == nil {
		return nil
	}
	return o.pace.wait(ctx, c.lines, c.bytes)
}

// failed is err, returned once the pace has allowed the lines read of the
// event that failed other than its data: a stream that never ends an
// event (comment lines without end, until what it holds passes the
// budget) takes from the pace as one that does, while an answer that
// failed does not wait. Its data, at most a message of the largest size,
// is read at the stream's own pace, as an answer's is.
func (o otherEvents) failed(ctx context.Context, junk lineCount, err error) error {
	_ = o.wait(ctx, junk)
	return err
}

// eventReaders are the buffers readEvents reads a stream through, one per
// stream being read: every line is copied out of it (readEventLine), so a
// buffer is free once its stream's answer is found, and a call need not
// allocate 4 KiB for it.
var eventReaders = sync.Pool{New: func() any { return bufio.NewReader(nil) }}

// longLineReaders are the buffers of the streams whose lines outgrew an
// eventReader's. A buffer is also what one read asks the connection for:
// read 4 KiB at a time, a 12 MiB answer took 3,072 system calls, and a
// tenant whose upstream sent such answers held the gateway's cores in
// them (docs/design.md, "Budgets"). What a long buffer reads counts
// against the stream's budget as it is read, not once ReadSlice hands it
// on: it may hold 64 KiB of a line that does not end.
var longLineReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, longLineBuffer) }}

// longLineBuffer is the size of a longLineReader.
const longLineBuffer = 64 << 10

// eventStream is the buffer a stream is read through: an eventReader until
// a line does not fit in it, a longLineReader from then on. held is what
// the stream's event holds of its budget.
type eventStream struct {
	*bufio.Reader
	src  io.Reader
	held *heldBytes
	long bool
}

func newEventStream(src io.Reader, held *heldBytes) eventStream {
	r := eventReaders.Get().(*bufio.Reader)
	r.Reset(src)
	return eventStream{Reader: r, src: src, held: held}
}

// grow swaps the buffer for a long one, once it holds nothing: when
// ReadSlice has handed on all of it. The long one counts what it reads
// into held as it reads it.
func (s *eventStream) grow() {
	if s.long || s.Buffered() > 0 {
		return
	}
	s.release()
	s.Reader, s.long = longLineReaders.Get().(*bufio.Reader), true
	s.Reset(&countingReader{r: s.src, rb: s.held})
}

// counted is what the buffer holds that is already counted: what a long
// buffer read ahead.
func (s *eventStream) counted() int {
	if !s.long {
		return 0
	}
	return s.Buffered()
}

// release gives the buffer back to its pool.
func (s *eventStream) release() {
	s.Reset(nil)
	if s.long {
		longLineReaders.Put(s.Reader)
	} else {
		eventReaders.Put(s.Reader)
	}
}

// readEventLine reads one line without its line ending, at most
// maxMessageBytes, into memory of its own, counted into the stream's
// budget: what the first buffer hands on as it is handed on, what a long
// one reads as it reads it (grow).
func readEventLine(r *eventStream) ([]byte, error) {
	var line blockBuffer
	for {
		frag, err := r.ReadSlice('\n')
		if readOn(err) && !r.long {
			err = cmp.Or(r.held.take(len(frag)), err)
		}
		if !readOn(err) {
			// Refused (by the budget, here or in a long buffer's reads), or
			// the stream broke: the line is of no use, and its blocks go back.
			line.discard()
			return nil, err
		}
		line.write(frag)
		if line.n > maxMessageBytes {
			line.discard()
			return nil, errTooLarge
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return bytes.TrimRight(line.bytes(), "\r\n"), err
		}
		r.grow()
	}
}

// readOn reports whether ReadSlice's err leaves what it returned a part of
// a line: the whole of it, a part that filled the buffer, or the last one.
func readOn(err error) bool {
	return err == nil || errors.Is(err, bufio.ErrBufferFull) || errors.Is(err, io.EOF)
}

// sseEvent is one event being read.
type sseEvent struct {
	name, id string
	data     []byte
	hasData  bool // a data field was seen, even an empty one
}

// add adds one line to the event and reports whether it was a data field:
// the lines an answer is made of (an event's other lines, comments and
// other fields, are few and short in any stream that answers). The first
// data line is kept as it is (the line is the event's own memory, already
// counted), so that a result in one data line, the common case, is held
// once.
func (e *sseEvent) add(line []byte, held *heldBytes) (data bool, err error) {
	field, value, _ := bytes.Cut(line, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(field) {
	case "event":
		e.name = string(value)
	case "id":
		e.id = string(value)
	case "data":
		if !e.hasData {
			e.data, e.hasData = value, true
			return true, nil
		}
		if err := held.take(len(value) + 1); err != nil {
			return true, err
		}
		e.data = append(append(e.data, '\n'), value...)
		if len(e.data) > maxMessageBytes {
			return true, errTooLarge
		}
		return true, nil
	}
	return false, nil // comments (":…") and other fields are ignored
}

// heldBytes is what one stream's event being read holds of a registry.ResultBytes
// budget.
type heldBytes struct {
	rb registry.ResultBytes
	n  int64
}

func (h *heldBytes) take(n int) error {
	if h.rb == nil {
		return nil
	}
	if !h.rb.Take(int64(n)) {
		return registry.ErrResultBudget
	}
	h.n += int64(n)
	return nil
}

// Take is take for a countingReader.
func (h *heldBytes) Take(n int64) bool { return h.take(int(n)) == nil }

// giveBackBut returns what the event held, it was not the answer, but for
// keep bytes that were read ahead of it and still count.
func (h *heldBytes) giveBackBut(keep int) {
	if back := h.n - int64(keep); h.rb != nil && back > 0 {
		h.rb.Return(back)
	}
	h.n = min(h.n, int64(keep))
}

// match is the answer to id if this event carries it. Events named other
// than "message" are not JSON-RPC messages, as for the SDK, and neither is
// an event with empty data (a server primes a resumable stream with one).
func (e *sseEvent) match(id string) (json.RawMessage, error) {
	if len(e.data) == 0 || (e.name != "" && e.name != "message") {
		return nil, errNotOurs
	}
	return matchAnswer(e.data, id)
}
