package healthcheck

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// ServiceOpts configure a ServiceServer.
type ServiceOpts struct {
	// Proxy tells whether the proxy is healthy, for serviceProxyHealthy.
	// Required.
	Proxy *ProxyServer
	// Addresses are the node-port addresses to listen on, of either
	// family. Optional: none means every address.
	Addresses []netip.Addr
	// Listen opens each listener. Optional; default net.Listen.
	Listen ListenFunc
}

// ServiceServer serves the healthCheckNodePort of every Service with
// externalTrafficPolicy=Local. Its methods are safe for concurrent use.
type ServiceServer struct {
	proxy  *ProxyServer
	hosts  []string // listen hosts, "0.0.0.0" for all
	listen ListenFunc

	mu       sync.RWMutex
	services map[types.NamespacedName]*serviceHC
}

// serviceHC is one Service's health check: its port, servers and count.
type serviceHC struct {
	name      types.NamespacedName
	port      uint16
	servers   []*http.Server
	endpoints int // local ready endpoints
}

// NewServiceServer checks opts and returns a ServiceServer with no
// listener.
func NewServiceServer(opts ServiceOpts) (*ServiceServer, error) {
	var errs []error
	if opts.Proxy == nil {
		errs = append(errs, errors.New("proxy: required"))
	}
	for i, a := range opts.Addresses {
		if !a.IsValid() {
			errs = append(errs, fmt.Errorf("addresses[%d]: invalid", i))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("healthcheck: invalid options: %w", err)
	}
	s := &ServiceServer{proxy: opts.Proxy, listen: opts.Listen, services: map[types.NamespacedName]*serviceHC{}}
	if s.listen == nil {
		s.listen = net.Listen
	}
	s.hosts = hostsOf(opts.Addresses)
	return s, nil
}

// hostsOf returns the hosts to listen on for the node-port addresses
// addrs, sorted and without duplicates.
func hostsOf(addrs []netip.Addr) []string {
	addrs = slices.Clone(addrs)
	slices.SortFunc(addrs, netip.Addr.Compare)
	var hosts []string
	for _, a := range slices.Compact(addrs) {
		hosts = append(hosts, a.String())
	}
	if len(hosts) == 0 {
		// As upstream: with network "tcp", Go listens on the unspecified
		// IPv4 address with a dual-stack socket, so "0.0.0.0" covers both
		// families where IPv6 is enabled and IPv4 alone elsewhere.
		hosts = []string{"0.0.0.0"}
	}
	return hosts
}

// SetAddresses makes addrs the node-port addresses the health checks
// listen on (ServiceOpts.Addresses), when the node's addresses changed.
// If they differ from those in use, every health check is closed, and
// the next SyncServices opens them on the new ones; it reports whether
// they differed. Invalid addresses are skipped.
func (s *ServiceServer) SetAddresses(ctx context.Context, addrs []netip.Addr) bool {
	var valid []netip.Addr
	for _, a := range addrs {
		if a.IsValid() {
			valid = append(valid, a)
		}
	}
	hosts := hostsOf(valid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Equal(hosts, s.hosts) {
		return false
	}
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Health check addresses changed", "from", s.hosts, "to", hosts)
	s.hosts = hosts
	for name, hc := range s.services {
		hc.close(logger)
		delete(s.services, name)
	}
	return true
}

// SyncServices makes services the set of health checks served, the value
// being each Service's healthCheckNodePort. A Service whose port changed is
// closed and reopened, and its count starts again at 0; one that stays is
// left alone. Listen failures are returned joined, each naming the Service
// and port; such a Service has no listener at all (those already opened
// for it are closed) and is retried by the next SyncServices, while every
// other Service keeps serving.
func (s *ServiceServer) SyncServices(ctx context.Context, services map[types.NamespacedName]uint16) error {
	logger := klog.FromContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, hc := range s.services {
		if port, ok := services[name]; ok && port == hc.port {
			continue
		}
		logger.V(2).Info("Closing health check", "service", name, "port", hc.port)
		hc.close(logger)
		delete(s.services, name)
	}
	var errs []error
	for _, name := range sortedNames(services) {
		port := services[name]
		if s.services[name] != nil {
			continue
		}
		logger.V(2).Info("Opening health check", "service", name, "port", port)
		hc := &serviceHC{name: name, port: port}
		if err := s.open(logger, hc); err != nil {
			errs = append(errs, err)
			continue
		}
		s.services[name] = hc
	}
	return errors.Join(errs...)
}

// open listens on every host for hc, or on none.
func (s *ServiceServer) open(logger klog.Logger, hc *serviceHC) error {
	handler := s.handler(hc.name)
	for _, host := range s.hosts {
		addr := net.JoinHostPort(host, strconv.Itoa(int(hc.port)))
		ln, err := s.listen("tcp", addr)
		if err != nil {
			hc.close(logger)
			return fmt.Errorf("healthcheck: service %s: health check port %d: listen on %s: %w", hc.name, hc.port, addr, err)
		}
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: readHeaderTimeout}
		hc.servers = append(hc.servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Health check server stopped", "service", hc.name, "address", addr)
			}
		}()
	}
	return nil
}

// close stops hc's servers.
func (hc *serviceHC) close(logger klog.Logger) {
	for _, srv := range hc.servers {
		if err := srv.Close(); err != nil {
			logger.Error(err, "Closing health check server", "service", hc.name, "port", hc.port)
		}
	}
	hc.servers = nil
}

// SyncEndpoints sets the number of local ready endpoints of each Service
// served; a served Service missing from counts gets 0, and counts of
// Services not served are ignored.
func (s *ServiceServer) SyncEndpoints(counts map[types.NamespacedName]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, hc := range s.services {
		hc.endpoints = counts[name]
	}
}

// Close stops every health check. SyncServices opens them again.
func (s *ServiceServer) Close(ctx context.Context) {
	logger := klog.FromContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, hc := range s.services {
		hc.close(logger)
		delete(s.services, name)
	}
}

// handler answers every path for the Service name, as upstream.
func (s *ServiceServer) handler(name types.NamespacedName) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.RLock()
		hc := s.services[name]
		count := 0
		if hc != nil {
			count = hc.endpoints
		}
		s.mu.RUnlock()
		if hc == nil {
			// Closed between accept and now. Upstream writes nothing (an
			// empty 200); 503 cannot send a load balancer to a node that
			// stopped serving the Service.
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		healthy := s.proxy.IsHealthy()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(count))
		if count != 0 && healthy {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = fmt.Fprint(w, serviceBody(name, count, healthy))
	})
}

// serviceBody is upstream's response text, tab-indented with no trailing
// newline. Names are quoted with %q, as upstream: for the DNS names
// Kubernetes allows that is the same as JSON quoting.
func serviceBody(name types.NamespacedName, count int, healthy bool) string {
	return fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}",
		name.Namespace, name.Name, count, healthy)
}

// sortedNames returns the keys of m in order, so listeners open, and
// errors come, in a stable order.
func sortedNames[V any](m map[types.NamespacedName]V) []types.NamespacedName {
	names := make([]types.NamespacedName, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b types.NamespacedName) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return names
}
