package toolsets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/registry"
)

// cacheOf is a Reader holding one McpToolSet, as the manager's cache has it.
type cacheOf struct{ ts *v1alpha1.McpToolSet }

func (c cacheOf) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	c.ts.DeepCopyInto(obj.(*v1alpha1.McpToolSet))
	return nil
}

func (cacheOf) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not listed")
}

type answering string

func (a answering) CallTool(context.Context, string, any) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(a)}}}, nil
}

// A draining replica's mirror has stopped, so it still knows the server
// as released while the cache, which runs until the replica has answered
// its last calls, names this replica as the holder again: the call is made,
// not kept waiting for a change the mirror will not see.
func TestARouteFindsTheHolderInTheCacheWhenTheMirrorLags(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "srv"}
	cached := &v1alpha1.McpToolSet{Spec: v1alpha1.McpToolSetSpec{Holder: "r1"}}
	m := &Mirror{
		Reader: cacheOf{cached},
		Self:   "r1",
		Local: func(ns, owner string) (registry.Caller, bool) {
			return answering("from r1"), ns == key.Namespace && owner == "ns/srv"
		},
		PollInterval: 10 * time.Millisecond,
		sets:         map[types.NamespacedName]*mirrored{key: {holder: "", timeout: 300 * time.Millisecond}},
		changed:      make(chan struct{}),
	}
	rt := &route{m: m, key: key}
	res, isErr, err := rt.CallToolJSON(context.Background(), "echo", json.RawMessage(`{}`))
	if err != nil || isErr {
		t.Fatalf("call: %v (isError %v)", err, isErr)
	}
	var out mcp.CallToolResult
	if err := json.Unmarshal(res, &out); err != nil || len(out.Content) != 1 || out.Content[0].(*mcp.TextContent).Text != "from r1" {
		t.Fatalf("answer %s (%v)", res, err)
	}
}

// refusing is a local supervisor retired for a handoff: it refuses every
// call before making it, and says so on refused.
type refusing struct{ refused chan<- struct{} }

func (r refusing) CallTool(context.Context, string, any) (*mcp.CallToolResult, error) {
	select {
	case r.refused <- struct{}{}:
	default:
	}
	return nil, fmt.Errorf("tools-call: %w", registry.ErrNotServing)
}

// The mirror still names this replica the holder, but its supervisor was
// retired for the handoff between the route's look and the call: the
// refused call waits for the new holder and goes there, where it is made
// once.
func TestARouteSendsACallItsRetiredSupervisorRefusedToTheNewHolder(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "srv"}
	refused := make(chan struct{}, 1)
	forwards := make(chan string, 4)
	m := &Mirror{
		Self:  "r1",
		Local: func(string, string) (registry.Caller, bool) { return refusing{refused}, true },
		Peer:  func(name string) (Peer, bool) { return Peer{Name: name}, name == "r2" },
		Forward: func(_ context.Context, p Peer, _, _, _ string, _ json.RawMessage, _ bool) (json.RawMessage, bool, error) {
			forwards <- p.Name
			return json.RawMessage(`{"content":[{"type":"text","text":"from ` + p.Name + `"}]}`), false, nil
		},
		PollInterval: time.Hour, // the change of holder, not a poll, must wake the route
		sets:         map[types.NamespacedName]*mirrored{key: {holder: "r1", timeout: time.Minute}},
		changed:      make(chan struct{}),
	}
	go func() {
		<-refused
		m.mu.Lock()
		m.sets[key] = &mirrored{holder: "r2", timeout: time.Minute}
		close(m.changed)
		m.changed = make(chan struct{})
		m.mu.Unlock()
	}()
	rt := &route{m: m, key: key}
	res, isErr, err := rt.CallToolJSON(t.Context(), "echo", json.RawMessage(`{}`))
	if err != nil || isErr {
		t.Fatalf("call: %v (isError %v)", err, isErr)
	}
	if string(res) != `{"content":[{"type":"text","text":"from r2"}]}` {
		t.Fatalf("answer %s", res)
	}
	if len(forwards) != 1 {
		t.Fatalf("forwarded %d times, want once", len(forwards))
	}
}
