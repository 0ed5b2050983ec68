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
