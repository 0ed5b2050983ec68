//go:build linux

package nodesetup

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/wasp-proxy/wasp/backends"
)

// conntrackProbes returns the conntrack netlink probe, which every mode
// needs (the conntrack cleaner), asked in the network namespace at netns.
func conntrackProbes(netns string) []probe {
	return []probe{
		{Name: probeConntrackNL, Checks: "list the conntrack table over netlink (nf_conntrack_netlink)",
			Run: func(context.Context) (Outcome, string) { return backends.ProbeOutcomeOf(listConntrack(netns)) }},
	}
}

// listConntrack lists the IPv4 conntrack table once, as the conntrack
// cleaner does at every sync.
func listConntrack(path string) error {
	h, err := netlinkHandle(path)
	if err != nil {
		return err
	}
	defer h.Close()
	_, err = h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	if errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil // the table changed during the dump: it works
	}
	return err
}

func netlinkHandle(path string) (*netlink.Handle, error) {
	if path == "" {
		return netlink.NewHandle(unix.NETLINK_NETFILTER)
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open network namespace %q: %w", path, err)
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
}
