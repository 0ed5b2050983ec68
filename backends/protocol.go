package backends

import "strings"

// Protocol is a service port's transport protocol, in the Kubernetes
// spelling.
type Protocol string

const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// IANA protocol numbers, as the kernel matches them.
const (
	ProtoNumberTCP  = 6
	ProtoNumberUDP  = 17
	ProtoNumberSCTP = 132
)

// Valid reports whether p is TCP, UDP or SCTP.
func (p Protocol) Valid() bool { return p.Number() != 0 }

// Number returns p's IANA protocol number (6, 17 or 132); 0 when p is not
// valid.
func (p Protocol) Number() uint8 {
	switch p {
	case TCP:
		return ProtoNumberTCP
	case UDP:
		return ProtoNumberUDP
	case SCTP:
		return ProtoNumberSCTP
	}
	return 0
}

// ProtocolOf returns the Protocol of IANA protocol number n, the inverse
// of Number; "" when n is not TCP's, UDP's or SCTP's.
func ProtocolOf(n uint8) Protocol {
	switch n {
	case ProtoNumberTCP:
		return TCP
	case ProtoNumberUDP:
		return UDP
	case ProtoNumberSCTP:
		return SCTP
	}
	return ""
}

// Lower returns p in lower case ("tcp"), the spelling of nft, iptables and
// of wasp's dumps and kernel object names.
func (p Protocol) Lower() string { return strings.ToLower(string(p)) }
