package nodesetup

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Config is what Run sets up. The zero value writes nothing and only
// probes the kernel.
type Config struct {
	// Conntrack holds kube-proxy's conntrack settings (its "conntrack"
	// configuration section and --conntrack-* flags). Optional; zero
	// fields leave their setting as the node has it.
	Conntrack Conntrack

	// RouteLocalnet sets net.ipv4.conf.all.route_localnet to 1, which
	// NodePorts answering on 127.0.0.1 need (upstream iptables mode's
	// --iptables-localhost-nodeports). Optional; false leaves it alone,
	// which is right for wasp's nftables mode: like upstream nftables, it
	// does not serve NodePorts on localhost.
	RouteLocalnet bool

	// Dataplane runs the probes of the dataplane wasp programs (the
	// proxy mode's, which its backend owns: nftables.Probes for
	// nftables), in NetNS, before the
	// conntrack probes; each NotSupported outcome fails Run. Optional:
	// nil probes no dataplane.
	Dataplane func(ctx context.Context) []ProbeResult

	// NetNS is the path of the network namespace to set up and probe,
	// e.g. /run/netns/foo. Optional; default the current one. The
	// conntrack timeouts and be_liberal are per network namespace;
	// nf_conntrack_max and the hash table size can only be raised from
	// the initial one.
	NetNS string

	// ProcRoot and SysRoot are where procfs and sysfs are mounted.
	// Optional; default /proc and /sys.
	ProcRoot, SysRoot string
}

// Conntrack holds the connection-tracking settings, with kube-proxy's
// meaning. A zero field leaves its setting unchanged.
type Conntrack struct {
	// MaxPerCore and Min size the conntrack table: nf_conntrack_max is
	// raised to max(MaxPerCore × CPUs, Min), and the hash table to a
	// quarter of that, when they are smaller. MaxPerCore 0 leaves both
	// unchanged, whatever Min. Optional; kube-proxy's defaults are 32768
	// and 131072.
	MaxPerCore, Min int

	// TCPEstablishedTimeout and TCPCloseWaitTimeout set
	// nf_conntrack_tcp_timeout_established and
	// nf_conntrack_tcp_timeout_close_wait, in whole seconds. Optional;
	// kube-proxy's defaults are 24h and 1h.
	TCPEstablishedTimeout, TCPCloseWaitTimeout time.Duration

	// TCPBeLiberal sets nf_conntrack_tcp_be_liberal to 1: conntrack
	// stops marking out-of-window TCP packets invalid. Optional; false
	// leaves the setting as it is (it never writes 0).
	TCPBeLiberal bool

	// UDPTimeout and UDPStreamTimeout set nf_conntrack_udp_timeout and
	// nf_conntrack_udp_timeout_stream, in whole seconds. Optional.
	UDPTimeout, UDPStreamTimeout time.Duration
}

// ErrInvalidConfig is wrapped by the error Run returns for a Config it
// refuses; nothing is written then.
var ErrInvalidConfig = errors.New("invalid node setup configuration")

// validate returns every problem of c, each naming its field.
func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...)))
	}
	ct := &c.Conntrack
	for _, f := range []struct {
		name string
		v    int
	}{{"conntrack.maxPerCore", ct.MaxPerCore}, {"conntrack.min", ct.Min}} {
		if f.v < 0 {
			bad("%s: %d is negative", f.name, f.v)
		}
	}
	if ct.MaxPerCore > maxConntrackMax {
		bad("conntrack.maxPerCore: %d is over %d", ct.MaxPerCore, maxConntrackMax)
	}
	if ct.Min > maxConntrackMax {
		bad("conntrack.min: %d is over %d", ct.Min, maxConntrackMax)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"conntrack.tcpEstablishedTimeout", ct.TCPEstablishedTimeout},
		{"conntrack.tcpCloseWaitTimeout", ct.TCPCloseWaitTimeout},
		{"conntrack.udpTimeout", ct.UDPTimeout},
		{"conntrack.udpStreamTimeout", ct.UDPStreamTimeout},
	} {
		switch {
		case f.d < 0:
			bad("%s: %v is negative", f.name, f.d)
		case f.d > 0 && f.d < time.Second:
			// Truncated to whole seconds it would be 0, which the kernel
			// takes as "expire at once".
			bad("%s: %v is under a second", f.name, f.d)
		case f.d/time.Second > maxTimeoutSeconds:
			bad("%s: %v is over %d seconds", f.name, f.d, maxTimeoutSeconds)
		}
	}
	return errors.Join(errs...)
}

// The kernel keeps nf_conntrack_max and the timeouts (in seconds) as
// 32-bit signed integers.
const (
	maxConntrackMax   = 1<<31 - 1
	maxTimeoutSeconds = 1<<31 - 1
)
