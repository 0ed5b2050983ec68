package perf

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// percentile returns the p-th percentile (0 < p <= 100) of ds by the
// nearest-rank method, or 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(float64(len(s))*p/100+0.999999) - 1
	rank = max(0, min(rank, len(s)-1))
	return s[rank]
}

// median is the 50th percentile.
func median(ds []time.Duration) time.Duration { return percentile(ds, 50) }

// elapsedRE finds the elapsed= value of a klog line, quoted or not:
// kube-proxy logs elapsed="36.3s", logr's text output elapsed=36.3s.
var elapsedRE = regexp.MustCompile(`\belapsed="?([0-9][0-9.]*[a-zµμ]+(?:[0-9.]+[a-zµμ]+)*)"?`)

// syncElapsed returns the elapsed duration of a sync log line: one that
// contains marker and is not about IPv6 only (kube-proxy runs one proxier
// per family and logs ipFamily="IPv6" for the second one; the Services
// measured here are IPv4).
func syncElapsed(line, marker string) (time.Duration, bool) {
	if !strings.Contains(line, marker) || strings.Contains(line, `"IPv6"`) || strings.Contains(line, "=IPv6") {
		return 0, false
	}
	m := elapsedRE.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	d, err := time.ParseDuration(strings.NewReplacer("μ", "µ").Replace(m[1]))
	if err != nil {
		return 0, false
	}
	return d, true
}

// syncs returns the elapsed durations of every sync line of log, in order.
func syncs(log, marker string) []time.Duration {
	var out []time.Duration
	for _, line := range strings.Split(log, "\n") {
		if d, ok := syncElapsed(line, marker); ok {
			out = append(out, d)
		}
	}
	return out
}

// parseSizes parses a comma-separated list of Service counts (0 or more),
// sorted ascending without duplicates.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		num, mult := f, 1
		if s, ok := strings.CutSuffix(strings.ToLower(f), "k"); ok {
			num, mult = s, 1000
		}
		n, err := strconv.Atoi(num)
		n *= mult
		// 0 loads no Services: the proxies at rest, with only the few
		// Services the measurements create (their fixed cost).
		if err != nil || n < 0 {
			return nil, fmt.Errorf("size %q: want a number of Services, 0 or more", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no sizes in %q", s)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// human formats a Service count as the table shows it: 100, 1k, 10k.
func human(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// seconds formats a duration for the table with about three significant
// digits: 36.3 s, 812 ms, 4.1 ms, 95 µs.
func seconds(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
}

// ratio formats a/b, or "-" when either is missing.
func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	r := a / b
	switch {
	case r >= 10:
		return fmt.Sprintf("%.0f", r)
	case r >= 0.1:
		return fmt.Sprintf("%.2f", r)
	default:
		return fmt.Sprintf("%.3f", r)
	}
}
