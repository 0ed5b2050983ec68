package demo

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummary(t *testing.T) {
	ts := targets()[:2]
	tests := []struct {
		name    string
		tallies []tally
		want    []string
		wantErr []string
	}{
		{"as expected", []tally{{byPod: map[string]int{"web-2": 2, "web-1": 1}}, {byPod: map[string]int{"web-3": 3}}},
			[]string{"web-1 1, web-2 2 ", "web-3 3 "}, nil},
		{"failures and strays", []tally{{byPod: map[string]int{"web-9": 1}, failed: 2}, {byPod: map[string]int{}}},
			[]string{"web-9 1, no response 2"},
			[]string{"answered by web-9, want only [web-1 web-2 web-3]", "2 requests without response"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := summary(&out, ts, tc.tallies)
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("summary lacks %q:\n%s", w, out.String())
				}
			}
			if len(tc.wantErr) == 0 && err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v does not contain %q", err, w)
				}
			}
		})
	}
}
