// Package abi is the contract between the wasp host and its policy modules:
// the Go shape of what a stage sees and decides, the byte layout both sides
// exchange, and the module metadata format.
//
// The package has no dependencies outside the standard library. The host
// (host/), the guest SDKs (sdk/) and the modules import it; it imports none
// of them. The written specification is docs/abi.md.
package abi
