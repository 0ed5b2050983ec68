package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/host/state"
)

const (
	// DefaultBindAddress is where kube-proxy serves its metrics by
	// default (--metrics-bind-address).
	DefaultBindAddress = "127.0.0.1:10249"

	// Path is where Handler is served.
	Path = "/metrics"

	// retryListen is how long Serve waits before trying to listen
	// again, as upstream's metrics server.
	retryListen = 5 * time.Second

	// readHeaderTimeout bounds how long a scraper may take to send its
	// request headers.
	readHeaderTimeout = 10 * time.Second
)

// Metrics holds every series and the registry they are in. Create it with
// New; its methods and hooks are safe for concurrent use.
type Metrics struct {
	reg      *prometheus.Registry
	handler  http.Handler
	families []backends.Family

	kubeProxy
	*modeSeries
	wasp
	moduleSources
}

// New returns the Metrics of the nftables mode (NewWith) for families.
func New(families ...backends.Family) *Metrics {
	m, _ := NewWith(Options{Mode: NFTables, Families: families}) // a known mode
	return m
}

// NewWith returns Metrics in a registry of their own, with the Go runtime
// and process collectors, and the upstream series of o.Mode. It fails for
// a mode it does not know.
func NewWith(o Options) (*Metrics, error) {
	m := &Metrics{reg: prometheus.NewRegistry(), families: o.Families}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	ms, err := newModeSeries(m.reg, o.Mode)
	if err != nil {
		return nil, err
	}
	m.modeSeries = ms
	m.kubeProxy = newKubeProxy(m.reg)
	m.wasp = newWasp(m.reg)
	m.moduleSources = newModuleSources(m.reg)
	for _, f := range o.Families {
		m.kubeProxy.initFamily(familyLabel(f))
		m.modeSeries.initFamily(familyLabel(f))
		m.wasp.initFamily(familyLabel(f))
	}
	m.handler = promhttp.InstrumentMetricHandler(m.reg, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:      m.reg,
		ErrorHandling: promhttp.ContinueOnError,
	}))
	return m, nil
}

// Registry returns the registry every series is in.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler returns the handler of /metrics, in the Prometheus text and
// OpenMetrics formats.
func (m *Metrics) Handler() http.Handler { return m.handler }

// Serve serves Handler on Path at addr (host:port) until ctx is done. If it
// cannot listen, or serving fails, it logs why and tries again 5 s later,
// as upstream's metrics server: a busy port at start-up must not take the
// proxy down, nor leave it without metrics for good.
func (m *Metrics) Serve(ctx context.Context, addr string) {
	logger := klog.FromContext(ctx).WithValues("address", addr)
	for {
		err := m.serve(ctx, net.Listen, addr)
		if ctx.Err() != nil {
			return
		}
		logger.Error(err, "Metrics server failed; retrying", "retryIn", retryListen)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retryListen):
		}
	}
}

// serve listens on addr with listen and serves until ctx is done (nil) or
// serving fails.
func (m *Metrics) serve(ctx context.Context, listen func(network, addr string) (net.Listener, error), addr string) error {
	ln, err := listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, m.handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	klog.FromContext(ctx).V(2).Info("Serving metrics", "address", ln.Addr().String(), "path", Path)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serve on %s: %w", addr, err)
	}
	return nil
}

// familyLabel returns the ip_family label value of f: "IPv4" or "IPv6",
// upstream's (the Kubernetes IPFamily names).
func familyLabel(f backends.Family) string {
	if kf, ok := state.KubernetesFamily(f); ok {
		return string(kf)
	}
	return f.String()
}
