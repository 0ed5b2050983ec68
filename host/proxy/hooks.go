package proxy

import (
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/wasp-proxy/wasp/backends"
)

// Health is told when updates are queued and when they reach each family's
// backend, and about the local Node, so that a /healthz server can report
// whether the proxy keeps up (upstream's ProxyHealthServer). Its methods
// are called from several goroutines, and must be quick and never block.
type Health interface {
	// QueuedUpdate is called for every family when a change that needs a
	// sync arrives (after the informers' caches synced), and by Resync.
	QueuedUpdate(family backends.Family)
	// Updated is called after family's backend synced successfully.
	Updated(family backends.Family)
	// SyncNode is called with the local Node on every add, update or
	// delete event of it, whatever changed, and before the first sync with
	// the Node as then known. A nil node means there is no Node object (it
	// was deleted, or never existed).
	SyncNode(node *v1.Node)
}

// ServiceHealth serves the health-check node ports of eTP=Local
// LoadBalancer Services (upstream's ServiceHealthServer). Both methods are
// called, in this order, after every successful sync, from the sync
// goroutine only; they get maps they may keep.
type ServiceHealth interface {
	// SyncServices gets the healthCheckNodePort of every Service that has
	// one on this node: type LoadBalancer, externalTrafficPolicy Local, and
	// a ClusterIP of a family this proxy serves.
	SyncServices(ports map[types.NamespacedName]uint16)
	// SyncEndpoints gets, for the same Services, the number of distinct
	// local Ready endpoint IPs across all ports of the Service (terminating
	// endpoints are never Ready, so never counted), 0 included. On a
	// dual-stack node it is the larger of the two families' counts: upstream
	// runs one health server per family, each counting its own family's
	// IPs, and counting both would report each dual-stack pod twice.
	SyncEndpoints(local map[types.NamespacedName]int)
}

// Metrics is told about changes and syncs, for the metrics upstream
// kube-proxy exports (its pkg/proxy/metrics). Its methods are called from
// several goroutines and must be quick and never block.
type Metrics interface {
	// ServiceEvent is called for every informer event of a Service, and
	// EndpointSliceEvent for every one of an EndpointSlice of a Service,
	// whether or not it changed anything the proxy reads: upstream's
	// service_changes_total and endpoint_changes_total count them all.
	ServiceEvent()
	EndpointSliceEvent()
	// PendingChanges is called with what waits for the next sync whenever
	// that changes: after each event that changed something, and with
	// (0, 0) when a sync takes the changes. services is how many Services
	// changed (their objects, not their EndpointSlices); endpointSlices
	// is how many EndpointSlice events changed something. Calls are
	// serialized, in the order of the changes.
	PendingChanges(services, endpointSlices int)
	// QueuedUpdate is called for every family when a change that needs a
	// sync arrives, as Health.QueuedUpdate.
	QueuedUpdate(family backends.Family)
	// Synced is called after every sync, failed ones included, on the
	// sync goroutine. r is valid during the call only.
	Synced(r *SyncReport)
	// DriftChecked is called after every drift check of a family's
	// backend (Opts.DriftCheckPeriod). r is valid during the call only.
	DriftChecked(r *DriftReport)
}

// SyncReport is what one sync did, for Metrics.
type SyncReport struct {
	// Full: the sync evaluated every service port; otherwise only those
	// of the Services that changed.
	Full bool
	// Duration is how long the whole sync took, every family included.
	Duration time.Duration
	// Evaluated is how many service ports the sync evaluated.
	Evaluated int
	// Err, if not nil, stopped the sync before any backend ran (listing
	// the cluster's objects failed).
	Err error
	// Families has an entry per family whose backend ran, in the order
	// they ran (IPv4 first).
	Families []FamilySync
}

// FamilySync is one family's part of a sync.
type FamilySync struct {
	Family backends.Family
	// Err is the error of the backend's Sync; nil: it synced. An error
	// wrapping backends.ErrHousekeeping means the dataplane was
	// programmed all the same (see Programmed).
	Err error
	// Result is what the backend's Sync said it did, with Err.
	Result backends.SyncResult
	// ServicePorts is how many service ports the family's State had.
	ServicePorts int
	// NoLocalInternal and NoLocalExternal count the State's service
	// ports whose internal (respectively external) traffic policy is
	// Local and that drop such traffic: they have endpoints, but none
	// local (upstream's no_local_endpoints_total).
	NoLocalInternal, NoLocalExternal int
	// NetworkProgramming holds, if Programmed, one duration per
	// EndpointSlice change of the family that this sync programmed and
	// that carried the endpoints.kubernetes.io/last-change-trigger-time
	// annotation (with a time after the Proxy was created): from that
	// time to the end of the backend's Sync (upstream's
	// network_programming_duration_seconds).
	NetworkProgramming []time.Duration
}

// Programmed reports whether the family's dataplane was programmed: the
// backend's Sync succeeded, or failed only in housekeeping after it.
func (f *FamilySync) Programmed() bool {
	return f.Err == nil || errors.Is(f.Err, backends.ErrHousekeeping)
}
