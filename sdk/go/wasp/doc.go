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
// # Configuration
//
// A module that takes a configuration of its own (the config of its entry
// in wasp's configuration file, or spec.config of its ServiceProxyModule)
// registers a handler, also from an init function:
//
//	func init() {
//		wasp.Configure(func(config []byte) error {
//			return json.Unmarshal(config, &settings) // empty: none given
//		})
//	}
//
// The host calls it with the configuration's JSON on every new instance,
// before the first stage call, always with the same bytes. Returning an
// error (or panicking) rejects the configuration: the host does not load
// the module and reports the message. The SDK exports wasp_configure in
// every module, since go:wasmexport cannot be conditional; without a
// handler it accepts only no configuration (empty, null or {}) and rejects
// any other. wasptest.Configure runs the handler natively. Parsing the
// configuration is the module's affair: encoding/json is fine, the SDK
// itself needs none.
//
// # TinyGo
//
// The SDK uses no reflection, no encoding packages and no goroutines, and the
// hot path allocates nothing after warm-up, so it is meant to compile with
// TinyGo's wasip1 target as well. Only the standard Go toolchain is tested;
// TinyGo builds are supported in principle, not verified.
package wasp
