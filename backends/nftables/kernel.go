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
	// start-up, after a failed transaction and for a drift check, never on
	// a regular sync.
	load(ctx context.Context, family backends.Family, table string) (*inventory, error)
	// rules calls fn for every rule of the table, each chain's in order,
	// with the rule's tag (ruleTag; 0: it has none).
	rules(ctx context.Context, family backends.Family, table string, fn func(chain string, tag uint64)) error
	// elements calls fn for every element of the table's set s.
	elements(ctx context.Context, family backends.Family, table string, s *Set, fn func(Element)) error
	// generation returns the ruleset generation of the network namespace:
	// every commit, of any table, changes it.
	generation(ctx context.Context) (uint32, error)
	// close releases the kernel's resources.
	close() error
}

// inventory is what a table holds: its chains (with their hook, nil for a
// regular chain) and its named sets and maps (as far as the kernel
// describes them).
type inventory struct {
	exists    bool
	chains    map[string]*BaseChain
	notAccept map[string]bool // base chains whose policy is not accept
	sets      map[string]*Set
}
