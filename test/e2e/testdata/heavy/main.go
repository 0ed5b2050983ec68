// Command heavy is an endpoint-selection module for the end-to-end tests:
// endpoints on the node named by the Service annotation
// e2e.wasp.dev/heavy-node weigh 9, all others 1. Without the annotation
// every endpoint weighs 1, as the default module.
package main

import "github.com/wasp-proxy/wasp/sdk/go/wasp"

// Annotation names the node whose endpoints weigh 9.
const Annotation = "e2e.wasp.dev/heavy-node"

func init() { wasp.HandleEndpointSelection(selection) }

func selection(_ wasp.Node, sp wasp.ServicePort, out *wasp.SelectionResult) error {
	heavy, _ := sp.Annotation(Annotation)
	d := sp.Decision()
	for _, set := range []wasp.Indices{d.Cluster(), d.Local()} {
		for k := range set.Len() {
			i := set.At(k)
			w := uint32(1)
			if heavy != "" && sp.Endpoint(i).NodeName() == heavy {
				w = 9
			}
			out.Set(i, w)
		}
	}
	return nil
}

func main() {}
