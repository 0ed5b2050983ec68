// Package backends is the contract between wasp's sync loop and the code
// that programs a node's kernel: the desired State of every service port,
// and the small Backend interface each dataplane (nftables, iptables, ipvs,
// Windows HNS) implements. It is pure data and imports no kernel code;
// cmd/wasp wires a concrete backend in.
//
// It also owns the decisions every backend makes the same way, as pure
// methods: the route of internal and external traffic
// (Service.InternalRoute, ExternalRoute), the frontends a service port
// answers on (Service.Frontends, State.NodePortAddrs), the sources its
// load-balancer VIPs allow (Service.FirewallSources), what is masqueraded
// (State.InternalMasquerade, Service.ExternalMasquerade), the endpoints'
// weights in their smallest proportion (NormalizeWeights), the protocol's
// number (Protocol), and Clone and Equal. A backend expresses them; it does
// not derive them again.
package backends

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
)

// ErrHousekeeping is wrapped by a Sync error when the dataplane was
// programmed but work after it failed, such as deleting stale conntrack
// entries. The sync loop logs and counts such an error but does not treat
// the dataplane as failed: no full resync is forced, and the family counts
// as updated for health. The work is retried by the next Sync.
var ErrHousekeeping = errors.New("dataplane programmed but housekeeping failed")

// Backend programs a node's dataplane from a desired State. Sync is
// idempotent: calling it again with the same State changes nothing.
type Backend interface {
	// Sync makes the dataplane match s, and returns what it did (also
	// with an error: what it was doing when it failed). On error the
	// previous dataplane stays in place as far as the backend can
	// ensure; the caller retries with a full resync. s and everything
	// it points to may be shared with the caller and with earlier
	// States: a backend may keep it (to diff the next one against) but
	// must never modify it. After Close, Sync returns an error wrapping
	// ErrClosed and changes nothing.
	Sync(ctx context.Context, s *State) (SyncResult, error)
	// Cleanup removes everything the backend ever programmed. It is
	// idempotent: a second Cleanup, or one before any Sync, finds
	// nothing to remove and returns nil. After Close it returns an error
	// wrapping ErrClosed and changes nothing: a new backend cleans up.
	Cleanup(ctx context.Context) error
	// Close releases the backend's resources, leaving the dataplane as is.
	// A second Close returns nil.
	Close() error
}

// SyncResult is what one Sync did, as far as its backend says, for
// metrics: the sync loop hands it on with the Sync's error
// (proxy.FamilySync). It travels with the call, so a backend wrapped in
// another (the conntrack cleaner) reports it as well. The zero value says
// nothing.
type SyncResult struct {
	// Kind is whether the Sync rewrote the whole dataplane or only what
	// changed, also when it failed; SyncKindUnknown: the backend does
	// not say.
	Kind SyncKind
	// Objects are, after a Sync that succeeded, the objects the backend
	// owns, by the backend's grouping (iptables: rules, by table "filter"
	// and "nat"); nil: not counted.
	Objects map[string]int
	// Written are the objects the Sync wrote, by the same grouping; nil:
	// Objects after a full Sync (which writes them all), else not
	// counted.
	Written map[string]int
	// Failure is the kind of failure of a Sync that returned an error.
	Failure SyncFailure
}

// SyncKind is the kind of a Sync, for SyncResult.Kind.
type SyncKind uint8

const (
	SyncKindUnknown SyncKind = iota // the backend does not say
	SyncFull                        // the whole dataplane rewritten or compared
	SyncPartial                     // only what changed written
)

// SyncFailure is the kind of a Sync's failure, for SyncResult.Failure.
type SyncFailure uint8

const (
	// FailureOther: no failure, or one of no kind the backend names.
	FailureOther SyncFailure = iota
	// FailureApply: the kernel refused the Sync's changes as a whole
	// (iptables-restore failed); the dataplane kept its previous state.
	FailureApply
)

// Family is an IP family.
type Family uint8

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// String returns "ipv4", "ipv6" or "family(N)", the spelling of dumps and
// errors (nftables' own: "ip" and "ip6" tables aside).
func (f Family) String() string {
	switch f {
	case IPv4:
		return "ipv4"
	case IPv6:
		return "ipv6"
	}
	return "family(" + strconv.Itoa(int(f)) + ")"
}

// State is the complete desired dataplane of one IP family on a node.
type State struct {
	Family Family
	// NodePortAddresses are the node addresses NodePorts answer on; empty
	// means every local address.
	NodePortAddresses []netip.Addr
	// NodeIPs are the node's own addresses of the family. When one of
	// them is inside a Service's LoadBalancerSourceRanges, the Service's
	// load-balancer VIPs are allowed as sources too (traffic from the
	// node to a VIP bound to it loops back with the VIP as source), as
	// upstream does. Optional: empty means no such exception.
	NodeIPs []netip.Addr
	// ServiceCIDRs are the cluster's Service IP ranges: traffic to an
	// unallocated address inside them is dropped.
	ServiceCIDRs []netip.Prefix
	// ClusterCIDRs are the pod ranges, for local-traffic detection; empty
	// disables it.
	ClusterCIDRs []netip.Prefix
	// MasqueradeAll masquerades all traffic to ClusterIPs.
	MasqueradeAll bool
	// Services are the service ports, sorted by Key.
	Services []Service
}

// Service is one service port's desired dataplane.
type Service struct {
	// Key identifies the service port: "namespace/name:port/PROTO/family".
	Key       string
	Namespace string
	Name      string
	PortName  string
	Protocol  Protocol

	ClusterIP                netip.Addr
	Port                     uint16
	NodePort                 uint16 // 0: none
	ExternalIPs              []netip.Addr
	LoadBalancerVIPs         []netip.Addr
	LoadBalancerSourceRanges []netip.Prefix
	// AffinityTimeout is the ClientIP session affinity timeout in seconds;
	// 0 means no affinity.
	AffinityTimeout     uint32
	HealthCheckNodePort uint16 // 0: none

	InternalPolicyLocal bool
	ExternalPolicyLocal bool

	// HasAnyEndpoints, Cluster and Local are the module chain's decision.
	// A nil set is not used by the traffic policy; an empty one is used
	// and has no endpoint. With HasAnyEndpoints false the service rejects;
	// with it true but the policy's set empty or nil, it drops.
	HasAnyEndpoints bool
	Cluster         []Endpoint
	Local           []Endpoint

	// Serving are the distinct addresses of every serving endpoint of the
	// service port, sorted, whatever the traffic policy, topology or
	// module chain chose: connection tracking keeps a UDP flow only while
	// its backend is one of them (upstream's conntrack reconciler).
	Serving []netip.Addr
}

// Endpoint is a backend the dataplane may send a new connection to, with
// the weight the endpoint-selection stage gave it.
type Endpoint struct {
	Addr   netip.Addr
	Port   uint16
	Weight uint32 // >= 1
}

// DriftChecker is implemented by a Backend that can read back the
// dataplane it programmed, to notice objects deleted or changed behind its
// back (an operator's nft command, another agent flushing a chain).
type DriftChecker interface {
	// CheckDrift compares the dataplane with what the last successful
	// Sync programmed. It returns nil when they match, or when there is
	// nothing to compare (no Sync yet, or the next Sync rewrites the
	// dataplane anyway). Otherwise it returns what differs, and the next
	// Sync rewrites the whole dataplane. An error means the check could
	// not be made; nothing changes, and a later check tries again.
	CheckDrift(ctx context.Context) (*Drift, error)
}

// Drift kinds of object, for Drift.Objects.
const (
	DriftTable   = "table"
	DriftChain   = "chain"
	DriftRule    = "rule"
	DriftSet     = "set"
	DriftElement = "element"
)

// MaxDriftExamples bounds Drift.Examples.
const MaxDriftExamples = 10

// Drift is what a drift check found different from what the backend
// programmed.
type Drift struct {
	// Objects counts the objects missing, changed or not programmed by
	// the backend, by kind (DriftTable, DriftChain, ...).
	Objects map[string]int
	// Examples describe the first of them, at most MaxDriftExamples, such
	// as `map service-ips: element 10.96.0.10 . tcp . 80 missing`.
	Examples []string
}

// Add records n objects of kind, and example if there is room for it.
func (d *Drift) Add(kind string, n int, example string) {
	if n <= 0 {
		return
	}
	if d.Objects == nil {
		d.Objects = map[string]int{}
	}
	d.Objects[kind] += n
	if len(d.Examples) < MaxDriftExamples {
		d.Examples = append(d.Examples, example)
	}
}

// Empty reports whether d records no object.
func (d *Drift) Empty() bool { return d == nil || len(d.Objects) == 0 }
