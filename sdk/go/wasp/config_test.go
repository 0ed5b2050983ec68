package wasp_test

import (
	"errors"
	"testing"

	"github.com/wasp-proxy/wasp/sdk/go/wasp"
)

func TestRunConfigure(t *testing.T) {
	var got []byte
	handler := func(config []byte) error {
		got = config
		switch string(config) {
		case `"bad"`:
			return errors.New("zones: want a list")
		case `"empty"`:
			return errors.New("")
		case `"panic"`:
			panic("no zones")
		}
		return nil
	}
	tests := []struct {
		name    string
		handler wasp.ConfigureFunc
		config  string
		want    string // the rejection; "" accepted
	}{
		{"no handler, none", nil, "", ""},
		{"no handler, null", nil, " null ", ""},
		{"no handler, empty object", nil, "{ \n}", ""},
		{"no handler, config", nil, `{"zones":["a"]}`, "this module takes no configuration (it registers no wasp.Configure handler)"},
		{"accepted", handler, `{"zones":["a"]}`, ""},
		{"rejected", handler, `"bad"`, "zones: want a list"},
		{"rejected without text", handler, `"empty"`, "configuration rejected"},
		{"panic", handler, `"panic"`, "panic: no zones"},
	}
	defer wasp.Configure(nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wasp.Configure(tc.handler)
			in := []byte(tc.config)
			if msg := wasp.RunConfigure(in); msg != tc.want {
				t.Fatalf("got %q, want %q", msg, tc.want)
			}
			if tc.handler != nil && len(in) > 0 {
				in[0] = 'X' // the host reuses its buffer for batches
				if string(got) != tc.config {
					t.Errorf("the handler's config %q changed with the input buffer: not a copy", got)
				}
			}
		})
	}
}
