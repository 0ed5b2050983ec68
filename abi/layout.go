package abi

// The byte layout of ABI v1. Every integer is little-endian. Every record
// starts at a multiple of 4 bytes from the start of its buffer. All offsets
// are absolute from the start of the buffer unless said otherwise. See
// docs/abi.md for the full specification with diagrams.

// Input batch (host → guest).
const (
	// InputMagic starts every input batch: "WSP1".
	InputMagic uint32 = 0x31505357

	// Header fields.
	hdrMagic          = 0  // u32
	hdrVersion        = 4  // u16
	hdrStage          = 6  // u8
	hdrTotalLen       = 8  // u32: length of the whole batch
	hdrPortCount      = 12 // u32
	hdrPortsOff       = 16 // u32
	hdrEndpointCount  = 20 // u32
	hdrEndpointsOff   = 24 // u32
	hdrPairCount      = 28 // u32
	hdrPairsOff       = 32 // u32: node labels, then annotations
	hdrHintCount      = 36 // u32
	hdrHintsOff       = 40 // u32: string refs
	hdrDecisionsOff   = 44 // u32: PortCount decision records
	hdrIndexCount     = 48 // u32
	hdrIndicesOff     = 52 // u32: u32 endpoint indices
	hdrStringsOff     = 56 // u32
	hdrStringsLen     = 60 // u32
	hdrNodeName       = 64 // strref
	hdrNodeLabelFirst = 72 // u32: first pair index
	hdrNodeLabelCount = 76 // u32
	// HeaderSize is the size of the input header.
	HeaderSize = 80

	// Port record.
	portNamespace       = 0  // strref
	portName            = 8  // strref
	portPortName        = 16 // strref
	portProtocol        = 24 // u8
	portFlags           = 25 // u8: PortFlag*
	portPort            = 26 // u16
	portNodePort        = 28 // u16
	portEndpointFirst   = 32 // u32: index into the endpoint table
	portEndpointCount   = 36 // u32
	portAnnotationFirst = 40 // u32: index into the pair table
	portAnnotationCount = 44 // u32
	// PortSize is the size of a port record.
	PortSize = 48

	// Endpoint record.
	epAddr          = 0  // [16]byte: IPv6, or IPv4-mapped IPv6 for IPv4 ports
	epPort          = 16 // u16
	epFlags         = 18 // u8: EndpointFlag*
	epNodeName      = 20 // strref
	epZone          = 28 // strref
	epHintFirst     = 36 // u32: index into the hint table; zone hints, then node hints
	epZoneHintCount = 40 // u16
	epNodeHintCount = 42 // u16
	// EndpointSize is the size of an endpoint record.
	EndpointSize = 48

	// PairSize is the size of a label pair: key strref, value strref.
	PairSize = 16
	// StrRefSize is the size of a string reference: u32 offset from the
	// start of the string area, u32 length.
	StrRefSize = 8

	// Decision record, one per port, parallel to the port table.
	decMode     = 0  // u8: TopologyMode
	decFlags    = 1  // u8: DecisionFlag*
	decEligible = 4  // set
	decCluster  = 12 // set
	decLocal    = 20 // set
	decAll      = 28 // set
	// DecisionSize is the size of a decision record.
	DecisionSize = 40

	// A set reference is u32 first (index into the index table), u32 count.
	// NilCount as count marks a nil set (not used), distinct from empty.
	NilCount uint32 = 0xFFFFFFFF
)

// Port flags.
const (
	PortFlagInternalPolicyLocal  = 1 << 0
	PortFlagExternalPolicyLocal  = 1 << 1
	PortFlagExternallyAccessible = 1 << 2
	PortFlagUsesCluster          = 1 << 3
	PortFlagUsesLocal            = 1 << 4
	PortFlagIPv6                 = 1 << 5
)

// Endpoint flags.
const (
	EndpointFlagReady       = 1 << 0
	EndpointFlagServing     = 1 << 1
	EndpointFlagTerminating = 1 << 2
	EndpointFlagLocal       = 1 << 3
)

// Decision flags.
const (
	DecisionFlagHasAnyEndpoints = 1 << 0
)

// Output (guest → host).
const (
	// OutputMagic starts every output: "WSO1".
	OutputMagic uint32 = 0x314F5357

	outMagic    = 0  // u32
	outVersion  = 4  // u16
	outStage    = 6  // u8
	outCount    = 8  // u32: number of records, equal to the input's port count
	outTotalLen = 12 // u32
	// OutputHeaderSize is the size of the output header.
	OutputHeaderSize = 16

	// StatusOK and StatusError start every output record. An error record
	// is followed by u32 length and the UTF-8 message, padded to 4 bytes.
	StatusOK    uint32 = 0
	StatusError uint32 = 1

	// MaxErrorLen bounds the message of an error record.
	MaxErrorLen = 1024
)

// Limits the host enforces on inputs it encodes.
const (
	// MaxHints is the largest number of zone or node hints per endpoint.
	MaxHints = 0xFFFF
)
