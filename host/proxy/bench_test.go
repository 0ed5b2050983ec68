package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/host/model"
	"github.com/wasp-proxy/wasp/host/pipeline"
)

// Realistic scale: 10k Services of one port and 10 endpoints.
const (
	benchServices  = 10000
	benchEndpoints = 10
)

// nopBackend accepts every State. A real backend diffs the State against
// what it programmed, a cost that is the same for a full and a partial
// sync; leaving it out measures the sync loop's own work.
type nopBackend struct{}

var _ backends.Backend = nopBackend{}

func (nopBackend) Sync(context.Context, *backends.State) (backends.SyncResult, error) {
	return backends.SyncResult{}, nil
}
func (nopBackend) Cleanup(context.Context) error { return nil }
func (nopBackend) Close() error                  { return nil }

// benchSlice returns the EndpointSlice of Service ns/name with endpoints
// whose last octet starts at first.
func benchSlice(ns, name string, k, first int) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-abc", Labels: map[string]string{model.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080), Protocol: ptr(v1.ProtocolTCP)}},
	}
	for e := range benchEndpoints {
		zone := fmt.Sprintf("z%d", e%3)
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 128+k/256, k%256, first+e)},
			NodeName:  ptr(fmt.Sprintf("node-%d", e)),
			Zone:      ptr(zone),
			Hints:     &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}},
		})
	}
	return es
}

// benchProxy returns a Proxy over listers holding n Services, without
// informers, and the slice indexer, to change endpoints. opts gives the
// Pipeline and AfterFullSync; nil pipeline: the native stages.
func benchProxy(b testing.TB, n int, opts Opts) (*Proxy, cache.Indexer) {
	b.Helper()
	if opts.Pipeline == nil {
		opts.Pipeline = pipeline.New(pipeline.Options{})
	}
	opts.NodeName, opts.Client = "node-0", fake.NewClientset()
	opts.Backends = map[backends.Family]backends.Backend{backends.IPv4: nopBackend{}}
	p, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	nsIndex := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	svcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nsIndex)
	slices := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, sliceServiceIndex: indexSliceByService})
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := nodes.Add(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0", Labels: map[string]string{"topology.kubernetes.io/zone": "z0"}}}); err != nil {
		b.Fatal(err)
	}
	for k := range n {
		ns, name := fmt.Sprintf("ns-%d", k%10), fmt.Sprintf("svc-%d", k)
		ip := fmt.Sprintf("10.96.%d.%d", k/256, k%256)
		svc := service(name, ip, nil)
		svc.Namespace = ns
		if err := svcs.Add(svc); err != nil {
			b.Fatal(err)
		}
		if err := slices.Add(benchSlice(ns, name, k, 1)); err != nil {
			b.Fatal(err)
		}
	}
	p.services = corelisters.NewServiceLister(svcs)
	p.slices = discoverylisters.NewEndpointSliceLister(slices)
	p.sliceIndex = slices
	p.nodes = corelisters.NewNodeLister(nodes)
	return p, slices
}

// BenchmarkSync: a sync after one Service's endpoints changed, against a
// full sync of the same 10k Services measured in the same run.
func BenchmarkSync(b *testing.B) {
	ctx := context.Background()
	p, slices := benchProxy(b, benchServices, Opts{})
	if err := p.sync(ctx); err != nil {
		b.Fatal(err)
	}
	// The changed Service alternates between two endpoint sets.
	name := types.NamespacedName{Namespace: "ns-7", Name: "svc-7"}
	versions := [2]*discoveryv1.EndpointSlice{benchSlice(name.Namespace, name.Name, 7, 101), benchSlice(name.Namespace, name.Name, 7, 1)}
	partial := func(i int) {
		if err := slices.Update(versions[i%2]); err != nil {
			b.Fatal(err)
		}
		p.tracker.markServices(name)
		if err := p.sync(ctx); err != nil {
			b.Fatal(err)
		}
	}
	full := func() {
		p.Resync()
		if err := p.sync(ctx); err != nil {
			b.Fatal(err)
		}
	}

	// The baseline: fastest of several full syncs, the figure least
	// disturbed by other work on the machine.
	fastestFull := time.Duration(1 << 62)
	for range 5 {
		start := time.Now()
		full()
		fastestFull = min(fastestFull, time.Since(start))
	}
	if s := p.Stats(); s.LastEvaluated != benchServices {
		b.Fatalf("a full sync evaluated %d ports; want %d", s.LastEvaluated, benchServices)
	}

	b.ReportAllocs()
	b.ResetTimer()
	fastest, i := time.Duration(1<<62), 0
	for b.Loop() {
		start := time.Now()
		partial(i)
		fastest = min(fastest, time.Since(start))
		i++
	}
	b.StopTimer()
	if s := p.Stats(); s.LastEvaluated != 1 || s.ServicePorts != benchServices {
		b.Fatalf("a partial sync evaluated %d ports and programmed %d; want 1 and %d", s.LastEvaluated, s.ServicePorts, benchServices)
	}
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(float64(fastestFull.Nanoseconds())/float64(fastest.Nanoseconds()), "x-faster-fastest")
	b.ReportMetric(float64(fastestFull.Nanoseconds())/per, "x-faster")
	b.ReportMetric(float64(fastestFull.Microseconds())/1e3, "full-ms")
}
