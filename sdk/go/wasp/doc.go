// Package wasp is the Go SDK for wasp policy modules.
//
// A module implements one or more stages of the per-service-port pipeline —
// topology, traffic-policy, endpoint-selection — as plain Go functions and
// registers them from an init function:
//
//	func init() {
//		wasp.HandleTopology(topology)
//	}
//
//	func topology(node wasp.Node, sp wasp.ServicePort, out *wasp.TopologyResult) error {
//		for i := range sp.Len() {
//			out.Add(i)
//		}
//		return nil
//	}
//
//	func main() {}
//
// Build it as a WebAssembly reactor with the standard Go toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o module.wasm .
//
// and test it natively with go test through package wasptest, which runs the
// very same code over the same bytes the host sends.
//
// # Reading input
//
// Node, ServicePort, Endpoint, Strings, Decision and Indices are views over
// the batch the host wrote into the module's memory: reading them copies and
// allocates nothing. Strings they return alias that memory and are valid only
// during the call; copy them (strings.Clone) to keep them.
//
// # Writing output
//
// A result can only name endpoints by their index in the service port, so a
// module chooses among the endpoints it was given and can never add one.
// Index sets are sorted and de-duplicated by the SDK; the host validates
// every record and treats invalid output as a failure of that service port.
// Returning an error, or panicking, fails only the service port at hand: the
// host keeps that port's last good result.
//
// # TinyGo
//
// The SDK uses no reflection, no encoding packages and no goroutines, and the
// hot path allocates nothing after warm-up, so it is meant to compile with
// TinyGo's wasip1 target as well. Only the standard Go toolchain is tested;
// TinyGo builds are supported in principle, not verified.
package wasp
