package backends

import "errors"

// ErrClosed is wrapped by the error of a Backend's Sync, Cleanup or
// CheckDrift called after its Close. The backend's own error says which
// backend (iptables: "iptables: backend closed").
var ErrClosed = errors.New("backend closed")

// ErrNotSupported is wrapped by the error of a backend asked for what its
// platform cannot do as a whole, such as New of the nftables backend on
// Windows; the backend's own error says what and where. What the backend
// cannot express for one service port is an UnsupportedError instead.
var ErrNotSupported = errors.New("not supported")

// UnsupportedError says that a backend cannot express Feature for the
// service port Key, such as a reject on Windows or a weighted split in
// ipvs. A backend that meets one programs the closest correct behaviour
// for that port (named by Feature: "reject: drops instead"), reports it,
// and goes on: it never fails the other ports, nor the Sync, for it.
// Callers find it with errors.As, among the errors a backend reports for
// its ports.
type UnsupportedError struct {
	// Key is the service port's Service.Key.
	Key string
	// Feature is what the backend cannot express, and what it does
	// instead when that is not obvious.
	Feature string
}

// Error returns "service port <key>: <feature> not supported"; the
// message wraps nothing, but errors.Is(err, ErrNotSupported) holds.
func (e *UnsupportedError) Error() string {
	return "service port " + e.Key + ": " + e.Feature + " " + ErrNotSupported.Error()
}

// Is reports whether target is ErrNotSupported, so that one errors.Is
// finds every kind of not supported.
func (e *UnsupportedError) Is(target error) bool { return target == ErrNotSupported }
