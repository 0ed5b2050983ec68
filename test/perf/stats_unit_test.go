package perf

import (
	"slices"
	"testing"
	"time"
)

func TestSyncElapsed(t *testing.T) {
	tests := []struct {
		name, line, marker string
		want               time.Duration
		ok                 bool
	}{
		{
			name:   "kube-proxy IPv4",
			line:   `I1125 08:30:01.123456    4242 proxier.go:1822] "SyncProxyRules complete" ipFamily="IPv4" elapsed="36.312s"`,
			marker: "SyncProxyRules complete", want: 36312 * time.Millisecond, ok: true,
		},
		{
			name:   "kube-proxy IPv6 is skipped",
			line:   `I1125 08:30:01.123456    4242 proxier.go:1822] "SyncProxyRules complete" ipFamily="IPv6" elapsed="3.2ms"`,
			marker: "SyncProxyRules complete",
		},
		{
			name:   "microseconds",
			line:   `I1125 08:30:01.123456 1 sync.go:1] "Sync done" services=3 elapsed="812.5µs"`,
			marker: "Sync done", want: 812500 * time.Nanosecond, ok: true,
		},
		{
			name:   "unquoted, minutes",
			line:   `I1125 08:30:01.123456 1 sync.go:1] "Sync done" elapsed=1m2.5s full=true`,
			marker: "Sync done", want: 62500 * time.Millisecond, ok: true,
		},
		{
			name:   "other line",
			line:   `I1125 08:30:01.123456 1 sync.go:1] "Sync started" elapsed="1s"`,
			marker: "Sync done",
		},
		{
			name:   "no elapsed",
			line:   `I1125 08:30:01.123456 1 sync.go:1] "Sync done"`,
			marker: "Sync done",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := syncElapsed(tt.line, tt.marker)
			if got != tt.want || ok != tt.ok {
				t.Errorf("syncElapsed() = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParseSizes(t *testing.T) {
	tests := []struct {
		name, in string
		want     []int
		wantErr  bool
	}{
		{name: "one", in: "1000", want: []int{1000}},
		{name: "sorted, deduplicated, k suffix", in: "10k, 100,1000,1k", want: []int{100, 1000, 10000}},
		{name: "empty", in: " , ", wantErr: true},
		{name: "zero: the proxies at rest", in: "0,1k", want: []int{0, 1000}},
		{name: "negative", in: "-1", wantErr: true},
		{name: "junk", in: "many", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSizes(tt.in)
			if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
				t.Errorf("parseSizes(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	tests := []struct {
		name string
		p    float64
		want time.Duration
	}{
		{"median", 50, 50},
		{"p99", 99, 99},
		{"max", 100, 100},
		{"min", 0.5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(ds, tt.p); got != tt.want {
				t.Errorf("percentile(1..100, %v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
}
