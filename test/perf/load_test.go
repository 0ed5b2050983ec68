//go:build linux

package perf

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The bulk load: Services of loadEndpoints endpoints each, one
// EndpointSlice per Service. Endpoint addresses come from the upper half
// of the lab's cluster CIDR, where no pod lives; no packet is ever sent to
// them, they only fill the proxies' rules.
const (
	loadNamespace = "perf-load"
	loadEndpoints = 10
	loadWorkers   = 16
	loadManagedBy = "perf.wasp.dev"
	loadAttempts  = 10 // about four minutes of retries
)

var fakePods = netip.MustParsePrefix("10.244.128.0/17")

// loadServices creates Services from..to-1 of the bulk load, concurrently.
func loadServices(ctx context.Context, client kubernetes.Interface, from, to int) error {
	jobs := make(chan int)
	var (
		wg       sync.WaitGroup
		failures atomic.Int64
		firstErr error
		once     sync.Once
	)
	for range loadWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := retry(ctx, func() error { return loadService(ctx, client, i) }); err != nil {
					failures.Add(1)
					once.Do(func() { firstErr = err })
				}
			}
		}()
	}
	for i := from; i < to && ctx.Err() == nil; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if n := failures.Load(); n > 0 {
		return fmt.Errorf("%d of %d Services failed, first: %w", n, to-from, firstErr)
	}
	return ctx.Err()
}

// retry calls f until it succeeds, up to loadAttempts times with growing
// pauses: on a busy two-core machine etcd has been seen to stall for two
// minutes, and a transient apiserver error must not end an hour's run.
// (Creates are idempotent here: AlreadyExists counts as success.)
func retry(ctx context.Context, f func() error) error {
	pause := time.Second
	var err error
	for range loadAttempts {
		if err = f(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 30*time.Second)
	}
	return err
}

func loadService(ctx context.Context, client kubernetes.Interface, i int) error {
	name := fmt.Sprintf("svc-%d", i)
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.ServiceSpec{
			Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := client.CoreV1().Services(loadNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("service %s: %w", name, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name + "-1",
			Labels: map[string]string{
				discoveryv1.LabelServiceName: name,
				discoveryv1.LabelManagedBy:   loadManagedBy,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	// As the endpointslice controller writes them: node, zone and the
	// pod's reference on every endpoint (the nodes are neither proxy's).
	for j := range loadEndpoints {
		k := i*loadEndpoints + j
		pod := fmt.Sprintf("%s-%d", name, j)
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fakePod(k).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To(fmt.Sprintf("load-node-%d", k%100)),
			Zone:       ptr.To(fmt.Sprintf("zone-%d", k%3)),
			TargetRef: &v1.ObjectReference{Kind: "Pod", Namespace: loadNamespace, Name: pod,
				UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", k))},
		})
	}
	if _, err := client.DiscoveryV1().EndpointSlices(loadNamespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("endpointslice %s: %w", slice.Name, err)
	}
	return nil
}

// fakePod returns the k-th address of fakePods, wrapping around (skipping
// the first and last address). Ten consecutive k never repeat an address.
func fakePod(k int) netip.Addr {
	size := 1 << (32 - fakePods.Bits())
	a := fakePods.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(1 + k%(size-2)) // neither the first nor the last address
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
