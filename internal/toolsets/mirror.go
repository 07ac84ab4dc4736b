package toolsets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/registry"
)

// Peer is another replica, as the membership knows it.
type Peer struct{ Name, Address string }

// Forwarder sends a tools/call for owner's server to the replica p; sdk
// asks the holder to call through the SDK (registry.Caller's CallTool),
// as the gateway called this replica.
type Forwarder func(ctx context.Context, p Peer, ns, owner, tool string, args json.RawMessage, sdk bool) (json.RawMessage, bool, error)

// Mirror keeps Served equal to the McpToolSets. Build it, set its fields,
// then SetupWithManager.
type Mirror struct {
	// Reader reads McpToolSets, from the manager's cache.
	Reader client.Reader
	// Served is the registry the gateway serves.
	Served *registry.Registry
	// Self is this replica's name.
	Self string
	// Local is the Caller of this replica's own supervisor of owner, if
	// it runs and has published.
	Local func(ns, owner string) (registry.Caller, bool)
	// Peer is the live replica called name, if it is live.
	Peer func(name string) (Peer, bool)
	// Forward sends a call to another replica.
	Forward Forwarder
	// Retryable tells a forward that did not reach the server's
	// connection (the peer refused it before calling, or could not be
	// dialled): the call waits for a holder again. Nil: none is.
	Retryable func(error) bool
	// PollInterval is how often a waiting call looks again even without a
	// change of the McpToolSet (a peer's Lease expiring); zero is 100 ms.
	PollInterval time.Duration

	mu      sync.Mutex
	sets    map[types.NamespacedName]*mirrored
	changed chan struct{} // closed and replaced on every change of sets
}

// mirrored is what the mirror knows of one McpToolSet.
type mirrored struct {
	holder  string
	digest  string
	timeout time.Duration
	route   *route
}

// SetupWithManager runs the mirror on every replica, leader or not.
func (m *Mirror) SetupWithManager(mgr ctrl.Manager) error {
	m.sets = map[types.NamespacedName]*mirrored{}
	m.changed = make(chan struct{})
	return ctrl.NewControllerManagedBy(mgr).
		Named("mcptoolset-mirror").
		For(&v1alpha1.McpToolSet{}).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: 4}).
		Complete(m)
}

// Reconcile puts one McpToolSet into Served, or takes it out.
func (m *Mirror) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ts := &v1alpha1.McpToolSet{}
	owner := req.Namespace + "/" + req.Name
	// Not a deep copy: the registry keeps the gzip the cache holds (below),
	// not a second copy of it, and nothing here writes to ts.
	if err := m.Reader.Get(ctx, req.NamespacedName, ts, client.UnsafeDisableDeepCopy); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		m.Served.Remove(req.Namespace, owner)
		m.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	cur := m.get(req.NamespacedName)
	if cur == nil || cur.digest != ts.Spec.Digest {
		tools, err := Decode(ts.Spec.Tools)
		if err != nil {
			// Not retried: only a new version of the object can change it.
			ctrl.LoggerFrom(ctx).Error(err, "McpToolSet not served", "mcptoolset", owner)
			return ctrl.Result{}, nil
		}
		rt := &route{m: m, key: req.NamespacedName}
		if cur != nil {
			rt = cur.route
		}
		// The registry keeps the gzip, not the decoded tools, until a reader
		// of the namespace wants them: every replica holds every set.
		gz := ts.Spec.Tools
		decode := func() ([]*mcp.Tool, error) { return Decode(gz) }
		if _, err := m.Served.SwapEncoded(req.Namespace, owner, ts.Spec.ServerName, tools, decode, rt); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "McpToolSet not served", "mcptoolset", owner)
			return ctrl.Result{}, nil
		}
		cur = &mirrored{route: rt}
	}
	m.set(req.NamespacedName, &mirrored{holder: ts.Spec.Holder, digest: ts.Spec.Digest,
		timeout: time.Duration(ts.Spec.ConnectionTimeoutMs) * time.Millisecond, route: cur.route})
	return ctrl.Result{}, nil
}

func (m *Mirror) get(key types.NamespacedName) *mirrored {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sets[key]
}

func (m *Mirror) set(key types.NamespacedName, s *mirrored) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sets[key] = s
	m.signalLocked()
}

func (m *Mirror) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sets, key)
	m.signalLocked()
}

func (m *Mirror) signalLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// current is what a call to key's server goes by now, and a channel that
// is closed at the next change.
func (m *Mirror) current(key types.NamespacedName) (*mirrored, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sets[key], m.changed
}

// Holder is the replica that holds key's server as the mirror last saw
// its McpToolSet, and whether there is one.
func (m *Mirror) Holder(key types.NamespacedName) (string, bool) {
	s, _ := m.current(key)
	if s == nil {
		return "", false
	}
	return s.holder, true
}

// Ready is a readiness check: it passes once every McpToolSet in the cache
// is served as the cache has it, so that a replica that starts does not
// answer "unknown tool" for a tool another replica serves.
func (m *Mirror) Ready(req *http.Request) error {
	if m.sets == nil {
		return errors.New("the tool set mirror has not been set up")
	}
	list := &v1alpha1.McpToolSetList{}
	ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
	defer cancel()
	if err := m.Reader.List(ctx, list); err != nil {
		return fmt.Errorf("list McpToolSets: %w", err)
	}
	behind := 0
	for i := range list.Items {
		ts := &list.Items[i]
		s := m.get(types.NamespacedName{Namespace: ts.Namespace, Name: ts.Name})
		if s == nil || s.digest != ts.Spec.Digest {
			behind++
		}
	}
	if behind > 0 {
		return fmt.Errorf("%d of %d McpToolSets are not served yet", behind, len(list.Items))
	}
	return nil
}
