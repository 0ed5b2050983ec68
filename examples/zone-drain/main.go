// Command zone-drain is an endpoint-selection module that drains zones
// during maintenance: endpoints in the zones named by the Service
// annotation wasp.dev/drain-zones (comma-separated) get no new
// connections, unless that would leave a traffic policy's set without any
// endpoint, in which case the set is kept whole (draining never
// blackholes a Service). Established connections are not touched: the
// dataplane only steers new ones.
//
// An annotation with an empty zone name ("zone-b,,zone-c") fails the
// port, which then keeps its last good decision (or upstream's): a typo
// never drains everything.
package main

import (
	"errors"
	"strings"

	"github.com/wasp-proxy/wasp/sdk/go/wasp"
)

// Annotation names the zones to drain, comma-separated.
const Annotation = "wasp.dev/drain-zones"

func init() { wasp.HandleEndpointSelection(selection) }

func selection(_ wasp.Node, sp wasp.ServicePort, out *wasp.SelectionResult) error {
	drained, err := zones(sp)
	if err != nil {
		return err
	}
	d := sp.Decision()
	for _, set := range []wasp.Indices{d.Cluster(), d.Local()} {
		kept := 0
		for k := range set.Len() {
			if !drained(sp.Endpoint(set.At(k)).Zone()) {
				kept++
			}
		}
		for k := range set.Len() {
			i := set.At(k)
			if kept == 0 || !drained(sp.Endpoint(i).Zone()) {
				out.Set(i, 1)
			}
		}
	}
	return nil
}

// zones returns whether a zone is drained for sp.
func zones(sp wasp.ServicePort) (func(string) bool, error) {
	v, ok := sp.Annotation(Annotation)
	if !ok {
		return func(string) bool { return false }, nil
	}
	names := strings.Split(v, ",")
	for i, n := range names {
		names[i] = strings.TrimSpace(n)
		if names[i] == "" {
			return nil, errors.New("annotation " + Annotation + ": empty zone name in " + v)
		}
	}
	return func(z string) bool {
		for _, n := range names {
			if n == z {
				return true
			}
		}
		return false
	}, nil
}

func main() {}
