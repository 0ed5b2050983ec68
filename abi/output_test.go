package abi

import (
	"net/netip"
	"strings"
	"testing"
)

// TestMaxOutputLen: the largest output a batch can have is valid, and
// MaxOutputLen bounds it.
func TestMaxOutputLen(t *testing.T) {
	b := &Batch{Stage: StageTrafficPolicy, Node: Node{Name: "n"}}
	for p := range 3 {
		sp := ServicePort{Namespace: "ns", Name: "svc"}
		for e := range 4 * (p + 1) {
			sp.Endpoints = append(sp.Endpoints, Endpoint{Addr: netip.AddrFrom4([4]byte{10, 0, byte(p), byte(e)}), Ready: true, Serving: true})
		}
		b.Ports = append(b.Ports, sp)
		b.Decisions = append(b.Decisions, Decision{})
	}
	var enc Encoder
	input, err := enc.Encode(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	var w OutputWriter
	w.Reset(StageTrafficPolicy)
	for p, sp := range b.Ports {
		if p == 0 {
			w.Error(strings.Repeat("x", MaxErrorLen+10))
			continue
		}
		all := make(Indices, len(sp.Endpoints))
		for i := range all {
			all[i] = uint32(i)
		}
		w.TrafficPolicy(true, all, all, all)
	}
	out := w.Bytes()
	if _, err := DecodeOutput(out, b, nil); err != nil {
		t.Fatalf("the largest output is not valid: %v", err)
	}
	if max := MaxOutputLen(input); len(out) > max {
		t.Errorf("MaxOutputLen = %d, but a valid output has %d bytes", max, len(out))
	}
	if got := MaxOutputLen([]byte("not a batch")); got != 0 {
		t.Errorf("MaxOutputLen(garbage) = %d, want 0", got)
	}
}
