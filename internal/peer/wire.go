package peer

import (
	"encoding/json"
	"errors"
	"time"
)

// The endpoint's routes: a forwarded call, and the agent sessions another
// replica ended.
const (
	CallPath  = "/v1/call"
	EndedPath = "/v1/ended"
)

// MaxBodyBytes bounds a forwarded call's request body, as the gateway
// bounds an agent's: the arguments were accepted there under that bound.
const MaxBodyBytes = 4 << 20

// maxAnswerBytes bounds the answer a Client reads: a result as large as a
// supervisor accepts from its server (16 MiB) in its envelope.
const maxAnswerBytes = 16<<20 + 64<<10

// Call is one tools/call to forward.
type Call struct {
	// Namespace is the McpServer's namespace.
	Namespace string `json:"namespace"`
	// Owner is the registry's owner key of the server's tool set
	// ("namespace/name").
	Owner string `json:"owner"`
	// Tool is the tool's raw name, as the server knows it.
	Tool string `json:"tool"`
	// Arguments are the call's arguments as the agent sent them; empty
	// when it sent none.
	Arguments json.RawMessage `json:"arguments,omitempty"` // written by encode, as is
	// SDK asks the owner to call through registry.Caller's CallTool even
	// when its caller has the JSON path: the forwarding replica was
	// itself called through CallTool (a tool whose x-mcp-header
	// parameters only the SDK sends).
	SDK bool `json:"sdk,omitempty"`
}

// encode is c on the wire. encoding/json would compact (and so copy and
// scan) the arguments: they are appended as they are.
func (c *Call) encode() ([]byte, error) {
	head, err := json.Marshal(callHead{Namespace: c.Namespace, Owner: c.Owner, Tool: c.Tool, SDK: c.SDK})
	if err != nil {
		return nil, err
	}
	if len(c.Arguments) == 0 {
		return head, nil
	}
	b := make([]byte, 0, len(head)+len(`,"arguments":`)+len(c.Arguments))
	b = append(b, head[:len(head)-1]...) // without its closing brace
	b = append(b, `,"arguments":`...)
	b = append(b, c.Arguments...)
	return append(b, '}'), nil
}

// EndedSession is one agent session a replica ended (DELETE, idle): the
// gateway's key of its id (a hash: the id itself never leaves the
// gateway) and until when the id could be taken up.
type EndedSession struct {
	Key   string    `json:"key"`
	Until time.Time `json:"until"`
}

// maxEndedPerRequest bounds the sessions of one POST EndedPath (about 80
// bytes each); more are sent in several requests.
const maxEndedPerRequest = 4096

// callHead is a Call without its arguments.
type callHead struct {
	Namespace string `json:"namespace"`
	Owner     string `json:"owner"`
	Tool      string `json:"tool"`
	SDK       bool   `json:"sdk,omitempty"`
}

// encodeAnswer is the endpoint's 200 response, written around the result
// as the owner's caller returned it (encoding/json would compact it).
func encodeAnswer(result json.RawMessage, isError bool) []byte {
	const head, tail = `{"isError":false,"result":`, `}`
	b := make([]byte, 0, len(head)+len(result)+len(tail))
	if isError {
		b = append(b, `{"isError":true,"result":`...)
	} else {
		b = append(b, head...)
	}
	if len(result) == 0 {
		result = json.RawMessage("null")
	}
	b = append(b, result...)
	return append(b, tail...)
}

// answer is the endpoint's 200 response, as the client reads it: the
// CallToolResult as the owner's caller returned it, byte for byte.
type answer struct {
	Result  json.RawMessage `json:"result"`
	IsError bool            `json:"isError"`
}

// failure is the body of any other response.
type failure struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
}

// Error codes of a failure.
const (
	// codeNotOwner: the replica has no local caller for the owner
	// (http.StatusConflict).
	codeNotOwner = "not_owner"
	// codeCallFailed: the local caller returned an error
	// (http.StatusBadGateway); the message is that error's.
	codeCallFailed = "call_failed"
	// codeBadRequest: the request could not be read (http.StatusBadRequest,
	// or http.StatusRequestEntityTooLarge beyond MaxBodyBytes).
	codeBadRequest = "bad_request"
)

// ErrNotServedHere: the replica called does not serve the server (it is
// not, or no longer, its owner, or its supervisor is not up yet). Ownership
// is moving; a caller waits for the owner it computes next and retries.
var ErrNotServedHere = errors.New("the replica called does not serve this McpServer")

// ErrUnreachable: no answer came from the replica (no connection, a
// refused handshake, or the connection lost before the answer). The call
// may or may not have run there.
var ErrUnreachable = errors.New("the replica that owns this McpServer cannot be reached")

// ErrNotSent comes with ErrUnreachable when no connection to the replica
// could be made (the dial or the TLS handshake failed): the call was not
// sent, so it did not run there, and may be sent again.
var ErrNotSent = errors.New("the call was not sent")

// CallError is the owner's caller failing the call: its message is the
// error the owner's supervisor returned, which a local call would have
// returned too (never an argument, a result or a secret: supervisors'
// errors are what agents see).
type CallError struct{ Message string }

func (e *CallError) Error() string { return e.Message }

// unreachableError is ErrUnreachable (and ErrNotSent when the connection
// failed) with its cause, for the log. Its message names no address: it
// reaches agents.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return ErrUnreachable.Error() }
func (e *unreachableError) Unwrap() []error {
	if _, notSent := errors.AsType[*dialError](e.err); notSent {
		return []error{ErrUnreachable, ErrNotSent, e.err}
	}
	return []error{ErrUnreachable, e.err}
}

// dialError is a failed dial or TLS handshake.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }
