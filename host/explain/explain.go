// Package explain answers "what does this node do with each Service?": it
// builds the node's model from Kubernetes objects, runs the module chain,
// and renders one document per service port.
//
// The document format is stable and documented in docs/explain.md:
//
//	{"service":"ns/name","port":"http","protocol":"TCP","ipFamily":"IPv4",
//	 "clusterEndpoints":["10.0.0.1:80"],"localEndpoints":null,
//	 "allReachableEndpoints":["10.0.0.1:80"],"hasAnyEndpoints":true,
//	 "weights":{"10.0.0.1:80":1}}
//
// A set is null where the traffic policy does not use it, and [] where it
// is used but no endpoint qualifies, exactly as upstream kube-proxy tells
// nil from empty.
package explain

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"text/tabwriter"

	v1 "k8s.io/api/core/v1"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/model"
	"github.com/wasp-proxy/wasp/host/objects"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/internal/printable"
)

// Document is the explanation of one service port.
type Document struct {
	Service               string            `json:"service"`
	Port                  string            `json:"port"`
	Protocol              string            `json:"protocol"`
	IPFamily              string            `json:"ipFamily"`
	ClusterEndpoints      []string          `json:"clusterEndpoints"`
	LocalEndpoints        []string          `json:"localEndpoints"`
	AllReachableEndpoints []string          `json:"allReachableEndpoints"`
	HasAnyEndpoints       bool              `json:"hasAnyEndpoints"`
	Weights               map[string]uint32 `json:"weights"`

	// Source and Error say whether the modules decided, or a fallback
	// after a module failure. They are shown in the table and on stderr,
	// not in the JSON document.
	Source string `json:"-"`
	Error  string `json:"-"`
}

// Explain builds the model of nodeName from objs and runs it through p.
func Explain(ctx context.Context, objs *objects.Objects, nodeName string, p *pipeline.Pipeline) ([]Document, error) {
	node, err := objs.Node(nodeName)
	if err != nil {
		return nil, err
	}
	m := model.Build(model.Input{
		NodeName:       nodeName,
		Node:           node,
		Services:       objs.Services,
		EndpointSlices: objs.EndpointSlices,
	})
	ports := make([]pipeline.Port, len(m.Ports))
	for i := range m.Ports {
		ports[i] = pipeline.Port{Key: m.Ports[i].String(), ServicePort: m.Ports[i].ServicePort}
	}
	results := p.Run(ctx, m.Node, ports)
	docs := make([]Document, len(results))
	for i, r := range results {
		docs[i] = document(&m.Ports[i], r)
	}
	return docs, nil
}

func document(sp *model.ServicePort, r pipeline.Result) Document {
	d := Document{
		Service:  sp.Namespace + "/" + sp.Name,
		Port:     sp.PortName,
		Protocol: sp.Protocol.String(),
		IPFamily: string(sp.Family),
		Source:   r.Source.String(),
	}
	if d.IPFamily == "" {
		d.IPFamily = string(v1.IPv4Protocol)
	}
	if r.Err != nil {
		d.Error = printable.String(r.Err.Error()) // the module's text, for a terminal
	}
	d.ClusterEndpoints = targets(r.Endpoints, r.Cluster)
	d.LocalEndpoints = targets(r.Endpoints, r.Local)
	d.AllReachableEndpoints = targets(r.Endpoints, r.All)
	d.HasAnyEndpoints = r.HasAnyEndpoints
	d.Weights = map[string]uint32{}
	for _, w := range r.Weights {
		d.Weights[target(&r.Endpoints[w.Index])] = w.Weight
	}
	return d
}

// targets renders a set as "ip:port" strings; nil stays nil.
func targets(eps []abi.Endpoint, set abi.Indices) []string {
	if set == nil {
		return nil
	}
	out := make([]string, len(set))
	for k, i := range set {
		out[k] = target(&eps[i])
	}
	return out
}

func target(ep *abi.Endpoint) string {
	return netip.AddrPortFrom(ep.Addr, ep.Port).String()
}

// WriteJSON writes one compact JSON document per line (JSON Lines).
func WriteJSON(w io.Writer, docs []Document) error {
	enc := json.NewEncoder(w)
	for i := range docs {
		if err := enc.Encode(&docs[i]); err != nil {
			return err
		}
	}
	return nil
}

// WriteTable writes a human-readable table.
func WriteTable(w io.Writer, docs []Document) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tPORT\tPROTO\tFAMILY\tCLUSTER\tLOCAL\tHAS-ANY\tWEIGHTS\tSOURCE")
	for _, d := range docs {
		port := d.Port
		if port == "" {
			port = `""`
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%t\t%s\t%s\n", d.Service, port, d.Protocol, d.IPFamily,
			list(d.ClusterEndpoints), list(d.LocalEndpoints), d.HasAnyEndpoints, weights(d), d.Source)
	}
	return tw.Flush()
}

func list(s []string) string {
	if s == nil {
		return "-"
	}
	if len(s) == 0 {
		return "[]"
	}
	return strings.Join(s, ",")
}

func weights(d Document) string {
	if len(d.Weights) == 0 {
		return "-"
	}
	var parts []string
	for _, ep := range d.AllReachableEndpoints {
		if w, ok := d.Weights[ep]; ok {
			parts = append(parts, strconv.FormatUint(uint64(w), 10))
		}
	}
	return strings.Join(parts, ":")
}
