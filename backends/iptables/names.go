package iptables

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strings"

	"github.com/wasp-proxy/wasp/backends"
)

// Tables wasp writes to.
const (
	TableFilter = "filter"
	TableNAT    = "nat"
)

// Built-in chains wasp's chains are jumped to from.
const (
	chainPrerouting  = "PREROUTING"
	chainInput       = "INPUT"
	chainForward     = "FORWARD"
	chainOutput      = "OUTPUT"
	chainPostrouting = "POSTROUTING"
)

// Prefix starts the name of every chain wasp owns. Upstream kube-proxy's
// chains start with "KUBE-", so the two never share a chain and a node can
// run either, or move from one to the other, without one touching the
// other's rules.
const Prefix = "WASP-"

// The fixed chains: written in full by every restore.
const (
	// ChainServices (nat and filter): the dispatch on destination address,
	// protocol and port; the filter one rejects or drops ClusterIP traffic
	// of service ports without endpoints.
	ChainServices = Prefix + "SERVICES"
	// ChainNodePorts (nat and filter): NodePort dispatch; in filter, the
	// health-check node ports accepted.
	ChainNodePorts = Prefix + "NODEPORTS"
	// ChainExternalServices (filter): reject or drop of external traffic
	// without endpoints.
	ChainExternalServices = Prefix + "EXTERNAL-SERVICES"
	// ChainForward (filter): conntrack INVALID drop and the accepts of
	// forwarded service traffic.
	ChainForward = Prefix + "FORWARD"
	// ChainProxyFirewall (filter): the drop of load-balancer traffic that
	// its firewall chain did not let through.
	ChainProxyFirewall = Prefix + "PROXY-FIREWALL"
	// ChainFirewall (filter): the drop of martian traffic to 127.0.0.0/8,
	// with localhost NodePorts only.
	ChainFirewall = Prefix + "FIREWALL"
	// ChainPostrouting (nat): masquerade of marked connections.
	ChainPostrouting = Prefix + "POSTROUTING"
	// ChainMarkMasq (nat): sets the masquerade mark.
	ChainMarkMasq = Prefix + "MARK-MASQ"
	// ChainMasqOffCluster (nat): marks for masquerade what comes from
	// outside the cluster CIDRs, when there are more than one (a single
	// one is matched by "! -s" in place).
	ChainMasqOffCluster = Prefix + "MASQ-OFF-CLUSTER"
	// ChainCanary (nat and filter): an empty chain of every plan, as
	// upstream's KUBE-PROXY-CANARY, whose disappearance shows that the
	// tables were flushed and their chains deleted behind wasp's back
	// (a firewall reload). CheckDrift compares every chain, this one
	// among them.
	ChainCanary = Prefix + "PROXY-CANARY"
)

// Prefixes of the per-service-port chains of the nat table, followed by
// 16 characters of a hash (hash16).
const (
	prefixSVC = Prefix + "SVC-" // the Cluster endpoints
	prefixSVL = Prefix + "SVL-" // the Local endpoints
	prefixEXT = Prefix + "EXT-" // external traffic
	prefixFW  = Prefix + "FW-"  // load-balancer source ranges
	// prefixSEP names one endpoint of a service port: its client
	// affinity list (xt_recent's --name, at most 200 bytes), the name
	// upstream gives the endpoint's chain. wasp made such chains before
	// it wrote DNAT rules in the policy chains; a full sync deletes
	// those, as every chain of wasp's its plan lacks.
	prefixSEP = Prefix + "SEP-"
)

// The ipsets of hairpin traffic, one per family, of type
// hash:ip,port,ip: an entry (endpoint address, protocol:port, endpoint
// address) for every endpoint, matched "dst,dst,src" in
// ChainPostrouting, masquerades a connection DNATed to the endpoint
// that opened it, as upstream's ipvs mode's KUBE-LOOP-BACK set. Names
// are at most 31 bytes (IPSET_MAXNAMELEN, 32 with the terminating zero).
const (
	SetHairpin4 = Prefix + "HAIRPIN"
	SetHairpin6 = Prefix + "HAIRPIN6"
	// setType is the ipset type of the hairpin sets.
	setType = "hash:ip,port,ip"
	// setMaxElements is the most entries a hairpin set takes (ipset's
	// default of 65536 is less than the endpoints of a large cluster).
	setMaxElements = 1 << 20
)

// hairpinSet returns the name of family's hairpin set.
func hairpinSet(family backends.Family) string {
	if family == backends.IPv6 {
		return SetHairpin6
	}
	return SetHairpin4
}

// MaxChainName is the longest chain name iptables accepts (its
// XT_EXTENSION_MAXNAMELEN of 29 bytes, with the terminating zero).
const MaxChainName = 28

// hashLen is the number of base32 characters of a per-service chain's
// hash: 80 bits, the longest name prefixSVC+16 = 25 characters fits.
const hashLen = 16

// hash16 is the first 16 characters of the standard base32 of the SHA-256
// of s: upper-case letters and digits 2 to 7, never padding.
func hash16(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(sum[:])[:hashLen]
}

// portName is how the chains of a service port are hashed:
// "namespace/name:port", or "namespace/name" when the port has no name,
// and the protocol in lower case, as upstream, so that each of wasp's
// chain names is upstream's with the prefix changed.
func portName(s *backends.Service) string {
	n := s.Namespace + "/" + s.Name
	if s.PortName != "" {
		n += ":" + s.PortName
	}
	return n
}

// serviceChains are the names of a service port's chains.
type serviceChains struct {
	svc, svl, ext, fw string
	base              string // portName + protocol, the hash input of its endpoints' chains
}

func newServiceChains(s *backends.Service) serviceChains {
	base := portName(s) + s.Protocol.Lower()
	h := hash16(base)
	return serviceChains{svc: prefixSVC + h, svl: prefixSVL + h, ext: prefixEXT + h, fw: prefixFW + h, base: base}
}

// endpointName is the name of endpoint ep of the service port whose hash
// input is base ("ip:port", "[ip]:port" for IPv6, appended): the name of
// its affinity list, upstream's name of its chain.
func endpointName(base string, ep *backends.Endpoint) string {
	return prefixSEP + hash16(base+netip.AddrPortFrom(ep.Addr, ep.Port).String())
}

// isServiceChain reports whether name is a per-service-port chain (or an
// endpoint chain of the earlier layout).
func isServiceChain(name string) bool {
	for _, p := range []string{prefixSVC, prefixSVL, prefixEXT, prefixFW, prefixSEP} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
