package proxy

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
)

// DefaultDriftCheckPeriod is the default of Opts.DriftCheckPeriod:
// upstream's default sync period.
const DefaultDriftCheckPeriod = 30 * time.Second

// DriftReport is one family's drift check, for Metrics.
type DriftReport struct {
	Family backends.Family
	// Drift is what differed; nil or empty: nothing did.
	Drift *backends.Drift
	// Err, if not nil, is why the check could not be made.
	Err error
	// Duration is how long the check took.
	Duration time.Duration
}

// driftLoop checks the backends for drift every DriftCheckPeriod until
// ctx is done, and asks for a sync when one drifted: that sync rewrites
// the drifted family's dataplane in full.
func (p *Proxy) driftLoop(ctx context.Context) {
	p.every(ctx, p.opts.DriftCheckPeriod, func() {
		if p.checkDrift(ctx) {
			p.runner.request()
		}
	})
}

// every calls f every period, after it, until ctx is done.
func (p *Proxy) every(ctx context.Context, period time.Duration, f func()) {
	for {
		t := p.clock.NewTimer(period)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		f()
	}
}

// checkDrift checks every family whose backend can be checked
// (backends.DriftChecker), logs and reports what it found, and reports
// whether a family drifted.
func (p *Proxy) checkDrift(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	drifted := false
	for _, f := range p.families {
		dc, ok := p.opts.Backends[f].(backends.DriftChecker)
		if !ok {
			continue
		}
		start := p.clock.Now()
		d, err := dc.CheckDrift(ctx)
		r := DriftReport{Family: f, Drift: d, Err: err, Duration: p.clock.Since(start)}
		switch {
		case err != nil:
			logger.Error(err, "Dataplane drift check failed; will check again", "ipFamily", familyName(f), "retryIn", p.opts.DriftCheckPeriod)
		case !d.Empty():
			drifted = true
			logger.Info("Dataplane changed behind wasp's back; repairing it with a full rewrite",
				"ipFamily", familyName(f), "objects", d.Objects, "differences", d.Examples)
		default:
			logger.V(4).Info("Dataplane drift check: no drift", "ipFamily", familyName(f), "elapsed", r.Duration)
		}
		if m := p.opts.Metrics; m != nil {
			m.DriftChecked(&r)
		}
	}
	return drifted
}
