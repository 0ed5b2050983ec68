//go:build !linux

package iptables

import (
	"context"
	"fmt"
	"runtime"

	"github.com/wasp-proxy/wasp/backends"
)

// errNotSupported is returned by New and Probe where iptables cannot be
// programmed (not Linux).
var errNotSupported = fmt.Errorf("iptables: %w on %s", backends.ErrNotSupported, runtime.GOOS)

// New returns an error wrapping backends.ErrNotSupported: iptables is
// Linux's.
func New(ctx context.Context, o Opts) (*Backend, error) { return nil, errNotSupported }

// CleanupLeftovers does nothing: there is no iptables here.
func CleanupLeftovers(ctx context.Context, netns string) error { return nil }

// Probe returns an error wrapping backends.ErrNotSupported: iptables is
// Linux's.
func Probe(ctx context.Context, netns string) error { return errNotSupported }
