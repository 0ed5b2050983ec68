// Command double is an endpoint-selection module for the hot reload tests:
// every endpoint weighs 2, where the default module gives 1.
package main

import "github.com/wasp-proxy/wasp/sdk/go/wasp"

func init() { wasp.HandleEndpointSelection(selection) }

func selection(_ wasp.Node, sp wasp.ServicePort, out *wasp.SelectionResult) error {
	d := sp.Decision()
	for _, set := range []wasp.Indices{d.Cluster(), d.Local()} {
		for k := range set.Len() {
			out.Set(set.At(k), 2)
		}
	}
	return nil
}

func main() {}
