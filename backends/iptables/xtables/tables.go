package xtables

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/internal/nsthread"
)

// LegacyTables returns the names of family's iptables-legacy tables that
// exist in the network namespace at netns ("" for the current one), as
// the kernel lists them in /proc/net/ip_tables_names (ip6_tables_names):
// none when x_tables' module for family is not loaded. Reading it creates
// nothing, where any iptables-legacy command on a table creates that
// table.
func LegacyTables(netns string, family backends.Family) ([]string, error) {
	file := "/proc/thread-self/net/ip_tables_names"
	if family == backends.IPv6 {
		file = "/proc/thread-self/net/ip6_tables_names"
	}
	var names []byte
	// A /proc/net file shows the namespace of the thread that opens it.
	err := nsthread.Do(netns, func() error {
		var err error
		names, err = os.ReadFile(file)
		if errors.Is(err, os.ErrNotExist) { // the module is not loaded
			return nil
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("iptables legacy %s: list the loaded tables: %w", family.String(), err)
	}
	return strings.Fields(string(names)), nil
}
