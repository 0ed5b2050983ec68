package proxy

import (
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
