package proxy

import (
	"maps"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/wasp-proxy/wasp/backends"
)

// fakeHealth records the Health calls.
type fakeHealth struct {
	mu      sync.Mutex
	queued  map[backends.Family]int
	updated map[backends.Family]int
	nodes   int
	node    *v1.Node // the last SyncNode argument
}

var _ Health = (*fakeHealth)(nil)

func (h *fakeHealth) QueuedUpdate(f backends.Family) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.queued == nil {
		h.queued = map[backends.Family]int{}
	}
	h.queued[f]++
}

func (h *fakeHealth) Updated(f backends.Family) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.updated == nil {
		h.updated = map[backends.Family]int{}
	}
	h.updated[f]++
}

func (h *fakeHealth) SyncNode(n *v1.Node) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nodes++
	h.node = n
}

func (h *fakeHealth) queuedCount(f backends.Family) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.queued[f]
}

func (h *fakeHealth) updatedCount(f backends.Family) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.updated[f]
}

func (h *fakeHealth) nodeCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nodes
}

func (h *fakeHealth) lastNode() *v1.Node {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.node
}

// fakeServiceHealth records the last ServiceHealth calls.
type fakeServiceHealth struct {
	mu        sync.Mutex
	calls     int
	services  map[types.NamespacedName]uint16
	endpoints map[types.NamespacedName]int
}

var _ ServiceHealth = (*fakeServiceHealth)(nil)

func (h *fakeServiceHealth) SyncServices(m map[types.NamespacedName]uint16) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	h.services = m
}

func (h *fakeServiceHealth) SyncEndpoints(m map[types.NamespacedName]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endpoints = m
}

// last returns copies of the last maps and how many syncs reported.
func (h *fakeServiceHealth) last() (map[types.NamespacedName]uint16, map[types.NamespacedName]int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.services), maps.Clone(h.endpoints), h.calls
}
