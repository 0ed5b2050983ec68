package proxy

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// runner runs fn on request, like upstream's BoundedFrequencyRunner
// (k8s.io/kubernetes/pkg/util/async) with maxInterval off:
//
//   - requests coalesce: any number of them between two runs cause one run;
//   - a token bucket of size burst, refilled one token per minInterval,
//     bounds how often fn runs;
//   - when fn fails, it runs again later even without a request (a request
//     before then runs it sooner): retryBase after the first failure,
//     doubling with each failure in a row up to retryPeriod, so that a
//     passing problem (the apiserver restarting, a busy kernel) costs
//     seconds while a lasting one is retried at upstream's pace.
//
// It is written here, not taken from client-go's flowcontrol, because
// flowcontrol's rate limiters only answer "may I run now" or block: the
// coalescing of pending requests and the retry timer, which are the subtle
// part, would still be ours. Keeping all of it in one small type over an
// injected clock lets the tests drive it with a fake clock and count runs.
type runner struct {
	fn          func(context.Context) error
	minInterval time.Duration
	burst       int
	retryPeriod time.Duration
	clock       clock.Clock

	mu      sync.Mutex
	pending bool          // a run was requested and has not started yet
	wake    chan struct{} // cap 1: tells loop to look at pending

	// Owned by loop.
	tokens   int
	refill   time.Time // when tokens were last topped up
	retryAt  time.Time // zero: no retry scheduled
	failures int       // fn's failures in a row
}

// retryBase is the first retry's delay after a failure; see runner.
const retryBase = time.Second

// retryDelay is the delay before the retry after failures failures in a
// row (at least 1).
func (r *runner) retryDelay(failures int) time.Duration {
	d := retryBase
	for i := 1; i < failures && d < r.retryPeriod; i++ {
		d *= 2
	}
	return min(d, r.retryPeriod)
}

func newRunner(fn func(context.Context) error, minInterval time.Duration, burst int, retryPeriod time.Duration, c clock.Clock) *runner {
	return &runner{
		fn:          fn,
		minInterval: minInterval,
		burst:       burst,
		retryPeriod: retryPeriod,
		clock:       c,
		wake:        make(chan struct{}, 1),
		tokens:      burst,
		refill:      c.Now(),
	}
}

// request asks for a run. It never blocks; requests made before loop starts
// are kept and served by its first run.
func (r *runner) request() {
	r.mu.Lock()
	r.pending = true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// loop serves requests until ctx is done. It runs fn on its own goroutine
// only, so fn never runs concurrently with itself.
func (r *runner) loop(ctx context.Context) {
	var (
		timer    clock.Timer
		deadline time.Time // when timer fires; zero: no timer
	)
	stop := func() {
		if timer != nil {
			timer.Stop()
			timer, deadline = nil, time.Time{}
		}
	}
	defer stop()
	for {
		now := r.clock.Now()
		wait, run := r.next(now)
		if run {
			stop()
			if err := r.fn(ctx); err != nil {
				r.failures++
				r.retryAt = r.clock.Now().Add(r.retryDelay(r.failures))
			} else {
				r.retryAt, r.failures = time.Time{}, 0
			}
			continue
		}
		// Keep a timer that already fires when wanted: re-arming it on
		// every wake-up would only add work (and, under a fake clock,
		// a window where a Step is missed).
		if at := now.Add(wait); wait == 0 || !at.Equal(deadline) {
			stop()
			if wait > 0 {
				timer, deadline = r.clock.NewTimer(wait), at
			}
		}
		var timerC <-chan time.Time
		if timer != nil {
			timerC = timer.C()
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-timerC:
			timer, deadline = nil, time.Time{}
		}
	}
}

// next decides whether to run at now (consuming a token and the pending
// request) and, if not, how long to sleep before deciding again; 0 means
// until the next request.
func (r *runner) next(now time.Time) (wait time.Duration, run bool) {
	r.topUp(now)

	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.retryAt.IsZero() && !now.Before(r.retryAt) {
		r.pending = true
		r.retryAt = time.Time{}
	}
	if r.pending {
		if r.tokens > 0 {
			r.tokens--
			r.pending = false
			return 0, true
		}
		wait = r.refill.Add(r.minInterval).Sub(now)
	}
	if !r.retryAt.IsZero() {
		if d := r.retryAt.Sub(now); wait == 0 || d < wait {
			wait = d
		}
	}
	return wait, false
}

// topUp adds the tokens earned since the last refill.
func (r *runner) topUp(now time.Time) {
	if r.tokens >= r.burst {
		r.refill = now
		return
	}
	if r.minInterval <= 0 {
		r.tokens, r.refill = r.burst, now
		return
	}
	n := int(now.Sub(r.refill) / r.minInterval)
	if n <= 0 {
		return
	}
	r.tokens = min(r.burst, r.tokens+n)
	if r.tokens == r.burst {
		r.refill = now
	} else {
		r.refill = r.refill.Add(time.Duration(n) * r.minInterval)
	}
}
