package reference_test

import (
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/reference"
	"github.com/wasp-proxy/wasp/host/reference/referencetest"
)

// Size of the benchmark batch: a large cluster's full sync.
const (
	benchPorts            = 10000
	benchEndpointsPerPort = 10
)

// Sinks keep the compiler from discarding benchmark results.
var (
	sink          abi.Decision
	sinkEndpoints []abi.Endpoint
	sinkAny       bool
)

// BenchmarkCategorize runs the three stages over a full batch per op; ns/op
// is the time for the whole batch. The upstream transcription is measured
// in the same run as a baseline.
func BenchmarkCategorize(b *testing.B) {
	node, ports := referencetest.Batch(1, benchPorts, benchEndpointsPerPort)
	labels := labelMap(&node)
	b.Run("reference", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i := range ports {
				sink = reference.Categorize(&node, &ports[i])
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchPorts), "ns/port")
	})
	b.Run("upstream-transcription", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i := range ports {
				_, _, sinkEndpoints, sinkAny = upstreamCategorize(ports[i].Endpoints, &ports[i], node.Name, labels)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchPorts), "ns/port")
	})
}
