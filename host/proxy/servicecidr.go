package proxy

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
)

// Discovery retry bounds while the apiserver cannot say whether it serves
// ServiceCIDRs.
const (
	discoveryRetryMin = time.Second
	discoveryRetryMax = 30 * time.Second
)

// serviceCIDRsServed asks discovery, once at start, whether the apiserver
// serves networking.k8s.io/v1 ServiceCIDRs (GA in 1.33). The informer is
// only started when it does: an informer for an API that is not served
// never syncs, and the first sync waits for every cache.
//
// The three outcomes: served; not served (the group version or the
// resource is missing), then only Opts.State.ServiceCIDRs count, until the
// proxy restarts (an apiserver upgrade that adds the API is not noticed);
// inconclusive (any other error), retried with backoff, because an
// apiserver that cannot answer discovery cannot fill the other caches
// either. ok is false only when ctx ended first.
func serviceCIDRsServed(ctx context.Context, d discovery.DiscoveryInterface) (served, ok bool) {
	logger := klog.FromContext(ctx)
	gv := networkingv1.SchemeGroupVersion.String()
	wait := discoveryRetryMin
	for {
		list, err := d.ServerResourcesForGroupVersion(gv)
		switch {
		case err == nil:
			for _, r := range list.APIResources {
				if r.Name == "servicecidrs" {
					return true, true
				}
			}
			logger.Info("The apiserver does not serve ServiceCIDRs; using only the configured ones", "groupVersion", gv)
			return false, true
		case apierrors.IsNotFound(err):
			logger.Info("The apiserver does not serve ServiceCIDRs; using only the configured ones", "groupVersion", gv)
			return false, true
		}
		logger.Error(err, "Discovery failed; will retry", "groupVersion", gv, "retryIn", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, false
		case <-t.C:
		}
		wait = min(2*wait, discoveryRetryMax)
	}
}

// serviceCIDRs returns the sorted, distinct union of the configured Service
// CIDRs and those of every ServiceCIDR object. A CIDR that does not parse
// is skipped with a warning naming its object; the warnings are logged
// once per change (the union is only computed again after a ServiceCIDR
// event).
func (p *Proxy) serviceCIDRs(ctx context.Context) ([]netip.Prefix, error) {
	out := slices.Clone(p.opts.State.ServiceCIDRs)
	if p.cidrs != nil {
		objs, err := p.cidrs.List(labels.Everything())
		if err != nil {
			return nil, fmt.Errorf("list servicecidrs: %w", err)
		}
		slices.SortFunc(objs, func(a, b *networkingv1.ServiceCIDR) int { return cmp.Compare(a.Name, b.Name) })
		for _, o := range objs {
			for i, s := range o.Spec.CIDRs {
				pfx, err := parseServiceCIDR(s)
				if err != nil {
					klog.FromContext(ctx).Info("Warning: skipping an invalid ServiceCIDR",
						"serviceCIDR", o.Name, "index", i, "err", err)
					continue
				}
				out = append(out, pfx)
			}
		}
	}
	slices.SortFunc(out, comparePrefix)
	return slices.Compact(out), nil
}

// parseServiceCIDR parses one spec.cidrs entry. A non-canonical prefix
// ("10.96.0.1/16") is masked; an IPv4-mapped IPv6 one has no family of its
// own and is refused, as the apiserver refuses it.
func parseServiceCIDR(s string) (netip.Prefix, error) {
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if pfx.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q: IPv4-mapped IPv6 prefix", s)
	}
	return pfx.Masked(), nil
}

func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}
