package controller

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/podruntime"
)

// Pods hands every Pod-runtime supervisor its bridge.PodSource: the Pods
// of its server's Deployment as the manager's Pod cache sees them (a cache
// that selects only the Pods the manager labelled, see CacheOptions), and
// a signal when they change, fed by the Pod informer through Handler.
// See docs/design.md, "Pods that are not there yet".
type Pods struct {
	// Reader is the manager's cache.
	Reader client.Reader

	mu      sync.Mutex
	changed map[podsKey]chan struct{} // only for servers someone asked about
}

// podsKey names one server's Pods: its namespace and the value of its
// server label.
type podsKey struct{ namespace, server string }

// Source is the PodSource of the supervisor that runs the Pod template
// whose template-hash annotation is hash, for the McpServer name.
func (p *Pods) Source(namespace, name, hash string) bridge.PodSource {
	return &podSource{pods: p, key: podsKey{namespace, podruntime.LabelValue(name)}, name: name, hash: hash}
}

// channel is key's current change signal; notify closes it.
func (p *Pods) channel(key podsKey) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changed == nil {
		p.changed = map[podsKey]chan struct{}{}
	}
	ch, ok := p.changed[key]
	if !ok {
		ch = make(chan struct{})
		p.changed[key] = ch
	}
	return ch
}

// notify wakes whoever waits on pod's server.
func (p *Pods) notify(pod client.Object) {
	server, ok := pod.GetLabels()[podruntime.ServerLabel]
	if !ok {
		return
	}
	key := podsKey{pod.GetNamespace(), server}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch, ok := p.changed[key]; ok {
		close(ch)
		delete(p.changed, key)
	}
}

// Handler turns the Pod informer's events into change signals. It
// enqueues nothing: a Pod's state reaches status through its supervisor.
func (p *Pods) Handler() handler.TypedEventHandler[*corev1.Pod, reconcile.Request] {
	type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	return handler.TypedFuncs[*corev1.Pod, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*corev1.Pod], _ queue) { p.notify(e.Object) },
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.Pod], _ queue) { p.notify(e.ObjectNew) },
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*corev1.Pod], _ queue) { p.notify(e.Object) },
	}
}

// podSource is one supervisor's view of its server's Pods.
type podSource struct {
	pods *Pods
	key  podsKey
	name string
	hash string
}

// listTimeout bounds a read of the cache, which is synced long before any
// supervisor asks (the Pod watch starts with the controller).
const listTimeout = 10 * time.Second

// Current returns the Pod of the source's template that is not being
// deleted, preferring a Ready one, then the newest.
func (s *podSource) Current() (bridge.PodInfo, bool, <-chan struct{}) {
	ch := s.pods.channel(s.key) // before the read, so that no change is missed
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	list := &corev1.PodList{}
	if err := s.pods.Reader.List(ctx, list, client.InNamespace(s.key.namespace),
		client.MatchingLabels(podruntime.Labels(s.name))); err != nil {
		return bridge.PodInfo{}, false, ch
	}
	var best *corev1.Pod
	var bestInfo bridge.PodInfo
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.DeletionTimestamp != nil || pod.Annotations[podruntime.TemplateHashAnnotation] != s.hash {
			continue
		}
		info := podInfo(pod)
		if best == nil || (info.Ready && !bestInfo.Ready) ||
			(info.Ready == bestInfo.Ready && best.CreationTimestamp.Before(&pod.CreationTimestamp)) {
			best, bestInfo = pod, info
		}
	}
	return bestInfo, best != nil, ch
}
