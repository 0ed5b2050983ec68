//go:build linux

package perf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/wasp-proxy/wasp/internal/netlab"
)

// Polling a ClusterIP until it answers: a new attempt every pollInterval,
// each given attemptTimeout. Attempts overlap, because before a proxy
// programs a ClusterIP its packets may be dropped (kube-proxy drops traffic
// to unallocated ClusterIPs) and a dropped SYN is only retried after a
// second: the first attempt started after the rules landed answers within
// a round trip, so the answer arrives at most pollInterval plus a round
// trip after the proxy programmed the Service.
const (
	pollInterval   = 5 * time.Millisecond
	attemptTimeout = 250 * time.Millisecond
)

// firstAnswer polls addr from ns until want answers, and returns when that
// answer arrived. It gives up after limit, when ctx ends, or when alive
// returns an error (the proxy exited).
func firstAnswer(ctx context.Context, ns *netlab.NS, addr netip.AddrPort, want string, limit time.Duration, alive func() error) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs before wg.Wait: stops the attempts in flight

	answered := make(chan time.Time, 1)
	var (
		mu   sync.Mutex
		last error // the last attempt's failure, for the error message
	)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if err := alive(); err != nil {
			return time.Time{}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, acancel := context.WithTimeout(ctx, attemptTimeout)
			defer acancel()
			id, err := ns.Ask(actx, "tcp", addr.String())
			if err == nil && id != want {
				err = fmt.Errorf("answered by %q", id)
			}
			if err != nil {
				mu.Lock()
				last = err
				mu.Unlock()
				return
			}
			select {
			case answered <- time.Now():
			default:
			}
		}()
		select {
		case at := <-answered:
			return at, nil
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			return time.Time{}, fmt.Errorf("no answer from %s by %q within %s (last attempt: %v)", addr, want, limit, last)
		case <-tick.C:
		}
	}
}

// connectLatencies opens n sequential TCP connections from ns to each
// target, alternating between targets connection by connection so that
// all see the same machine, and times each from connect until the answer
// to one echo request arrived. All connections come from one OS thread in
// the namespace: no thread is created between them.
func connectLatencies(ns *netlab.NS, targets []netip.AddrPort, n int) ([][]time.Duration, error) {
	out := make([][]time.Duration, len(targets))
	for i := range out {
		out[i] = make([]time.Duration, 0, n)
	}
	failures := make([]int, len(targets))
	var firstErr error
	err := ns.Do(func() error {
		d := net.Dialer{Timeout: 2 * time.Second}
		for range n {
			for i, target := range targets {
				lat, err := oneRequest(&d, target)
				if err != nil {
					failures[i]++
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: %w", target, err)
					}
					continue
				}
				out[i] = append(out[i], lat)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, f := range failures {
		// A lost connection now and then is the machine's business; more
		// than 1% is the dataplane's.
		if f*100 > n {
			return nil, fmt.Errorf("%d of %d connections to %s failed, first: %v", f, n, targets[i], firstErr)
		}
	}
	return out, nil
}

// oneRequest connects to target, sends one echo request, waits for the
// answer and closes; it returns the time from connect to answer.
func oneRequest(d *net.Dialer, target netip.AddrPort) (time.Duration, error) {
	start := time.Now()
	c, err := d.Dial("tcp", target.String())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(start.Add(2 * time.Second))
	if _, err := c.Write([]byte("who\n")); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return 0, err
	}
	lat := time.Since(start)
	if strings.TrimSpace(line) == "" {
		return 0, errors.New("empty answer")
	}
	return lat, nil
}
