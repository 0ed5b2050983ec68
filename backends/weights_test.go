package backends_test

import (
	"slices"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

func TestNormalizeWeights(t *testing.T) {
	tests := []struct {
		name    string
		weights []uint32
		want    []uint32
		total   uint32
	}{
		{"none", nil, nil, 0},
		{"one", []uint32{5}, []uint32{1}, 1},
		{"equal weights are 1 each", []uint32{3, 3, 3}, []uint32{1, 1, 1}, 3},
		{"reduced by the gcd", []uint32{6, 2}, []uint32{3, 1}, 4},
		{"coprime stay", []uint32{2, 3, 5}, []uint32{2, 3, 5}, 10},
		{"0 counts as 1", []uint32{0, 2}, []uint32{1, 2}, 3},
		{"order kept", []uint32{1, 9}, []uint32{1, 9}, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var eps []backends.Endpoint
			for _, w := range tc.weights {
				eps = append(eps, backends.Endpoint{Weight: w})
			}
			ws, total := backends.NormalizeWeights(eps)
			if !slices.Equal(ws, tc.want) || total != tc.total {
				t.Errorf("got %v total %d, want %v total %d", ws, total, tc.want, tc.total)
			}
		})
	}
	t.Run("huge weights are scaled into MaxTotalWeight", func(t *testing.T) {
		eps := []backends.Endpoint{{Weight: 1<<32 - 1}, {Weight: 1<<32 - 2}, {Weight: 1}}
		ws, total := backends.NormalizeWeights(eps)
		var sum uint64
		for _, w := range ws {
			sum += uint64(w)
			if w == 0 {
				t.Errorf("a zero weight in %v", ws)
			}
		}
		if sum != uint64(total) || total > backends.MaxTotalWeight+uint32(len(eps)) {
			t.Errorf("weights %v add up to %d, total %d; want at most %d", ws, sum, total, backends.MaxTotalWeight+len(eps))
		}
		if ws[2] != 1 || ws[0] < ws[1] {
			t.Errorf("weights %v lost their proportion", ws)
		}
	})
}
