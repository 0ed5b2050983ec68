//go:build !linux

package conntrack

import (
	"fmt"
	"runtime"

	"github.com/wasp-proxy/wasp/backends"
)

// errNotSupported is returned by New on platforms without netlink
// conntrack.
var errNotSupported = fmt.Errorf("conntrack cleanup: %w on %s", backends.ErrNotSupported, runtime.GOOS)

// openTable fails: conntrack is a Linux netfilter facility.
func openTable(string) (table, error) {
	return nil, errNotSupported
}
