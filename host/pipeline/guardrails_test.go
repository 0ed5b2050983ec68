package pipeline_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// TestGuardrails: a traffic-policy module that puts every endpoint into
// every set is refused, per port, when an endpoint is not serving or (in
// the local set) not on this node, unless its guardrails allow it; a
// port it decides well for is not affected.
func TestGuardrails(t *testing.T) {
	node := abi.Node{Name: "node-a"}
	ep := func(addr, nodeName string, ready, serving, terminating bool) abi.Endpoint {
		return abi.Endpoint{Addr: netip.MustParseAddr(addr), Port: 80, NodeName: nodeName, Local: nodeName == node.Name,
			Ready: ready, Serving: serving, Terminating: terminating}
	}
	local := ep("10.0.0.1", "node-a", true, true, false)
	tests := []struct {
		name      string
		endpoints []abi.Endpoint
		allow     pipeline.Guardrails
		err       string // "": the module's decision stands
	}{
		{name: "ready local", endpoints: []abi.Endpoint{local}},
		{name: "serving terminating", endpoints: []abi.Endpoint{local, ep("10.0.0.2", "node-a", false, true, true)}},
		{name: "ready without serving counts as serving", endpoints: []abi.Endpoint{local, ep("10.0.0.2", "node-a", true, false, false)}},
		{
			name: "not serving", endpoints: []abi.Endpoint{local, ep("10.0.0.2", "node-a", false, false, true)},
			err: `guardrail: endpoint 1 (10.0.0.2:80) in the cluster set is not serving (allow it with guardrails.allowNotServing)`,
		},
		{
			name: "not serving, allowed", endpoints: []abi.Endpoint{local, ep("10.0.0.2", "node-a", false, false, true)},
			allow: pipeline.Guardrails{AllowNotServing: true},
		},
		{
			name: "remote in local", endpoints: []abi.Endpoint{local, ep("10.0.0.3", "node-b", true, true, false)},
			err: `guardrail: endpoint 1 (10.0.0.3:80, node "node-b") in the local set is not on this node (allow it with guardrails.allowRemoteInLocal)`,
		},
		{
			name: "remote in local, allowed", endpoints: []abi.Endpoint{local, ep("10.0.0.3", "node-b", true, true, false)},
			allow: pipeline.Guardrails{AllowRemoteInLocal: true},
		},
		{
			name: "remote in local, only not-serving allowed", endpoints: []abi.Endpoint{local, ep("10.0.0.3", "node-b", true, true, false)},
			allow: pipeline.Guardrails{AllowNotServing: true},
			err:   `in the local set is not on this node`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts pipeline.Options
			opts.Modules[abi.StageTrafficPolicy] = pipeline.Relax(&fake{timeout: time.Millisecond}, tt.allow)
			p := pipeline.New(opts)
			in := behaving(2, 1, nil)
			in[0].InternalPolicyLocal, in[0].ExternallyAccessible = true, true // uses both sets
			in[0].Annotations = []abi.Label{{Key: "wasp.test/behaviour", Value: "every-endpoint"}}
			in[0].Endpoints = tt.endpoints
			res := p.Run(context.Background(), node, in)
			if r := res[1]; r.Source != pipeline.SourceModules {
				t.Errorf("other port: %s: %v", r.Source, r.Err)
			}
			r := res[0]
			if tt.err == "" {
				if r.Source != pipeline.SourceModules || len(r.Cluster) != len(tt.endpoints) {
					t.Errorf("source %s, cluster %v (err %v), want the module's decision of every endpoint", r.Source, r.Cluster, r.Err)
				}
				return
			}
			if r.Source != pipeline.SourceBuiltin || runtime.ReasonOf(r.Err) != runtime.ReasonInvalidOutput || !strings.Contains(r.Err.Error(), tt.err) {
				t.Errorf("source %s, err %v; want builtin, invalid-output: ...%s", r.Source, r.Err, tt.err)
			}
		})
	}
}
