package healthcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

const (
	// DefaultBindAddress is where ProxyServer listens by default, as
	// kube-proxy's --healthz-bind-address.
	DefaultBindAddress = "0.0.0.0:10256"

	// ToBeDeletedTaint is the taint the Cluster Autoscaler puts on a node
	// it is about to delete (KEP-3836): /healthz fails on such a node so
	// load balancers drain it first.
	ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

	// readHeaderTimeout bounds how long a client may take to send its
	// request headers. Upstream sets none; probes send theirs at once.
	readHeaderTimeout = 10 * time.Second
)

// ListenFunc opens a listening socket, as net.Listen.
type ListenFunc func(network, address string) (net.Listener, error)

// ProxyOpts configure a ProxyServer.
type ProxyOpts struct {
	// HealthTimeout is how long an update may stay queued before the
	// proxy counts as unhealthy; kube-proxy uses twice its sync period.
	// Required: positive.
	HealthTimeout time.Duration
	// BindAddress is the host:port Run listens on. Optional; default
	// DefaultBindAddress.
	BindAddress string
	// Listen opens Run's listener. Optional; default net.Listen.
	Listen ListenFunc
	// Observer is told the status code of every /healthz and /livez
	// response, for metrics. Optional.
	Observer Observer
}

// Observer counts a ProxyServer's responses, for upstream's metrics
// proxy_healthz_total and proxy_livez_total. Its methods are called from
// the server's goroutines and must be quick and never block.
type Observer interface {
	// Healthz is called with the status code of each /healthz response.
	Healthz(code int)
	// Livez is called with the status code of each /livez response.
	Livez(code int)
}

// FamilyHealth is the health of one IP family's proxier.
type FamilyHealth struct {
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
}

// ProxyHealth is the body of /healthz and /livez. Its JSON is upstream's
// ProxyHealth: field names, order and omissions.
type ProxyHealth struct {
	// LastUpdated is the latest Updated time of any family; in a healthy
	// response it is overwritten with CurrentTime, as upstream does for
	// compatibility with older releases.
	LastUpdated time.Time `json:"lastUpdated"`
	CurrentTime time.Time `json:"currentTime"`
	// NodeEligible is set in /healthz responses only.
	NodeEligible *bool `json:"nodeEligible,omitempty"`
	// Healthy is true when every family is.
	Healthy bool `json:"healthy"`
	// Status has an entry for each family that has been Updated at least
	// once.
	Status map[v1.IPFamily]FamilyHealth `json:"status,omitempty"`
}

// ProxyServer tracks the proxy's health and serves /healthz and /livez.
// Its methods are safe for concurrent use.
type ProxyServer struct {
	opts  ProxyOpts
	clock clock.PassiveClock

	mu           sync.RWMutex
	lastUpdated  map[v1.IPFamily]time.Time
	oldestQueued map[v1.IPFamily]time.Time
	nodeEligible bool
}

// NewProxyServer checks opts and returns a ProxyServer. It opens no socket
// until Run.
func NewProxyServer(opts ProxyOpts) (*ProxyServer, error) {
	return newProxyServer(opts, clock.RealClock{})
}

func newProxyServer(opts ProxyOpts, c clock.PassiveClock) (*ProxyServer, error) {
	if opts.HealthTimeout <= 0 {
		return nil, fmt.Errorf("healthcheck: invalid options: healthTimeout: %v, want > 0", opts.HealthTimeout)
	}
	if opts.BindAddress == "" {
		opts.BindAddress = DefaultBindAddress
	}
	if opts.Listen == nil {
		opts.Listen = net.Listen
	}
	return &ProxyServer{
		opts:         opts,
		clock:        c,
		lastUpdated:  map[v1.IPFamily]time.Time{},
		oldestQueued: map[v1.IPFamily]time.Time{},
	}, nil
}

// Updated records that family's dataplane now reflects every queued
// update. Like upstream, call it also when the family's sync loop starts:
// only families that have been Updated are judged, so a proxier counts as
// healthy until then.
func (s *ProxyServer) Updated(family v1.IPFamily) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.oldestQueued, family)
	s.lastUpdated[family] = s.clock.Now()
}

// QueuedUpdate records that family has a change to apply. The oldest
// unapplied one counts: the family turns unhealthy HealthTimeout after it
// unless Updated is called first.
func (s *ProxyServer) QueuedUpdate(family v1.IPFamily) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.oldestQueued[family]; !ok {
		s.oldestQueued[family] = s.clock.Now()
	}
}

// SyncNode records the proxy's Node; nil means it does not exist. The node
// is eligible unless missing, being deleted, or tainted ToBeDeletedTaint.
// Before the first SyncNode the node counts as missing, as upstream, which
// starts only once it has seen its Node.
func (s *ProxyServer) SyncNode(node *v1.Node) {
	eligible := node != nil && node.DeletionTimestamp.IsZero()
	if eligible {
		for _, t := range node.Spec.Taints {
			if t.Key == ToBeDeletedTaint {
				eligible = false
				break
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodeEligible = eligible
}

// NodeEligible reports whether the last Node given to SyncNode may carry
// traffic.
func (s *ProxyServer) NodeEligible() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.nodeEligible
}

// Health returns the proxy's health, ignoring the node: the /livez body
// before a healthy response's LastUpdated is overwritten.
func (s *ProxyServer) Health() ProxyHealth {
	s.mu.RLock()
	defer s.mu.RUnlock()
	now := s.clock.Now()
	h := ProxyHealth{CurrentTime: now, Healthy: true, Status: map[v1.IPFamily]FamilyHealth{}}
	for family, updated := range s.lastUpdated {
		if updated.After(h.LastUpdated) {
			h.LastUpdated = updated
		}
		healthy := true
		if queued, ok := s.oldestQueued[family]; ok && now.Sub(queued) >= s.opts.HealthTimeout {
			healthy = false
			h.Healthy = false
		}
		h.Status[family] = FamilyHealth{LastUpdated: updated, Healthy: healthy}
	}
	return h
}

// IsHealthy reports Health().Healthy: what a ServiceServer reports as
// serviceProxyHealthy.
func (s *ProxyServer) IsHealthy() bool { return s.Health().Healthy }

// Handler returns the handler of /healthz and /livez; any other path is
// 404, as upstream.
func (s *ProxyServer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := s.Health()
		eligible := s.NodeEligible()
		h.NodeEligible = &eligible
		code := writeProxyHealth(w, h, h.Healthy && eligible)
		if o := s.opts.Observer; o != nil {
			o.Healthz(code)
		}
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		h := s.Health()
		code := writeProxyHealth(w, h, h.Healthy)
		if o := s.opts.Observer; o != nil {
			o.Livez(code)
		}
	})
	return mux
}

// writeProxyHealth writes h with status 200 if healthy, else 503, and
// returns the status.
func writeProxyHealth(w http.ResponseWriter, h ProxyHealth, healthy bool) int {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	code := http.StatusServiceUnavailable
	if healthy {
		h.LastUpdated = h.CurrentTime
		code = http.StatusOK
	}
	w.WriteHeader(code)
	// ProxyHealth always marshals: times, bools and a string-keyed map.
	body, _ := json.Marshal(h)
	_, _ = w.Write(body)
	return code
}

// Run listens on BindAddress and serves Handler until ctx is done, then
// shuts the server down and returns nil. It returns an error if it cannot
// listen or serving fails.
func (s *ProxyServer) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ln, err := s.opts.Listen("tcp", s.opts.BindAddress)
	if err != nil {
		return fmt.Errorf("healthcheck: proxy health server on %s: %w", s.opts.BindAddress, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: readHeaderTimeout}
	stopped := context.AfterFunc(ctx, func() {
		// Close rather than Shutdown: a probe holds nothing worth draining.
		_ = srv.Close()
	})
	defer stopped()
	logger.V(3).Info("Starting proxy health server", "address", ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("healthcheck: proxy health server on %s: %w", s.opts.BindAddress, err)
	}
	return nil
}
