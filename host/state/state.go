// Package state builds the backends' desired State from the node's model
// and the module chain's decisions. It is pure and deterministic: the same
// ports and results give the same State, with no kernel, clock or
// randomness involved, so it is tested without root.
package state

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/host/model"
	"github.com/wasp-proxy/wasp/host/pipeline"
)

// Options are the node-wide settings copied into every State. Each list may
// hold addresses of both families: Build keeps those of the family it
// builds, so one Options serves both halves of a dual-stack node.
type Options struct {
	// NodePortAddresses are the node addresses NodePorts answer on.
	// Optional: none means every local address.
	NodePortAddresses []netip.Addr
	// NodeIPs are the node's own addresses, for the
	// loadBalancerSourceRanges exception (see backends.State.NodeIPs).
	// Optional.
	NodeIPs []netip.Addr
	// ServiceCIDRs are the cluster's Service IP ranges. Optional: none
	// means no drop rule for unallocated Service IPs.
	ServiceCIDRs []netip.Prefix
	// ClusterCIDRs are the pod ranges, for local-traffic detection.
	// Optional: none disables the detection.
	ClusterCIDRs []netip.Prefix
	// MasqueradeAll masquerades all traffic to ClusterIPs. Optional;
	// default false.
	MasqueradeAll bool
}

// Build returns the desired State of family for the service ports and their
// final decisions. ports and results are parallel (results[i] is the
// decision for ports[i]); Build panics if their lengths differ. Ports of the
// other family are skipped. Services are sorted by Key, the string of
// model.ServicePort.String(); if two ports share a key, the later one wins,
// as in model.Build.
//
// A port's Cluster and Local sets are resolved from Result.Endpoints by
// index and keep the decision's distinction between a nil set (not used by
// the traffic policy) and an empty one (used, no endpoint). Each endpoint
// gets its weight from Result.Weights. An endpoint of a set that has no
// weight entry, or a zero weight, is not programmed: the endpoint-selection
// stage left it out, so the set may come out empty (but never nil) even
// though the traffic-policy stage put endpoints in it. An index outside
// Result.Endpoints is skipped too; the pipeline has already rejected such
// output, so this only keeps Build from panicking on a hand-made Result.
//
// The State shares no memory with ports, results or opts.
func Build(family backends.Family, opts Options, ports []model.ServicePort, results []pipeline.Result) *backends.State {
	if len(ports) != len(results) {
		panic(fmt.Sprintf("state: %d ports but %d results", len(ports), len(results)))
	}
	s := &backends.State{
		Family:            family,
		NodePortAddresses: addrsOf(family, opts.NodePortAddresses),
		NodeIPs:           addrsOf(family, opts.NodeIPs),
		ServiceCIDRs:      prefixesOf(family, opts.ServiceCIDRs),
		ClusterCIDRs:      prefixesOf(family, opts.ClusterCIDRs),
		MasqueradeAll:     opts.MasqueradeAll,
	}
	kf, ok := KubernetesFamily(family)
	if !ok {
		return s
	}
	for i := range ports {
		if ports[i].Family != kf {
			continue
		}
		s.Services = append(s.Services, service(&ports[i], &results[i]))
	}
	// Stable, so that of two ports with one key the later stays last.
	slices.SortStableFunc(s.Services, func(a, b backends.Service) int { return strings.Compare(a.Key, b.Key) })
	s.Services = lastOfEachKey(s.Services)
	return s
}

// service builds one service port's desired dataplane.
func service(sp *model.ServicePort, r *pipeline.Result) backends.Service {
	return backends.Service{
		Key:                      sp.String(),
		Namespace:                sp.Namespace,
		Name:                     sp.Name,
		PortName:                 sp.PortName,
		Protocol:                 backends.Protocol(sp.Protocol.String()),
		ClusterIP:                sp.ClusterIP,
		Port:                     sp.Port,
		NodePort:                 sp.NodePort,
		ExternalIPs:              slices.Clone(sp.ExternalIPs),
		LoadBalancerVIPs:         slices.Clone(sp.LoadBalancerVIPs),
		LoadBalancerSourceRanges: slices.Clone(sp.LoadBalancerSourceRanges),
		AffinityTimeout:          uint32(max(sp.SessionAffinityTimeout, 0)),
		HealthCheckNodePort:      portOf(sp.HealthCheckNodePort),
		InternalPolicyLocal:      sp.InternalPolicyLocal,
		ExternalPolicyLocal:      sp.ExternalPolicyLocal,
		HasAnyEndpoints:          r.HasAnyEndpoints,
		Cluster:                  endpoints(r.Cluster, r),
		Local:                    endpoints(r.Local, r),
		Serving:                  serving(sp.Endpoints),
	}
}

// serving returns the sorted, distinct addresses of the serving endpoints;
// nil when none.
func serving(eps []abi.Endpoint) []netip.Addr {
	var out []netip.Addr
	for i := range eps {
		if eps[i].Serving {
			out = append(out, eps[i].Addr)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// endpoints resolves a set of indices into weighted endpoints, keeping nil
// for a nil set and a non-nil slice for an empty one.
func endpoints(set abi.Indices, r *pipeline.Result) []backends.Endpoint {
	if set == nil {
		return nil
	}
	out := make([]backends.Endpoint, 0, len(set))
	for _, i := range set {
		w := weight(r.Weights, i)
		if w == 0 || int(i) >= len(r.Endpoints) {
			continue
		}
		ep := &r.Endpoints[i]
		out = append(out, backends.Endpoint{Addr: ep.Addr, Port: ep.Port, Weight: w})
	}
	return out
}

// weight returns the weight of endpoint i, 0 when it has none. Weights are
// ascending by Index (abi.Decision), so a binary search finds it.
func weight(ws []abi.Weight, i uint32) uint32 {
	k, ok := slices.BinarySearchFunc(ws, i, func(w abi.Weight, i uint32) int {
		switch {
		case w.Index < i:
			return -1
		case w.Index > i:
			return 1
		}
		return 0
	})
	if !ok {
		return 0
	}
	return ws[k].Weight
}

// lastOfEachKey removes all but the last service of each run of equal keys
// from a sorted list.
func lastOfEachKey(svcs []backends.Service) []backends.Service {
	out := svcs[:0]
	for i := range svcs {
		if i+1 < len(svcs) && svcs[i+1].Key == svcs[i].Key {
			continue
		}
		out = append(out, svcs[i])
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// portOf converts a Kubernetes port number; one outside 1..65535 (which the
// apiserver never allows) means none.
func portOf(p int32) uint16 {
	if p <= 0 || p > math.MaxUint16 {
		return 0
	}
	return uint16(p)
}

// KubernetesFamily returns the Kubernetes name of a backend family.
func KubernetesFamily(f backends.Family) (v1.IPFamily, bool) {
	switch f {
	case backends.IPv4:
		return v1.IPv4Protocol, true
	case backends.IPv6:
		return v1.IPv6Protocol, true
	}
	return "", false
}

// isFamily reports whether a is a valid address of family f. An
// IPv4-mapped IPv6 address counts as IPv6, as it does on the wire.
func isFamily(f backends.Family, a netip.Addr) bool {
	switch f {
	case backends.IPv4:
		return a.Is4()
	case backends.IPv6:
		return a.Is6()
	}
	return false
}

// addrsOf returns the addresses of family f, in order; nil when none.
func addrsOf(f backends.Family, as []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range as {
		if isFamily(f, a) {
			out = append(out, a)
		}
	}
	return out
}

// prefixesOf returns the prefixes of family f, in order; nil when none.
func prefixesOf(f backends.Family, ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.IsValid() && isFamily(f, p.Addr()) {
			out = append(out, p)
		}
	}
	return out
}
