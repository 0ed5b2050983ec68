package proxy

import (
	"maps"
	"slices"
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

// fakeMetrics records the Metrics calls; QueuedUpdate as fakeHealth.
type fakeMetrics struct {
	fakeHealth
	mu                            sync.Mutex
	serviceEvents, sliceEvents    int
	pendingServices, pendingSlice int
	reports                       []SyncReport
	drifts                        []DriftReport
}

var _ Metrics = (*fakeMetrics)(nil)

func (m *fakeMetrics) ServiceEvent() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.serviceEvents++
}

func (m *fakeMetrics) EndpointSliceEvent() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sliceEvents++
}

func (m *fakeMetrics) PendingChanges(services, endpointSlices int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pendingServices, m.pendingSlice = services, endpointSlices
}

func (m *fakeMetrics) Synced(r *SyncReport) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := *r
	c.Families = slices.Clone(r.Families)
	m.reports = append(m.reports, c)
}

func (m *fakeMetrics) DriftChecked(r *DriftReport) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drifts = append(m.drifts, *r)
}

// driftReports returns the DriftReports so far.
func (m *fakeMetrics) driftReports() []DriftReport {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.drifts)
}

// lastReport returns the last SyncReport and how many there were.
func (m *fakeMetrics) lastReport() (SyncReport, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.reports) == 0 {
		return SyncReport{}, 0
	}
	return m.reports[len(m.reports)-1], len(m.reports)
}

// find returns the first SyncReport for which ok holds.
func (m *fakeMetrics) find(ok func(SyncReport) bool) (SyncReport, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.reports {
		if ok(r) {
			return r, true
		}
	}
	return SyncReport{}, false
}

// counts returns the event counts and the last pending numbers.
func (m *fakeMetrics) counts() (serviceEvents, sliceEvents, pendingServices, pendingSlices int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.serviceEvents, m.sliceEvents, m.pendingServices, m.pendingSlice
}
