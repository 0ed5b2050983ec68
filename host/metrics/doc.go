// Package metrics exports wasp's Prometheus metrics: upstream kube-proxy's
// kubeproxy_* series, with the names, types, labels and buckets dashboards
// and alerts written for kube-proxy expect, and wasp's own wasp_* series
// about the module chain (calls, failures by reason, ports served by a
// fallback, the active modules and their digests) and the sync loop; plus
// the Go runtime's and the process's. docs/metrics.md lists every series.
//
// A Metrics owns its registry (never the global default one) and serves
// it on /metrics (Handler, Serve). It is fed through the hooks of the
// packages that emit the events, which do not import this one:
//
//	Proxy()     -> proxy.Opts.Metrics          (changes, syncs)
//	Pipeline()  -> pipeline.Options.Observer   (module calls, fallbacks)
//	Health()    -> healthcheck.ProxyOpts.Observer (/healthz, /livez codes)
//	Conntrack() -> conntrack.Opts.Observer     (stale UDP entry cleanup)
//	SetChain    the modules of each stage, after every load
package metrics
