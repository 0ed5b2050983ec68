// Command selection is wasp's default endpoint-selection stage: every
// endpoint of the cluster and local sets gets the same weight, which is
// upstream kube-proxy's uniform random choice.
package main

import (
	"github.com/wasp-proxy/wasp/sdk/go/wasp"
)

func init() { wasp.HandleEndpointSelection(selection) }

func selection(_ wasp.Node, sp wasp.ServicePort, out *wasp.SelectionResult) error {
	d := sp.Decision()
	for _, set := range [...]wasp.Indices{d.Cluster(), d.Local()} {
		for k := range set.Len() {
			out.Set(set.At(k), 1)
		}
	}
	return nil
}

func main() {}
