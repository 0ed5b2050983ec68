// Package wasptest runs a module's registered stages natively, under go test,
// over exactly the bytes the host would send: it encodes the input with the
// host's encoder, calls the SDK's entry point, and decodes and validates the
// output with the host's decoder. A module that passes here produces the
// same results inside wasp.
package wasptest

import (
	"errors"
	"fmt"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/sdk/go/wasp"
)

// Configure hands config to the module's configuration handler
// (wasp.Configure), as the host does before an instance's first call, and
// returns the module's rejection as an error.
func Configure(config []byte) error {
	if msg := wasp.RunConfigure(config); msg != "" {
		return fmt.Errorf("module rejected its configuration: %s", msg)
	}
	return nil
}

// Run runs the module's handler for stage over ports, with prev the decisions
// of the earlier stages (nil for the first stage). It returns one result per
// port. An error means the module produced no usable output at all; a
// failure confined to one port is reported in that port's Result.Err.
func Run(stage abi.Stage, node abi.Node, ports []abi.ServicePort, prev []abi.Decision) ([]abi.Result, error) {
	var enc abi.Encoder
	b := &abi.Batch{Stage: stage, Node: node, Ports: ports, Decisions: prev}
	in, err := enc.Encode(nil, b)
	if err != nil {
		return nil, fmt.Errorf("encode %s batch: %w", stage, err)
	}
	out := wasp.Run(stage, in)
	if out == nil {
		return nil, fmt.Errorf("%s: module returned no output (stage not registered?)", stage)
	}
	return abi.DecodeOutput(out, b, nil)
}

// Chain runs the three stages in order, each seeing the decisions of the
// ones before, and returns the final decisions. Every stage must be
// registered; a port that fails any stage makes Chain return an error naming
// it.
func Chain(node abi.Node, ports []abi.ServicePort) ([]abi.Decision, error) {
	var prev []abi.Decision
	for _, stage := range abi.Stages {
		res, err := Run(stage, node, ports, prev)
		if err != nil {
			return nil, err
		}
		prev = make([]abi.Decision, len(res))
		var errs []error
		for i, r := range res {
			if r.Err != "" {
				errs = append(errs, fmt.Errorf("%s: port %d (%s/%s:%s): %s", stage, i, ports[i].Namespace, ports[i].Name, ports[i].PortName, r.Err))
			}
			prev[i] = r.Decision
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	return prev, nil
}
