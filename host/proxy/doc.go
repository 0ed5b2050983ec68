// Package proxy is wasp's sync loop: the seam between the Kubernetes watch
// and the dataplane. A Proxy watches Services and EndpointSlices (without
// those model.LabelSelector excludes), the local Node and, where the
// apiserver serves them, ServiceCIDRs, and on every change programs each IP
// family's backend with the node's complete desired state:
//
//	listers -> model.Build -> pipeline.Run -> per-Service cache -> State (per family) -> Backend.Sync
//
// Like upstream kube-proxy:
//   - nothing is programmed before every informer's cache has synced and
//     every event of the initial lists has been handled, so a partial view
//     of the cluster never reaches the dataplane;
//   - syncs are rate limited by a bounded-frequency runner: events coalesce,
//     at most burst 2 syncs run back to back, then one per MinSyncPeriod;
//   - errors never go upward: a failed sync is logged, counted and retried
//     as a full one, with exponential backoff from 1 s up to RetryPeriod
//     (sooner if another event comes);
//   - syncs are partial: informer events mark the Services they touch
//     (EndpointSlices by namespace and their kubernetes.io/service-name
//     label, before and after the event), and a sync evaluates only the
//     ports of those Services, in one batched pipeline call, keeping every
//     other port's last result in a cache. Updates that change nothing the
//     model reads (a new resourceVersion, status conditions, node
//     heartbeats) are dropped by a cheap comparison in the event handler.
//
// Every sync still hands each backend the complete State, assembled from the
// cache (the backend diffs), so a partial sync programs exactly what a full
// one would: TestIncrementalMatchesFull checks it on random changes.
//
// A Service some of whose ports a failing module left not isolated
// (pipeline.ErrNotIsolated: the bisect budget ran out before the ports
// that fail it were found) is marked changed again after RetryPeriod, so
// that its ports are evaluated alone and the good ones get their modules'
// decision without waiting for a change.
//
// A full sync, which evaluates every port again, happens on the first
// sync, after any failed one (listing or backend), on Resync (a module swap
// calls it), and when the Node's labels change. Unlike upstream, which
// looks only at the topology labels, any label counts: model.Build passes
// all of the Node's labels to the modules, and a module may read any of
// them. ServiceCIDR changes change every State but evaluate nothing.
//
// The node's addresses every State carries (its IPs, and where NodePorts
// answer) follow the node: Opts.NodeAddresses resolves them once the caches
// synced, at every event of the Node, and every AddressCheckPeriod (for
// local addresses that change without the Node); a change programs them
// with a sync that, like a ServiceCIDR change, evaluates nothing.
//
// ServiceCIDRs are watched only if discovery, asked once at start, says
// the apiserver serves them (see serviceCIDRsServed): an informer for an
// API that is not served would never sync and hold back the first sync.
//
// Health and ServiceHealth, both optional, are the hooks of the health
// servers: queued and synced updates per family, the local Node, and after
// each successful sync the health-check node ports and local Ready
// endpoint counts. Metrics, optional too, is the hook of upstream's
// kubeproxy_* metrics: it hears of every Service and EndpointSlice event,
// of the changes pending, and after every sync gets a SyncReport (full or
// partial, duration, each family's outcome, the ports without local
// endpoints, and how long each EndpointSlice change took from its
// endpoints.kubernetes.io/last-change-trigger-time to the dataplane; the
// informers keep that one annotation of EndpointSlices for it). Stats
// carries running counts.
//
// There is no maxInterval run (upstream's hourly sync).
//
// The Proxy does not own its backends: the caller closes (or cleans up) them
// after Run returns.
package proxy
