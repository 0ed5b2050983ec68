package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"

	fw "github.com/wasp-proxy/wasp/test/framework"
)

// tcpSynSent is conntrack's TCP state of a connection whose SYN got no
// answer.
const tcpSynSent = 1

// explainTimeout returns err, a request to ip:port over network that
// timed out, with what the proxy node's conntrack table holds of TCP
// connections toward ip:port that never got past their SYN: those
// without DNAT (the SYN came before the Service's rules, or missed them)
// and, by endpoint, those whose endpoint did not answer. A later reader
// of a lost request so sees which of the two it was. Other errors, and
// UDP, are returned as they are. The time it says can be matched with
// wasp's log.
func explainTimeout(s *suite, network string, ip netip.Addr, port uint16, err error) error {
	if !fw.IsTimeout(err) || !strings.HasPrefix(network, "tcp") {
		return err
	}
	entries, cerr := fw.Conntrack(s.nodeA().NS)
	if cerr != nil {
		return fmt.Errorf("%w (conntrack of the proxy node: %v)", err, cerr)
	}
	to := netip.AddrPortFrom(ip, port)
	unNATed, byEndpoint := 0, map[netip.AddrPort]int{}
	for _, e := range entries {
		if e.Proto != syscall.IPPROTO_TCP || e.OrigDst != to || e.TCPState != tcpSynSent {
			continue
		}
		if e.ReplySrc == to {
			unNATed++
		} else {
			byEndpoint[e.ReplySrc]++
		}
	}
	eps := make([]string, 0, len(byEndpoint))
	for ep, n := range byEndpoint {
		eps = append(eps, fmt.Sprintf("%s: %d", ep, n))
	}
	slices.Sort(eps)
	return fmt.Errorf("%w (timed out at %s; the proxy node's conntrack holds unanswered SYNs toward %s: %d without DNAT, DNATed %v)",
		err, time.Now().Format("15:04:05.000"), to, unNATed, eps)
}
