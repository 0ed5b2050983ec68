package fake

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/wasp-proxy/wasp/backends"
)

// Validate checks s against the backends contract and returns an error
// wrapping ErrInvalidState that names every problem with its field path
// ("services[2] \"demo/web:http/TCP/IPv4\": cluster[0].weight: 0, want >= 1"),
// or nil. It checks that:
//   - s is not nil and its Family is IPv4 or IPv6;
//   - every address and prefix is valid and of s.Family;
//   - services are sorted by Key with unique, non-empty keys, and have a
//     namespace, a name, a protocol of TCP, UDP or SCTP, a ClusterIP and a
//     non-zero port;
//   - every endpoint has an address of s.Family, a non-zero port, a weight
//     of at least 1, and appears once in its set.
//
// It does not check that HasAnyEndpoints agrees with the sets: the module
// chain decides both, and the dataplane rejects on HasAnyEndpoints alone.
func Validate(s *backends.State) error {
	if s == nil {
		return fmt.Errorf("%w: nil state", ErrInvalidState)
	}
	v := validator{family: s.Family}
	if s.Family != backends.IPv4 && s.Family != backends.IPv6 {
		v.addf("family", "%d, want 4 or 6", s.Family)
	}
	v.addrs("nodePortAddresses", s.NodePortAddresses)
	v.prefixes("serviceCIDRs", s.ServiceCIDRs)
	v.prefixes("clusterCIDRs", s.ClusterCIDRs)
	for i := range s.Services {
		svc := &s.Services[i]
		v.path = fmt.Sprintf("services[%d] %q: ", i, svc.Key)
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
		return fmt.Errorf("%w of %s: %w", ErrInvalidState, familyName(s.Family), errors.Join(v.problems...))
	}
	return nil
}

// validator collects problems; path prefixes each field.
type validator struct {
	family   backends.Family
	path     string
	problems []error
}

func (v *validator) addf(field, format string, args ...any) {
	v.problems = append(v.problems, fmt.Errorf("%s%s: %s", v.path, field, fmt.Sprintf(format, args...)))
}

func (v *validator) service(svc *backends.Service) {
	if svc.Namespace == "" {
		v.addf("namespace", "empty")
	}
	if svc.Name == "" {
		v.addf("name", "empty")
	}
	switch svc.Protocol {
	case "TCP", "UDP", "SCTP":
	default:
		v.addf("protocol", "%q, want TCP, UDP or SCTP", svc.Protocol)
	}
	v.addr("clusterIP", svc.ClusterIP)
	if svc.Port == 0 {
		v.addf("port", "0")
	}
	v.addrs("externalIPs", svc.ExternalIPs)
	v.addrs("loadBalancerVIPs", svc.LoadBalancerVIPs)
	v.prefixes("loadBalancerSourceRanges", svc.LoadBalancerSourceRanges)
	v.endpoints("cluster", svc.Cluster)
	v.endpoints("local", svc.Local)
}

func (v *validator) endpoints(field string, eps []backends.Endpoint) {
	seen := map[netip.AddrPort]int{}
	for i, ep := range eps {
		f := fmt.Sprintf("%s[%d]", field, i)
		v.addr(f+".addr", ep.Addr)
		if ep.Port == 0 {
			v.addf(f+".port", "0")
		}
		if ep.Weight < 1 {
			v.addf(f+".weight", "%d, want >= 1", ep.Weight)
		}
		ap := netip.AddrPortFrom(ep.Addr, ep.Port)
		if j, dup := seen[ap]; dup {
			v.addf(f, "%s duplicates %s[%d]", ap, field, j)
		} else {
			seen[ap] = i
		}
	}
}

func (v *validator) addr(field string, a netip.Addr) {
	switch {
	case !a.IsValid():
		v.addf(field, "missing")
	case !isFamily(v.family, a):
		v.addf(field, "%s is not %s", a, familyName(v.family))
	}
}

func (v *validator) addrs(field string, as []netip.Addr) {
	for i, a := range as {
		v.addr(fmt.Sprintf("%s[%d]", field, i), a)
	}
}

func (v *validator) prefixes(field string, ps []netip.Prefix) {
	for i, p := range ps {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case !p.IsValid():
			v.addf(f, "invalid prefix %s", p)
		case !isFamily(v.family, p.Addr()):
			v.addf(f, "%s is not %s", p, familyName(v.family))
		}
	}
}
