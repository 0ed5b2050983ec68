package backends

// DefaultMasqueradeBit is the bit of the packet mark that asks a
// dataplane using marks (nftables, iptables) to masquerade a connection,
// unless its options say another: mark 0x4000, upstream's default.
const DefaultMasqueradeBit = 14

// Masquerade says which new connections to a service port a dataplane
// masquerades (source-NATs to a node address) on their way to an
// endpoint, so that the reply comes back through this node. Whatever it
// says, a connection from an endpoint to itself through the service
// (hairpin) is masqueraded.
type Masquerade uint8

const (
	// MasqueradeNone masquerades nothing but hairpin connections.
	MasqueradeNone Masquerade = iota
	// MasqueradeAll masquerades every connection.
	MasqueradeAll
	// MasqueradeOffCluster masquerades connections from outside
	// State.ClusterCIDRs: off-cluster traffic to a ClusterIP may come
	// back through another node.
	MasqueradeOffCluster
	// MasqueradeFromNode masquerades connections from the node's own
	// addresses: with external policy Local they act as if they went out
	// to the load balancer and back, and so use the Cluster set.
	MasqueradeFromNode
)

var masqueradeNames = map[Masquerade]string{MasqueradeNone: "none", MasqueradeAll: "all",
	MasqueradeOffCluster: "off-cluster", MasqueradeFromNode: "from-node"}

// String returns "none", "all", "off-cluster", "from-node" or "masquerade(N)".
func (m Masquerade) String() string { return enumString(masqueradeNames, "masquerade", m) }

// InternalMasquerade is what traffic to a ClusterIP masquerades, for every
// service port of the State: all of it with MasqueradeAll; else, when
// ClusterCIDRs are known, what comes from outside them; else none (local
// traffic cannot be told apart).
func (s *State) InternalMasquerade() Masquerade {
	switch {
	case s.MasqueradeAll:
		return MasqueradeAll
	case len(s.ClusterCIDRs) > 0:
		return MasqueradeOffCluster
	}
	return MasqueradeNone
}

// ExternalMasquerade is what traffic to the service port's NodePort,
// external IPs and load-balancer VIPs masquerades: all of it under the
// Cluster external policy, whose endpoints may be on other nodes; under
// Local, only what comes from the node itself, to keep the client's
// address for the rest.
func (s *Service) ExternalMasquerade() Masquerade {
	if s.ExternalPolicyLocal {
		return MasqueradeFromNode
	}
	return MasqueradeAll
}
