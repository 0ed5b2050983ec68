package nodesetup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// A setting is one kernel parameter Run may write.
type setting struct {
	name   string // as operators write it: sysctl name, or module.parameter
	path   string // canonical path of its file
	global bool   // one value for the whole kernel, not per network namespace
}

// The settings Run knows. The conntrack sysctls but nf_conntrack_max are
// per network namespace; nf_conntrack_max and the module's hashsize are
// global, and the kernel lets only the initial namespace change them.
var (
	settingConntrackMax = setting{name: "net.netfilter.nf_conntrack_max", path: "/proc/sys/net/netfilter/nf_conntrack_max", global: true}
	settingHashsize     = setting{name: "nf_conntrack.hashsize", path: "/sys/module/nf_conntrack/parameters/hashsize", global: true}

	settingTCPEstablished = setting{name: "net.netfilter.nf_conntrack_tcp_timeout_established", path: "/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established"}
	settingTCPCloseWait   = setting{name: "net.netfilter.nf_conntrack_tcp_timeout_close_wait", path: "/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_close_wait"}
	settingTCPBeLiberal   = setting{name: "net.netfilter.nf_conntrack_tcp_be_liberal", path: "/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal"}
	settingUDPTimeout     = setting{name: "net.netfilter.nf_conntrack_udp_timeout", path: "/proc/sys/net/netfilter/nf_conntrack_udp_timeout"}
	settingUDPStream      = setting{name: "net.netfilter.nf_conntrack_udp_timeout_stream", path: "/proc/sys/net/netfilter/nf_conntrack_udp_timeout_stream"}

	settingRouteLocalnet = setting{name: "net.ipv4.conf.all.route_localnet", path: "/proc/sys/net/ipv4/conf/all/route_localnet"}
)

// cpuOnlinePath lists the node's online CPUs, as ranges ("0-3,8-11").
const cpuOnlinePath = "/sys/devices/system/cpu/online"

// A want is a value for a setting. A raise-only want leaves a larger
// value alone, so that a limit an operator raised is never lowered.
type want struct {
	setting
	value int
	raise bool
}

// plan returns the writes c asks for, in order, on a node with cpus
// CPUs: a pure function of its arguments.
func plan(c *Config, cpus int) []want {
	ct := &c.Conntrack
	var out []want
	if m := conntrackMax(ct, cpus); m > 0 {
		out = append(out,
			want{settingConntrackMax, m, true},
			want{settingHashsize, m / 4, true})
	}
	// The rest in kube-proxy's order; 0 (or false) leaves a setting alone.
	for _, w := range []struct {
		s setting
		v int64
	}{
		{settingTCPEstablished, seconds(ct.TCPEstablishedTimeout)},
		{settingTCPCloseWait, seconds(ct.TCPCloseWaitTimeout)},
		{settingTCPBeLiberal, one(ct.TCPBeLiberal)},
		{settingUDPTimeout, seconds(ct.UDPTimeout)},
		{settingUDPStream, seconds(ct.UDPStreamTimeout)},
		{settingRouteLocalnet, one(c.RouteLocalnet)},
	} {
		if w.v > 0 {
			out = append(out, want{setting: w.s, value: int(w.v)})
		}
	}
	return out
}

// conntrackMax is kube-proxy's nf_conntrack_max: max(MaxPerCore × cpus,
// Min), or 0 (unchanged) when MaxPerCore is 0. It saturates at the
// kernel's limit.
func conntrackMax(ct *Conntrack, cpus int) int {
	if ct.MaxPerCore <= 0 {
		return 0
	}
	scaled := int64(ct.MaxPerCore) * int64(max(cpus, 1))
	return int(min(max(scaled, int64(ct.Min)), maxConntrackMax))
}

// seconds truncates d to whole seconds, as kube-proxy does.
func seconds(d time.Duration) int64 { return int64(d / time.Second) }

// one is 1 for true: the setting's "on" value; false leaves it alone.
func one(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Action is what Run did with a setting.
type Action string

const (
	// Written: the setting had another value and now has the wanted one.
	Written Action = "written"
	// Unchanged: the setting already had the wanted value, or a larger
	// one for a limit that is only ever raised.
	Unchanged Action = "unchanged"
	// Failed: the setting could not be read or written; Run's error says
	// why.
	Failed Action = "failed"
)

// Setting is the outcome of one setting.
type Setting struct {
	Name   string `json:"name"`             // e.g. net.netfilter.nf_conntrack_max
	Path   string `json:"path"`             // e.g. /proc/sys/net/netfilter/nf_conntrack_max
	Value  int    `json:"value"`            // the wanted value
	Before string `json:"before,omitempty"` // the value found, "" if unreadable
	Action Action `json:"action"`
}

// ErrReadOnly is wrapped by the error of a setting whose file is on a
// read-only mount, as /sys and /proc/sys are in an unprivileged
// container (and, by a known Docker bug, sometimes /sys in a privileged
// one).
var ErrReadOnly = errors.New("read-only mount")

// apply brings each want about through f, in order, and returns what it
// did and every failure, each naming the setting and its value.
func apply(ctx context.Context, f files, wants []want) ([]Setting, error) {
	logger := klog.FromContext(ctx)
	var (
		out  []Setting
		errs []error
	)
	for _, w := range wants {
		s := Setting{Name: w.name, Path: w.path, Value: w.value}
		err := applyOne(f, w, &s)
		if err != nil {
			s.Action = Failed
			errs = append(errs, settingError(w, err))
		} else {
			logger.Info("Node setting", "setting", w.name, "value", w.value, "before", s.Before, "action", string(s.Action))
		}
		out = append(out, s)
	}
	return out, errors.Join(errs...)
}

func applyOne(f files, w want, s *Setting) error {
	before, err := f.read(w.path)
	if err != nil {
		return err
	}
	s.Before = before
	cur, err := strconv.ParseInt(before, 10, 64)
	if err != nil {
		return fmt.Errorf("read %s: %q is not a number", w.path, before)
	}
	if cur == int64(w.value) || w.raise && cur > int64(w.value) {
		s.Action = Unchanged
		return nil
	}
	if err := f.write(w.path, strconv.Itoa(w.value)); err != nil {
		return err
	}
	s.Action = Written
	return nil
}

// settingError names the setting and value, and says what to do about
// the errors an operator can fix.
func settingError(w want, err error) error {
	var hint string
	switch {
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("%s=%d: %w: %w (run the setup where %s is writable, e.g. a privileged init container)",
			w.name, w.value, ErrReadOnly, err, mountOf(w.path))
	case errors.Is(err, fs.ErrNotExist):
		hint = "the kernel has no such setting: is the nf_conntrack module loaded?"
		if w.setting == settingRouteLocalnet {
			hint = "the kernel has no such setting: is IPv4 enabled?"
		}
	case errors.Is(err, syscall.EOPNOTSUPP) && w.global,
		errors.Is(err, fs.ErrPermission) && w.global:
		hint = "a global setting: only root in the initial network namespace can change it"
	case errors.Is(err, fs.ErrPermission):
		hint = "needs root"
	}
	if hint != "" {
		return fmt.Errorf("%s=%d: %w (%s)", w.name, w.value, err, hint)
	}
	return fmt.Errorf("%s=%d: %w", w.name, w.value, err)
}

// mountOf returns the mount a canonical path is on: /proc/sys or /sys.
func mountOf(path string) string {
	if strings.HasPrefix(path, "/proc/sys/") {
		return "/proc/sys"
	}
	return "/sys"
}

// onlineCPUs counts the node's online CPUs from sysfs, as upstream does
// (the process's affinity may be narrower than the node, and the table
// is the node's), or falls back to the Go runtime's count.
func onlineCPUs(f files) int {
	s, err := f.read(cpuOnlinePath)
	if err != nil {
		return runtime.NumCPU()
	}
	if n, ok := countCPUs(s); ok {
		return n
	}
	return runtime.NumCPU()
}

// countCPUs counts the CPUs of a kernel CPU list ("0-3,8,10-11").
func countCPUs(list string) (int, bool) {
	n := 0
	for part := range strings.SplitSeq(strings.TrimSpace(list), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0, false
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, false
			}
		}
		n += b - a + 1
	}
	return n, n > 0
}
