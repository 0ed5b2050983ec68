package proxy

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

func TestServiceCIDRsServed(t *testing.T) {
	gv := networkingv1.SchemeGroupVersion.String()
	tests := []struct {
		name      string
		resources []*metav1.APIResourceList
		failures  int  // discovery calls that fail with a non-NotFound error first
		cancel    bool // ctx is canceled while discovery fails
		served    bool
		ok        bool
	}{
		{name: "served", resources: []*metav1.APIResourceList{{GroupVersion: gv, APIResources: []metav1.APIResource{{Name: "servicecidrs"}}}},
			served: true, ok: true},
		{name: "group version not served", ok: true},
		{name: "group version without the resource", resources: []*metav1.APIResourceList{{GroupVersion: gv, APIResources: []metav1.APIResource{{Name: "ingresses"}}}},
			ok: true},
		{name: "inconclusive, then served", failures: 1,
			resources: []*metav1.APIResourceList{{GroupVersion: gv, APIResources: []metav1.APIResource{{Name: "servicecidrs"}}}},
			served:    true, ok: true},
		{name: "inconclusive until stopped", failures: 1 << 30, cancel: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			client.Resources = tt.resources
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			failures := tt.failures
			client.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
				if failures > 0 {
					failures--
					if tt.cancel {
						cancel()
					}
					return true, nil, errors.New("connection refused")
				}
				return false, nil, nil
			})
			served, ok := serviceCIDRsServed(ctx, client.Discovery())
			if served != tt.served || ok != tt.ok {
				t.Errorf("serviceCIDRsServed = %v, %v; want %v, %v", served, ok, tt.served, tt.ok)
			}
		})
	}
}

func TestParseServiceCIDR(t *testing.T) {
	tests := []struct {
		in      string
		want    netip.Prefix
		wantErr bool
	}{
		{in: "10.96.0.0/16", want: netip.MustParsePrefix("10.96.0.0/16")},
		{in: "fd00:96::/112", want: netip.MustParsePrefix("fd00:96::/112")},
		{in: "10.96.0.1/16", want: netip.MustParsePrefix("10.96.0.0/16")},
		{in: "::ffff:10.0.0.0/104", wantErr: true},
		{in: "10.96.0.0", wantErr: true},
		{in: "fe80::/64%eth0", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseServiceCIDR(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseServiceCIDR(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}
