package backends

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrInvalidState is wrapped by the error Validate returns, and by a
// backend's Sync error for a State that breaks the contract.
var ErrInvalidState = errors.New("invalid state")

// Validate checks s against the contract every backend relies on and
// returns an error wrapping ErrInvalidState that names every problem with
// its field path ("services[2] \"demo/web:http/TCP/IPv4\":
// cluster[0].weight: 0, want >= 1"), or nil. It checks that:
//   - s is not nil and its Family is IPv4 or IPv6;
//   - every address and prefix is valid and of s.Family (an IPv4-mapped
//     IPv6 address is neither);
//   - services are sorted by Key with unique, non-empty keys, and have a
//     namespace, a name, a protocol of TCP, UDP or SCTP, a ClusterIP and a
//     non-zero port;
//   - every endpoint has an address of s.Family, a non-zero port, a weight
//     of at least 1, and appears once in its set.
//
// It does not check that HasAnyEndpoints agrees with the sets: the module
// chain decides both, and a dataplane rejects on HasAnyEndpoints alone.
//
// Backends call it on every Sync, over 100k addresses at scale, so field
// paths are only formatted for a problem.
func Validate(s *State) error {
	if s == nil {
		return fmt.Errorf("%w: nil state", ErrInvalidState)
	}
	v := validator{family: s.Family, svc: -1}
	if s.Family != IPv4 && s.Family != IPv6 {
		v.addf("family", "%d, want 4 or 6", s.Family)
	}
	v.addrs("nodePortAddresses", s.NodePortAddresses)
	v.addrs("nodeIPs", s.NodeIPs)
	v.prefixes("serviceCIDRs", s.ServiceCIDRs)
	v.prefixes("clusterCIDRs", s.ClusterCIDRs)
	for i := range s.Services {
		svc := &s.Services[i]
		v.svc, v.key = i, svc.Key
		if svc.Key == "" {
			v.addf("key", "empty")
		}
		if i > 0 {
			switch prev := s.Services[i-1].Key; {
			case prev == svc.Key:
				v.addf("key", "duplicate of services[%d]", i-1)
			case prev > svc.Key:
				v.addf("key", "not sorted: after %q", prev)
			}
		}
		v.service(svc)
	}
	if len(v.problems) > 0 {
		return fmt.Errorf("%w of %s: %w", ErrInvalidState, s.Family.String(), errors.Join(v.problems...))
	}
	return nil
}

// validator collects problems. Fields of a service are prefixed with its
// index and key when svc >= 0.
type validator struct {
	family   Family
	svc      int
	key      string
	problems []error
}

func (v *validator) addf(field, format string, args ...any) {
	prefix := ""
	if v.svc >= 0 {
		prefix = fmt.Sprintf("services[%d] %q: ", v.svc, v.key)
	}
	v.problems = append(v.problems, fmt.Errorf("%s%s: %s", prefix, field, fmt.Sprintf(format, args...)))
}

func (v *validator) service(svc *Service) {
	if svc.Namespace == "" {
		v.addf("namespace", "empty")
	}
	if svc.Name == "" {
		v.addf("name", "empty")
	}
	if !svc.Protocol.Valid() {
		v.addf("protocol", "%q, want TCP, UDP or SCTP", svc.Protocol)
	}
	v.addrAt("clusterIP", -1, "", svc.ClusterIP)
	if svc.Port == 0 {
		v.addf("port", "0")
	}
	v.addrs("externalIPs", svc.ExternalIPs)
	v.addrs("loadBalancerVIPs", svc.LoadBalancerVIPs)
	v.prefixes("loadBalancerSourceRanges", svc.LoadBalancerSourceRanges)
	v.endpoints("cluster", svc.Cluster)
	v.endpoints("local", svc.Local)
	v.addrs("serving", svc.Serving)
}

func (v *validator) endpoints(field string, eps []Endpoint) {
	for i, ep := range eps {
		v.addrAt(field, i, ".addr", ep.Addr)
		if ep.Port == 0 {
			v.addf(fmt.Sprintf("%s[%d].port", field, i), "0")
		}
		if ep.Weight < 1 {
			v.addf(fmt.Sprintf("%s[%d].weight", field, i), "%d, want >= 1", ep.Weight)
		}
	}
	// Sets are small; a map pays off only for large ones.
	if len(eps) <= 16 {
		for i := 1; i < len(eps); i++ {
			for j := range i {
				if eps[i].Addr == eps[j].Addr && eps[i].Port == eps[j].Port {
					v.duplicate(field, eps, i, j)
					break
				}
			}
		}
		return
	}
	seen := make(map[netip.AddrPort]int, len(eps))
	for i, ep := range eps {
		ap := netip.AddrPortFrom(ep.Addr, ep.Port)
		if j, dup := seen[ap]; dup {
			v.duplicate(field, eps, i, j)
			continue
		}
		seen[ap] = i
	}
}

func (v *validator) duplicate(field string, eps []Endpoint, i, j int) {
	v.addf(fmt.Sprintf("%s[%d]", field, i), "%s duplicates %s[%d]", netip.AddrPortFrom(eps[i].Addr, eps[i].Port), field, j)
}

// addrAt checks a; its field is field, or field[i]suffix when i >= 0.
func (v *validator) addrAt(field string, i int, suffix string, a netip.Addr) {
	if a.IsValid() && !a.Is4In6() && a.Is4() == (v.family == IPv4) {
		return
	}
	if i >= 0 {
		field = fmt.Sprintf("%s[%d]%s", field, i, suffix)
	}
	if !a.IsValid() {
		v.addf(field, "missing")
		return
	}
	v.addf(field, "%s is not %s", a, v.family.String())
}

func (v *validator) addrs(field string, as []netip.Addr) {
	for i, a := range as {
		v.addrAt(field, i, "", a)
	}
}

func (v *validator) prefixes(field string, ps []netip.Prefix) {
	for i, p := range ps {
		switch a := p.Addr(); {
		case !p.IsValid():
			v.addf(fmt.Sprintf("%s[%d]", field, i), "invalid prefix %s", p)
		case a.Is4In6() || a.Is4() != (v.family == IPv4):
			v.addf(fmt.Sprintf("%s[%d]", field, i), "%s is not %s", p, v.family.String())
		}
	}
}
