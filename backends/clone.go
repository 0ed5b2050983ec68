package backends

import "slices"

// Clone returns a deep copy of s that shares no memory with it, keeping
// nil slices nil and empty ones empty (the State gives the difference a
// meaning for endpoint sets). A nil s gives nil.
func (s *State) Clone() *State {
	if s == nil {
		return nil
	}
	c := *s
	c.NodePortAddresses = cloneSlice(s.NodePortAddresses)
	c.NodeIPs = cloneSlice(s.NodeIPs)
	c.ServiceCIDRs = cloneSlice(s.ServiceCIDRs)
	c.ClusterCIDRs = cloneSlice(s.ClusterCIDRs)
	if s.Services != nil {
		c.Services = make([]Service, len(s.Services))
		for i := range s.Services {
			c.Services[i] = s.Services[i].Clone()
		}
	}
	return &c
}

// Equal reports whether s and o hold the same fields, list elements in the
// same order, service ports compared with Service.Equal. Two nil States
// are equal.
func (s *State) Equal(o *State) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.Family == o.Family &&
		slices.Equal(s.NodePortAddresses, o.NodePortAddresses) &&
		slices.Equal(s.NodeIPs, o.NodeIPs) &&
		slices.Equal(s.ServiceCIDRs, o.ServiceCIDRs) &&
		slices.Equal(s.ClusterCIDRs, o.ClusterCIDRs) &&
		s.MasqueradeAll == o.MasqueradeAll &&
		slices.EqualFunc(s.Services, o.Services, func(a, b Service) bool { return a.Equal(&b) })
}

// Clone returns a deep copy of the service port, sharing no memory with
// it; nil slices stay nil and empty ones empty.
func (s *Service) Clone() Service {
	c := *s
	c.ExternalIPs = cloneSlice(s.ExternalIPs)
	c.LoadBalancerVIPs = cloneSlice(s.LoadBalancerVIPs)
	c.LoadBalancerSourceRanges = cloneSlice(s.LoadBalancerSourceRanges)
	c.Cluster = cloneSlice(s.Cluster)
	c.Local = cloneSlice(s.Local)
	c.Serving = cloneSlice(s.Serving)
	return c
}

// Equal reports whether s and o hold the same fields, list elements in the
// same order. A nil endpoint set differs from an empty one (unused versus
// used with no endpoint); for the other lists nil and empty are alike.
func (s *Service) Equal(o *Service) bool {
	return s.Key == o.Key && s.Namespace == o.Namespace && s.Name == o.Name && s.PortName == o.PortName &&
		s.Protocol == o.Protocol && s.ClusterIP == o.ClusterIP && s.Port == o.Port && s.NodePort == o.NodePort &&
		slices.Equal(s.ExternalIPs, o.ExternalIPs) && slices.Equal(s.LoadBalancerVIPs, o.LoadBalancerVIPs) &&
		slices.Equal(s.LoadBalancerSourceRanges, o.LoadBalancerSourceRanges) &&
		s.AffinityTimeout == o.AffinityTimeout && s.HealthCheckNodePort == o.HealthCheckNodePort &&
		s.InternalPolicyLocal == o.InternalPolicyLocal && s.ExternalPolicyLocal == o.ExternalPolicyLocal &&
		s.HasAnyEndpoints == o.HasAnyEndpoints &&
		slices.Equal(s.Cluster, o.Cluster) && (s.Cluster == nil) == (o.Cluster == nil) &&
		slices.Equal(s.Local, o.Local) && (s.Local == nil) == (o.Local == nil) &&
		slices.Equal(s.Serving, o.Serving)
}

// cloneSlice is slices.Clone, spelled out so that the nil/empty
// distinction is visibly kept.
func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}
