package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// writtenVersions remembers, per McpServer, the resourceVersion that this
// replica's last status write returned, so that a reconcile can tell a
// cache that holds that write from one that may be behind it. See
// docs/design.md, "Reading what the owner writes".
type writtenVersions struct {
	mu sync.Mutex
	rv map[types.NamespacedName]string
}

func newWrittenVersions() *writtenVersions {
	return &writtenVersions{rv: map[types.NamespacedName]string{}}
}

// seenIn: obj holds the version of this replica's last status write.
// A nil set sees nothing.
func (w *writtenVersions) seenIn(obj client.Object) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	rv, ok := w.rv[client.ObjectKeyFromObject(obj)]
	return ok && rv == obj.GetResourceVersion()
}

// wrote records obj's resourceVersion after a write that succeeded.
func (w *writtenVersions) wrote(obj client.Object) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rv[client.ObjectKeyFromObject(obj)] = obj.GetResourceVersion()
}

// forget drops the record of a server that is gone or no longer ours.
func (w *writtenVersions) forget(key types.NamespacedName) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.rv, key)
}
