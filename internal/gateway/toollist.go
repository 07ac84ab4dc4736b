package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/gob"
	"fmt"
	"sort"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// listPageSize is the tools a tools/list page holds, as the SDK's pages.
const listPageSize = mcp.DefaultPageSize

// listTools answers a tools/list from the registry's snapshot the view
// refreshes to first: a page of the tools the identity may use, in name
// order, each the registry's definition under its public name. The SDK
// answers first, without the cursor, which the view reads itself (the
// public name the previous page ended with): what it adds to every list (its
// caching hints) is kept, and the few tools it holds are listed again
// from the snapshot.
func (v *view) listTools(ctx context.Context, next mcp.MethodHandler, req *mcp.ListToolsRequest) (mcp.Result, error) {
	if err := v.refresh(ctx); err != nil {
		v.e.log.Error(err, "gateway authorization failed")
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "authorization is unavailable"}
	}
	cursor := ""
	sdkReq := *req
	if req.Params != nil {
		params := *req.Params
		cursor, params.Cursor = params.Cursor, ""
		sdkReq.Params = &params
	}
	res, err := next(ctx, "tools/list", &sdkReq)
	lr, ok := res.(*mcp.ListToolsResult)
	if err != nil || !ok {
		return res, err
	}
	if err := v.page(lr, cursor); err != nil {
		return nil, err
	}
	return lr, nil
}

// errInvalidParams is the SDK's answer to params it cannot read, a cursor
// it did not give among them.
var errInvalidParams = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid params"}

// page fills res with the page that follows cursor ("": the first), and
// the cursor of the next one if there is one. A tool whose definition the
// registry cannot give is left out (registry.Tool.Upstream), as is one that
// binds a header and that the SDK refused. Its lock is not held while the
// page is built, which may decode a set of the registry's.
func (v *view) page(res *mcp.ListToolsResult, cursor string) error {
	v.mu.Lock()
	tools, allowed, headed := v.tools, v.allowed, v.headed
	v.mu.Unlock()
	start := 0
	if cursor != "" {
		after, ok := decodeCursor(cursor)
		if !ok {
			return errInvalidParams
		}
		start = sort.Search(len(tools), func(i int) bool { return tools[i].Name > after })
	}
	served := make([]mcp.Tool, 0, min(listPageSize, len(tools)-start)) // one allocation a page
	res.Tools, res.NextCursor = make([]*mcp.Tool, 0, cap(served)), ""
	for _, t := range tools[start:] {
		if !visible(t, allowed) {
			continue
		}
		if t.ParamHeaders && !headed[t.Name].served {
			continue
		}
		if len(served) == listPageSize {
			res.NextCursor = encodeCursor(served[len(served)-1].Name)
			break
		}
		up := t.Upstream()
		if up == nil {
			v.e.log.Error(errNoUpstream, "tool not listed", "tool", t.Name)
			continue
		}
		served = append(served, *up)
		s := &served[len(served)-1]
		s.Name = t.Name
		res.Tools = append(res.Tools, s)
	}
	return nil
}

// pageToken is the SDK's cursor: gob, in base64 with the URL alphabet,
// naming the last tool of the page. The view writes and reads the same, so
// that during an upgrade an agent's next page may come from a replica of
// either version.
type pageToken struct{ LastUID string }

func encodeCursor(name string) string {
	var b bytes.Buffer
	_ = gob.NewEncoder(&b).Encode(pageToken{LastUID: name}) // a struct of a string always encodes
	return base64.URLEncoding.EncodeToString(b.Bytes())
}

func decodeCursor(cursor string) (string, bool) {
	b, err := base64.URLEncoding.DecodeString(cursor)
	if err != nil {
		return "", false
	}
	var t pageToken
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&t); err != nil {
		return "", false
	}
	return t.LastUID, true
}

// announce sends notifications/tools/list_changed to the view's sessions,
// as the SDK sends it when its own tools change, debounced with those: the
// SDK has no other way to send it, so a probe is added and removed at once.
// A call of the probe's name in between gets the answer to an unknown tool.
func (v *view) announce() {
	defer func() {
		if r := recover(); r != nil { // an SDK that would refuse the probe must not take the manager down
			v.e.log.Error(fmt.Errorf("%v", r), "tools/list_changed not sent")
		}
	}()
	v.server.AddTool(listChangedProbe, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, unknownTool(req.Params.Name)
	})
	v.server.RemoveTools(listChangedProbe.Name)
}

// listChangedProbe is the tool announce adds. Its schema is one the SDK's
// AddTool need not encode and decode to check (Type and Types both set),
// which would cost a 32 KiB buffer each time.
var listChangedProbe = &mcp.Tool{
	Name:        "mcp-bridge-gateway-list-changed",
	InputSchema: &jsonschema.Schema{Type: "object", Types: []string{"object"}},
}
