package nftables

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/wasp-proxy/wasp/backends"
)

// validate checks that s can be programmed in a table of family: every
// address and prefix valid and of the family, service ports sorted by
// unique keys with a known protocol and a port, endpoints with a port and
// a weight. The error wraps ErrInvalidState and names every problem.
func validate(family backends.Family, s *backends.State) error {
	if s == nil {
		return fmt.Errorf("nftables: %w: nil state", ErrInvalidState)
	}
	v := validator{family: family}
	if s.Family != family {
		v.addf("family", "%s, want %s", familyName(s.Family), familyName(family))
	}
	v.addrs("nodePortAddresses", s.NodePortAddresses)
	v.prefixes("serviceCIDRs", s.ServiceCIDRs)
	v.prefixes("clusterCIDRs", s.ClusterCIDRs)
	for i := range s.Services {
		svc := &s.Services[i]
		v.path = fmt.Sprintf("services[%d] %q: ", i, svc.Key)
		if i > 0 && s.Services[i-1].Key >= svc.Key {
			v.addf("key", "not after %q", s.Services[i-1].Key)
		}
		if svc.Namespace == "" || svc.Name == "" {
			v.addf("name", "namespace %q, name %q: both required", svc.Namespace, svc.Name)
		}
		if protoNumber(svc.Protocol) == 0 {
			v.addf("protocol", "%q, want TCP, UDP or SCTP", svc.Protocol)
		}
		if svc.Port == 0 {
			v.addf("port", "0")
		}
		v.addr("clusterIP", svc.ClusterIP)
		v.addrs("externalIPs", svc.ExternalIPs)
		v.addrs("loadBalancerVIPs", svc.LoadBalancerVIPs)
		v.prefixes("loadBalancerSourceRanges", svc.LoadBalancerSourceRanges)
		v.endpoints("cluster", svc.Cluster)
		v.endpoints("local", svc.Local)
	}
	if len(v.problems) > 0 {
		return fmt.Errorf("nftables: %w of %s: %w", ErrInvalidState, familyName(family), errors.Join(v.problems...))
	}
	return nil
}

type validator struct {
	family   backends.Family
	path     string
	problems []error
}

func (v *validator) addf(field, format string, args ...any) {
	v.problems = append(v.problems, fmt.Errorf("%s%s: %s", v.path, field, fmt.Sprintf(format, args...)))
}

func (v *validator) addr(field string, a netip.Addr) {
	switch {
	case !a.IsValid():
		v.addf(field, "missing")
	case a.Is4() != (v.family == backends.IPv4) || a.Is4In6():
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
		if !p.IsValid() {
			v.addf(f, "invalid prefix %s", p)
			continue
		}
		v.addr(f, p.Addr())
	}
}

func (v *validator) endpoints(field string, eps []backends.Endpoint) {
	for i, ep := range eps {
		f := fmt.Sprintf("%s[%d]", field, i)
		v.addr(f+".addr", ep.Addr)
		if ep.Port == 0 {
			v.addf(f+".port", "0")
		}
		if ep.Weight == 0 {
			v.addf(f+".weight", "0, want >= 1")
		}
	}
}
