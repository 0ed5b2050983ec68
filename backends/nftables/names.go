package nftables

import (
	"cmp"
	"crypto/sha256"
	"encoding/base32"
	"strings"
	"sync"

	"github.com/wasp-proxy/wasp/backends"
)

// DefaultTable is the table each family's ruleset lives in, "ip wasp" and
// "ip6 wasp", unless Opts.Table names another.
const DefaultTable = "wasp"

// Base chains, named "<type>-<hook>" as upstream's. They are the only
// chains attached to netfilter hooks; every other chain is reached from
// them.
const (
	filterPreroutingChain     = "filter-prerouting"
	filterInputChain          = "filter-input"
	filterForwardChain        = "filter-forward"
	filterOutputChain         = "filter-output"
	filterOutputPostDNATChain = "filter-output-post-dnat"
	natPreroutingChain        = "nat-prerouting"
	natOutputChain            = "nat-output"
	natPostroutingChain       = "nat-postrouting"
)

// Service dispatch: the services chain looks a packet up in the two verdict
// maps; nodeport-ips restricts NodePorts to State.NodePortAddresses.
const (
	servicesChain       = "services"
	serviceIPsMap       = "service-ips"
	serviceNodePortsMap = "service-nodeports"
	nodePortIPsSet      = "nodeport-ips"
)

// Services with no usable endpoint: filter chains look new connections up
// in these maps, whose verdicts are "goto reject-chain" or "drop".
const (
	serviceEndpointsCheckChain  = "service-endpoints-check"
	nodePortEndpointsCheckChain = "nodeport-endpoints-check"
	noEndpointServicesMap       = "no-endpoint-services"
	noEndpointNodePortsMap      = "no-endpoint-nodeports"
	rejectChain                 = "reject-chain"
)

// Traffic to undefined ports of ClusterIPs (rejected) and to unallocated
// addresses of the Service CIDRs (dropped).
const (
	clusterIPsCheckChain = "cluster-ips-check"
	clusterIPsSet        = "cluster-ips"
)

// loadBalancerSourceRanges.
const (
	firewallCheckChain = "firewall-check"
	firewallIPsMap     = "firewall-ips"
)

// Masquerading: mark-for-masquerade sets the mark bit, masquerading (in
// postrouting) masquerades marked packets.
const (
	markMasqChain     = "mark-for-masquerade"
	masqueradingChain = "masquerading"
)

// Endpoint selection. A policy chain whose endpoints, weights reduced by
// their gcd, add up to W buckets (W >= 1, within maxBuckets or the number
// of endpoints), and whose Service has no affinity, ends with "goto
// bucket-classes-<kind>" (kind "cluster" or "local", after its prefix).
// That chain looks the service entry up in the map of the same name,
// whose elements "addr . proto . port : goto
// buckets-<kind>-<W>" send it to the bucket chain of its kind and W
// (and in the same map with "-nodeports" appended, "proto . port : goto
// …" for the NodePort). That chain, shared by every policy chain of its
// kind and W, DNATs to the endpoint a random bucket of the entry maps to
// in two data maps of the chain's name, the second with "-nodeports":
//
//	dnat ip to ip daddr . meta l4proto . th dport . numgen random mod W map @buckets-cluster-W
//	dnat ip to meta l4proto . th dport . numgen random mod W map @buckets-cluster-W-nodeports
//
// whose elements are "addr . proto . port . bucket : endpoint-addr .
// endpoint-port". The hairpin masquerade of those endpoints is one rule
// of the masquerading chain, over the set hairpin-endpoints ("EP . EP").
// So a change of endpoints, even of their number, changes elements only:
// no rule, and the kernel skips the commit-time validation of the whole
// chain graph that any new rule costs (see doc.go).
const (
	bucketChainPrefix   = "buckets-"
	bucketClassesPrefix = "bucket-classes-"
	bucketNodePorts     = "-nodeports"
	hairpinSet          = "hairpin-endpoints"
	// presetBuckets: the bucket chains and maps of W = 1..presetBuckets
	// always exist, of both kinds, so that a service port whose number
	// of endpoints changes within that range adds no chain nor rule.
	presetBuckets = 16
	// maxBuckets bounds W for unequal weights: past it (and past the
	// number of endpoints, which equal weights give), the policy chain
	// keeps its own "numgen random mod W vmap { lo-hi : goto … }" over
	// endpoint chains, as it does with affinity.
	maxBuckets = 1024
)

// Simple service ports: a service port whose only frontend is its
// ClusterIP, whose internal route forwards, without affinity, and whose
// endpoints make W = 1..presetBuckets buckets has no chain and no verdict
// element of its own. Its entry "addr . proto . port" is an element of the
// set simple-services, which the services chain looks up to go to the
// chain simple-classes, and of the set simple-<kind>-<W> of its bucket
// class, which a rule of that chain looks up to go to buckets-<kind>-<W>:
//
//	ip daddr . meta l4proto . th dport @simple-services goto simple-classes
//	ip daddr . meta l4proto . th dport @simple-cluster-3 goto buckets-cluster-3
//
// Those sets and rules exist for every kind and W, so the arrival,
// departure or endpoint change of a simple service port adds and deletes
// data elements only, and the kernel skips the validation of the chain
// graph at commit (see doc.go). The masquerade rule of its policy chain
// is one rule of simple-classes, for all of them: what it tests, the
// source address, is the same for every ClusterIP (the State's
// InternalMasquerade).
const (
	simpleServicesSet  = "simple-services"
	simpleClassesChain = "simple-classes"
	simpleSetPrefix    = "simple-"
)

// bucketClassesMap is the name of the bucket-classes map of a kind.
func bucketClassesMap(local bool) string {
	if local {
		return bucketClassesPrefix + "local"
	}
	return bucketClassesPrefix + "cluster"
}

// bucketClass is the kind and size of a bucket chain.
type bucketClass struct {
	local bool
	w     uint32
}

// name is the bucket chain's name and that of its address map. Every
// policy chain and bucket element refers to one: the names are made once
// and shared.
func (c bucketClass) name() string {
	if n, ok := bucketNames.Load(c); ok {
		return n.(string)
	}
	kind := "cluster-"
	if c.local {
		kind = "local-"
	}
	n, _ := bucketNames.LoadOrStore(c, bucketChainPrefix+kind+itoa(uint64(c.w)))
	return n.(string)
}

// bucketNames caches bucketClass.name; it holds at most 2 × maxBuckets.
var bucketNames sync.Map

// simpleSet is the name of the set of simple service entries of class c,
// "simple-<kind>-<W>", for W within presetBuckets.
func (c bucketClass) simpleSet() string {
	return simpleSetNames[c.index()]
}

// index is c's position in simpleSetNames and in the rules of
// simple-classes: the cluster classes by W, then the local ones.
func (c bucketClass) index() int {
	i := int(c.w) - 1
	if c.local {
		i += presetBuckets
	}
	return i
}

// simpleClasses are the bucket classes of simple service ports, in the
// order of their rules in simple-classes: the cluster kind first (the
// default traffic policy), small W first (few endpoints are the common
// case), so that a packet tests the fewest sets.
var simpleClasses = func() []bucketClass {
	var out []bucketClass
	for _, local := range []bool{false, true} {
		for w := uint32(1); w <= presetBuckets; w++ {
			out = append(out, bucketClass{local: local, w: w})
		}
	}
	return out
}()

var simpleSetNames = func() []string {
	out := make([]string, len(simpleClasses))
	for i, c := range simpleClasses {
		kind := "cluster-"
		if c.local {
			kind = "local-"
		}
		out[i] = simpleSetPrefix + kind + itoa(uint64(c.w))
	}
	return out
}()

func (c bucketClass) compare(o bucketClass) int {
	if c.local != o.local {
		if c.local {
			return 1
		}
		return -1
	}
	return cmp.Compare(c.w, o.w)
}

// Per-service-port and per-endpoint object name prefixes. The rest of the
// name is "<hash>-<namespace>/<name>/<protocol>/<port name>" for a service
// port, with "__<ip>/<port>" appended for an endpoint.
const (
	clusterChainPrefix  = "service-"  // Cluster traffic policy: spreads over Cluster endpoints
	localChainPrefix    = "local-"    // Local traffic policy: spreads over Local endpoints
	externalChainPrefix = "external-" // NodePort, externalIPs and LB VIP traffic
	firewallChainPrefix = "firewall-" // loadBalancerSourceRanges of the LB VIPs
	endpointChainPrefix = "endpoint-" // masquerade hairpin, record affinity, DNAT
	affinitySetPrefix   = "affinity-" // ClientIP affinity: recent clients of an endpoint
)

// Name length limits.
const (
	// nameMax is the longest table, chain or set name the kernel accepts:
	// NFT_NAME_MAXLEN (256) counts the terminating NUL.
	nameMax = 256 - 1
	// prefixMax is the longest per-service prefix.
	prefixMax = max(len(clusterChainPrefix), len(localChainPrefix), len(externalChainPrefix),
		len(firewallChainPrefix), len(endpointChainPrefix), len(affinitySetPrefix))
	// hashLen is how many base32 characters of the SHA-256 of a name lead
	// it: they keep a truncated name unique and tell apart names that
	// differ in one digit.
	hashLen = 8
	// baseMax is the longest name after its prefix. A service port's
	// base is at most 8+1+63+1+63+1+4+1+63 = 205 characters (DNS labels,
	// protocol); an endpoint's adds 2+39+1+5 = 47 for an IPv6 address and
	// port, so only an endpoint name can reach it, and is then cut with
	// "...".
	baseMax = nameMax - prefixMax
)

// serviceNames are the names of one service port's objects.
type serviceNames struct {
	base                               string // "<hash>-ns/name/proto/port"
	cluster, local, external, firewall string
}

func newServiceNames(svc *backends.Service) serviceNames {
	base := hashed(svc.Namespace + "/" + svc.Name + "/" + svc.Protocol.Lower() + "/" + svc.PortName)
	return serviceNames{
		base:     base,
		cluster:  clusterChainPrefix + base,
		local:    localChainPrefix + base,
		external: externalChainPrefix + base,
		firewall: firewallChainPrefix + base,
	}
}

// policy returns the policy chain a route forwards to: the local or the
// cluster one.
func (n *serviceNames) policy(r backends.Route) string {
	if r.Local {
		return n.local
	}
	return n.cluster
}

// endpointBase returns the name base of an endpoint of svc: upstream's
// "<hash>-ns/name/proto/port__ip/port", IPv6 colons turned into dots
// (colons are not allowed in names).
func endpointBase(svc *backends.Service, ep *backends.Endpoint) string {
	ip := strings.ReplaceAll(ep.Addr.String(), ":", ".")
	return hashed(svc.Namespace + "/" + svc.Name + "/" + svc.Protocol.Lower() + "/" + svc.PortName +
		"__" + ip + "/" + itoa(uint64(ep.Port)))
}

// hashed prefixes name with the first hashLen base32 characters of its
// SHA-256 and cuts the result to baseMax characters.
func hashed(name string) string {
	sum := sha256.Sum256([]byte(name))
	var enc [56]byte // base32 of the 32-byte sum, padded
	base32.StdEncoding.Encode(enc[:], sum[:])
	s := string(enc[:hashLen]) + "-" + name
	if len(s) > baseMax {
		s = s[:baseMax-3] + "..."
	}
	return s
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
