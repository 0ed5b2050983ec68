package proxy

import (
	"slices"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

func TestMerge(t *testing.T) {
	svcs := func(keys ...string) []backends.Service {
		var out []backends.Service
		for _, k := range keys {
			out = append(out, backends.Service{Key: k})
		}
		return out
	}
	tests := []struct {
		name string
		prev []string
		drop []string
		add  []string
		want []string
	}{
		{name: "nothing", prev: []string{"a", "c"}, want: []string{"a", "c"}},
		{name: "empty to empty", want: nil},
		{name: "add to empty", add: []string{"a", "b"}, want: []string{"a", "b"}},
		{name: "drop all", prev: []string{"a", "b"}, drop: []string{"a", "b"}, want: nil},
		{name: "replace in place", prev: []string{"a", "b", "c"}, drop: []string{"b"}, add: []string{"b"}, want: []string{"a", "b", "c"}},
		{name: "insert first, middle, last", prev: []string{"b", "d"}, add: []string{"a", "c", "e"}, want: []string{"a", "b", "c", "d", "e"}},
		{name: "drop missing keys", prev: []string{"b", "d"}, drop: []string{"a", "c", "e"}, want: []string{"b", "d"}},
		{name: "drop and add interleaved", prev: []string{"a", "b", "c", "d"}, drop: []string{"a", "c", "d"}, add: []string{"bb", "d", "e"},
			want: []string{"b", "bb", "d", "e"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := svcs(tt.prev...)
			before := slices.Clone(prev)
			got := merge(prev, tt.drop, svcs(tt.add...))
			var keys []string
			for _, s := range got {
				keys = append(keys, s.Key)
			}
			if !slices.Equal(keys, tt.want) || (got == nil) != (tt.want == nil) {
				t.Errorf("merge = %q; want %q", keys, tt.want)
			}
			if !slices.EqualFunc(prev, before, func(a, b backends.Service) bool { return a.Key == b.Key }) {
				t.Errorf("merge modified prev: %v", prev)
			}
		})
	}
}
