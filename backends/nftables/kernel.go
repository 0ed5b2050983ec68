package nftables

import (
	"context"

	"github.com/wasp-proxy/wasp/backends"
)

// kernel is the seam between the Backend and what it programs: the
// netlink implementation (netlink_linux.go) or the Fake.
type kernel interface {
	// apply runs tx atomically: on error nothing of it took effect.
	apply(ctx context.Context, tx *Transaction) error
	// load returns what the table holds, by name. The Backend calls it at
	// start-up and after a failed transaction, never on a regular sync.
	load(ctx context.Context, family backends.Family, table string) (*inventory, error)
	// close releases the kernel's resources.
	close() error
}

// inventory is what a table holds: its chains (with their hook, nil for a
// regular chain) and its named sets and maps (as far as the kernel
// describes them).
type inventory struct {
	exists bool
	chains map[string]*BaseChain
	sets   map[string]*Set
}
