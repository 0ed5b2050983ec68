package backends_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

func TestUnsupportedError(t *testing.T) {
	var err error = &backends.UnsupportedError{Key: "demo/web:http/TCP/ipv4", Feature: "reject"}
	wrapped := fmt.Errorf("windows: %w", err)
	tests := []struct {
		name string
		err  error
	}{
		{"bare", err},
		{"wrapped", wrapped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var u *backends.UnsupportedError
			if !errors.As(tt.err, &u) {
				t.Fatalf("errors.As(%v) found no UnsupportedError", tt.err)
			}
			if u.Key != "demo/web:http/TCP/ipv4" || u.Feature != "reject" {
				t.Errorf("errors.As = %+v, want its Key and Feature", *u)
			}
			if !errors.Is(tt.err, backends.ErrNotSupported) {
				t.Errorf("errors.Is(%v, ErrNotSupported) = false, want true", tt.err)
			}
			if errors.Is(tt.err, backends.ErrClosed) {
				t.Errorf("errors.Is(%v, ErrClosed) = true, want false", tt.err)
			}
		})
	}
	if got, want := err.Error(), "service port demo/web:http/TCP/ipv4: reject not supported"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
