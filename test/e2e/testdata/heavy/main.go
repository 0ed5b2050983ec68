// Command heavy is an endpoint-selection module for the end-to-end tests:
// endpoints on the node named by the Service annotation
// e2e.wasp.dev/heavy-node weigh 9 (or the configured weight), all others
// 1. Without the annotation every endpoint weighs 1, as the default
// module.
//
// Configuration: {"weight": N}, N in [1, 1000]; anything else is
// rejected.
package main

import (
	"encoding/json"
	"fmt"

	"github.com/wasp-proxy/wasp/sdk/go/wasp"
)

// Annotation names the node whose endpoints weigh more.
const Annotation = "e2e.wasp.dev/heavy-node"

// weight is what the heavy node's endpoints weigh.
var weight uint32 = 9

func init() {
	wasp.HandleEndpointSelection(selection)
	wasp.Configure(configure)
}

func configure(config []byte) error {
	var c struct {
		Weight *int64 `json:"weight"`
	}
	if len(config) > 0 {
		if err := json.Unmarshal(config, &c); err != nil {
			return err
		}
	}
	if c.Weight == nil {
		return nil
	}
	if *c.Weight < 1 || *c.Weight > 1000 {
		return fmt.Errorf("weight: %d is not in [1, 1000]", *c.Weight)
	}
	weight = uint32(*c.Weight)
	return nil
}

func selection(_ wasp.Node, sp wasp.ServicePort, out *wasp.SelectionResult) error {
	heavy, _ := sp.Annotation(Annotation)
	d := sp.Decision()
	for _, set := range []wasp.Indices{d.Cluster(), d.Local()} {
		for k := range set.Len() {
			i := set.At(k)
			w := uint32(1)
			if heavy != "" && sp.Endpoint(i).NodeName() == heavy {
				w = weight
			}
			out.Set(i, w)
		}
	}
	return nil
}

func main() {}
