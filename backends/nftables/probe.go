package nftables

// The nftables mode's kernel probes, by name.
const (
	nftProbeTables      = "nftables"
	nftProbeNAT         = "nftables-nat"
	nftProbeNumgen      = "nftables-numgen"
	nftProbeConcatMaps  = "nftables-concat-maps"
	nftProbeStaleChains = "nftables-delete-referenced-chain"
)
