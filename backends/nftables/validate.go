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
	v.addrs("nodeIPs", s.NodeIPs)
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

// Field names are built only for a problem: a State has 100k addresses
// at scale, and Sync validates each one.

func (v *validator) addr(field string, a netip.Addr) {
	v.addrAt(field, -1, "", a)
}

// addrAt checks a; its field is field, or field[i]suffix when i >= 0.
func (v *validator) addrAt(field string, i int, suffix string, a netip.Addr) {
	if a.IsValid() && a.Is4() == (v.family == backends.IPv4) && !a.Is4In6() {
		return
	}
	if i >= 0 {
		field = fmt.Sprintf("%s[%d]%s", field, i, suffix)
	}
	if !a.IsValid() {
		v.addf(field, "missing")
		return
	}
	v.addf(field, "%s is not %s", a, familyName(v.family))
}

func (v *validator) addrs(field string, as []netip.Addr) {
	for i, a := range as {
		v.addrAt(field, i, "", a)
	}
}

func (v *validator) prefixes(field string, ps []netip.Prefix) {
	for i, p := range ps {
		if !p.IsValid() {
			v.addf(fmt.Sprintf("%s[%d]", field, i), "invalid prefix %s", p)
			continue
		}
		v.addrAt(field, i, "", p.Addr())
	}
}

func (v *validator) endpoints(field string, eps []backends.Endpoint) {
	for i, ep := range eps {
		v.addrAt(field, i, ".addr", ep.Addr)
		if ep.Port == 0 {
			v.addf(fmt.Sprintf("%s[%d].port", field, i), "0")
		}
		if ep.Weight == 0 {
			v.addf(fmt.Sprintf("%s[%d].weight", field, i), "0, want >= 1")
		}
	}
}
