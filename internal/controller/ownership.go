package controller

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
)

// indexServerName indexes McpServers by their effective serverName.
const indexServerName = "mcpbridge.dev/serverName"

// serverNameOf is the effective serverName of m, as the resolve step has it.
func serverNameOf(m *v1alpha1.McpServer) string { return policy.ServerName(m.Name, &m.Spec) }

func indexServerNameFunc(obj client.Object) []string {
	if m, ok := obj.(*v1alpha1.McpServer); ok {
		return []string{serverNameOf(m)}
	}
	return nil
}

// serverNameHolder returns the McpServer that holds serverName in ns: the
// oldest (creationTimestamp, then name) that is not being deleted.
// See docs/design.md, "Tool registry and names".
func serverNameHolder(ctx context.Context, c client.Reader, ns, serverName string) (*v1alpha1.McpServer, error) {
	list := &v1alpha1.McpServerList{}
	if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingFields{indexServerName: serverName}); err != nil {
		return nil, err
	}
	var holder *v1alpha1.McpServer
	for i := range list.Items {
		m := &list.Items[i]
		if m.DeletionTimestamp != nil || serverNameOf(m) != serverName {
			continue
		}
		if holder == nil || olderThan(m, holder) {
			holder = m
		}
	}
	return holder, nil
}

func olderThan(a, b *v1alpha1.McpServer) bool {
	ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return a.Name < b.Name
}

// peersHandler wakes the other holders of a serverName when a resource
// appears, leaves, or changes its serverName, so that a waiting resource
// takes over by itself.
func peersHandler(c client.Reader) handler.TypedEventHandler[client.Object, reconcile.Request] {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], obj client.Object) {
		m, ok := obj.(*v1alpha1.McpServer)
		if !ok {
			return
		}
		list := &v1alpha1.McpServerList{}
		if err := c.List(ctx, list, client.InNamespace(m.Namespace),
			client.MatchingFields{indexServerName: serverNameOf(m)}); err != nil {
			return
		}
		for i := range list.Items {
			if list.Items[i].Name != m.Name {
				q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			o, n := e.ObjectOld.(*v1alpha1.McpServer), e.ObjectNew.(*v1alpha1.McpServer)
			if serverNameOf(o) != serverNameOf(n) || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) {
				enqueue(ctx, q, e.ObjectOld)
				enqueue(ctx, q, e.ObjectNew)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
	}
}
