package proxy

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

const minInterval = time.Second

// testRunner is a runner over a fake clock whose fn reports each run on
// ran and fails while fail holds errors.
type testRunner struct {
	*runner
	clock *clocktesting.FakeClock
	ran   chan int // the run's number, from 1
	fail  chan error
}

func startRunner(t *testing.T) *testRunner {
	t.Helper()
	tr := &testRunner{
		clock: clocktesting.NewFakeClock(time.Unix(1e9, 0)),
		ran:   make(chan int, 1000),
		fail:  make(chan error, 10),
	}
	n := 0
	tr.runner = newRunner(func(context.Context) error {
		n++
		tr.ran <- n
		select {
		case err := <-tr.fail:
			return err
		default:
			return nil
		}
	}, minInterval, syncBurst, 30*time.Second, tr.clock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.loop(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return tr
}

// wantRun waits for the run numbered n.
func (tr *testRunner) wantRun(t *testing.T, n int) {
	t.Helper()
	select {
	case got := <-tr.ran:
		if got != n {
			t.Fatalf("run %d; want run %d", got, n)
		}
	case <-time.After(eventually):
		t.Fatalf("run %d never came", n)
	}
}

// waitTimer waits until the runner sleeps on the fake clock.
func (tr *testRunner) waitTimer(t *testing.T) {
	t.Helper()
	waitFor(t, "the runner to arm its timer", tr.clock.HasWaiters)
}

func TestRunnerCoalescesBurst(t *testing.T) {
	tr := startRunner(t)

	// The bucket holds 2 tokens: two requests, two runs, no time passing.
	tr.request()
	tr.wantRun(t, 1)
	tr.request()
	tr.wantRun(t, 2)

	// A burst of events with no token left: one run, a token later.
	for range 100 {
		tr.request()
	}
	tr.waitTimer(t)
	if n := len(tr.ran); n != 0 {
		t.Fatalf("%d runs without a token", n)
	}
	tr.clock.Step(minInterval)
	tr.wantRun(t, 3)

	// Nothing is pending: a long quiet time refills the bucket to 2 and
	// the next request runs at once, as run 4 (no stray run in between).
	tr.clock.Step(10 * minInterval)
	tr.request()
	tr.wantRun(t, 4)
	tr.request()
	tr.wantRun(t, 5)
	tr.request()
	tr.waitTimer(t)
	if n := len(tr.ran); n != 0 {
		t.Fatalf("%d runs beyond the burst of 2", n)
	}
}

func TestRunnerRetriesAfterFailure(t *testing.T) {
	tr := startRunner(t)
	// noRunWithin checks that no run comes for d (less one millisecond)
	// of fake time, then steps to d: the next run is due.
	noRunWithin := func(d time.Duration) {
		t.Helper()
		tr.waitTimer(t)
		tr.clock.Step(d - time.Millisecond)
		time.Sleep(20 * time.Millisecond) // a wrongly fired run would show by now
		if n := len(tr.ran); n != 0 {
			t.Fatalf("a run less than %v after a failure", d)
		}
		tr.clock.Step(time.Millisecond)
	}

	// Failures in a row: the retry timer alone brings each next run,
	// retryBase after the first, doubling up to the retry period.
	for range 7 {
		tr.fail <- errors.New("injected")
	}
	tr.request()
	tr.wantRun(t, 1)
	for i, d := range []time.Duration{1, 2, 4, 8, 16, 30, 30} {
		noRunWithin(d * time.Second)
		tr.wantRun(t, i+2)
	}

	// Run 8 succeeded: no further retry, however long we wait.
	time.Sleep(20 * time.Millisecond)
	tr.clock.Step(time.Hour)
	time.Sleep(20 * time.Millisecond)
	if n := len(tr.ran); n != 0 {
		t.Fatalf("%d runs after a success without a request", n)
	}

	// A new failure starts from retryBase again.
	tr.fail <- errors.New("injected")
	tr.request()
	tr.wantRun(t, 9)
	noRunWithin(retryBase)
	tr.wantRun(t, 10)
}

func TestRunnerServesRequestsBeforeLoop(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	ran := make(chan struct{}, 10)
	r := newRunner(func(context.Context) error { ran <- struct{}{}; return nil }, minInterval, syncBurst, time.Minute, clock)
	r.request()
	r.request()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.loop(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	select {
	case <-ran:
	case <-time.After(eventually):
		t.Fatal("the early request was lost")
	}
}
