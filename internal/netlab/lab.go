//go:build linux

package netlab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/vishvananda/netns"

	"github.com/wasp-proxy/wasp/internal/nsthread"
)

// netnsDir is where named network namespaces are bind-mounted, as by
// `ip netns add`.
const netnsDir = "/run/netns"

// netnsDirOnce makes netnsDir, once per process, what `ip netns add`
// makes it: a mount point of its own, shared, so that the namespaces
// bound under it propagate to other mount namespaces. Without it, an
// `ip netns add` run while a lab is up (by the operator, another test)
// bind-mounts the directory onto itself above the lab's namespaces,
// which can then be neither seen nor deleted: "device or resource
// busy", until the next boot.
var netnsDirOnce = sync.OnceValue(func() error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return err
	}
	// Already a mount point (made by ip or an earlier process): make it
	// shared, as ip does each time. EINVAL: not a mount point yet.
	err := syscall.Mount("", netnsDir, "none", syscall.MS_SHARED|syscall.MS_REC, "")
	if errors.Is(err, syscall.EINVAL) {
		if err = syscall.Mount(netnsDir, netnsDir, "none", syscall.MS_BIND|syscall.MS_REC, ""); err == nil {
			err = syscall.Mount("", netnsDir, "none", syscall.MS_SHARED|syscall.MS_REC, "")
		}
	}
	if err != nil {
		return fmt.Errorf("make %s a shared mount point: %w", netnsDir, err)
	}
	return nil
})

// namePrefix starts every namespace a Lab creates.
const namePrefix = "wl"

var labCount atomic.Int64

// Lab is a set of network namespaces. Its methods are safe for concurrent
// use.
type Lab struct {
	prefix string // namePrefix<pid>-<n>-

	mu      sync.Mutex
	nss     []*NS
	closers []func()
	closed  bool
}

// NS is a named network namespace of a Lab.
type NS struct {
	lab  *Lab
	name string // short name given to AddNS
	full string // name under /run/netns
}

// New returns an empty Lab. It first removes namespaces left behind by
// labs of processes that no longer exist.
func New() (*Lab, error) {
	if err := Probe(); err != nil {
		return nil, err
	}
	removeStale()
	return &Lab{prefix: fmt.Sprintf("%s%d-%d-", namePrefix, os.Getpid(), labCount.Add(1))}, nil
}

// Probe reports why network labs cannot be built here, or nil if they can.
func Probe() error {
	if os.Geteuid() != 0 {
		return errors.New("netlab: needs root to create network namespaces")
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return fmt.Errorf("netlab: no network namespaces: %w", err)
	}
	return nil
}

// AddNS creates a network namespace with its loopback up, IPv6 duplicate
// address detection off (so addresses are usable at once), forwarding on
// for both families, and neither ICMP rate limits nor redirects.
func (l *Lab) AddNS(name string) (*NS, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errors.New("netlab: lab closed")
	}
	ns := &NS{lab: l, name: name, full: l.prefix + name}
	l.mu.Unlock()

	if err := netnsDirOnce(); err != nil {
		return nil, fmt.Errorf("netlab: %w", err)
	}
	err := nsthread.Fresh(func() error {
		h, err := netns.NewNamed(ns.full) // switches this thread into it
		if err != nil {
			return err
		}
		h.Close()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("netlab: create namespace %q: %w", ns.full, err)
	}
	l.mu.Lock()
	l.nss = append(l.nss, ns)
	l.mu.Unlock()

	// No ICMP rate limit (one a second per destination by default) and no
	// redirects (which, sent first to the same host, use up that limit):
	// a rejected connection must be refused at once, every time.
	for k, v := range map[string]string{
		"net/ipv6/conf/all/accept_dad":         "0",
		"net/ipv6/conf/default/accept_dad":     "0",
		"net/ipv4/ip_forward":                  "1",
		"net/ipv6/conf/all/forwarding":         "1",
		"net/ipv4/icmp_ratelimit":              "0",
		"net/ipv6/icmp/ratelimit":              "0",
		"net/ipv4/conf/all/send_redirects":     "0",
		"net/ipv4/conf/default/send_redirects": "0",
	} {
		if err := ns.Sysctl(k, v); err != nil {
			return nil, err
		}
	}
	if err := ns.linkUp("lo"); err != nil {
		return nil, err
	}
	return ns, nil
}

// Name returns the name given to AddNS.
func (ns *NS) Name() string { return ns.name }

// FullName returns the namespace's name under /run/netns, for
// `ip netns exec`.
func (ns *NS) FullName() string { return ns.full }

// Path returns the path of the namespace's bind mount, for nsenter --net or
// any API that takes a namespace path.
func (ns *NS) Path() string { return filepath.Join(netnsDir, ns.full) }

// Do runs f on a locked OS thread inside the namespace. The thread is
// discarded afterwards, so nothing f leaves behind (a changed namespace, a
// panic halfway) reaches other goroutines. Sockets f creates stay in the
// namespace.
func (ns *NS) Do(f func() error) error {
	h, err := netns.GetFromPath(ns.Path())
	if err != nil {
		return fmt.Errorf("netlab: namespace %q: %w", ns.name, err)
	}
	defer h.Close()
	return nsthread.Fresh(func() error {
		if err := netns.Set(h); err != nil {
			return fmt.Errorf("netlab: enter namespace %q: %w", ns.name, err)
		}
		return f()
	})
}

// Sysctl writes value to /proc/sys/<key> inside the namespace (key like
// "net/ipv4/ip_forward").
func (ns *NS) Sysctl(key, value string) error {
	return ns.Do(func() error {
		p := filepath.Join("/proc/sys", filepath.Clean("/"+key))
		if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
			return fmt.Errorf("netlab: namespace %q: sysctl %s=%s: %w", ns.name, key, value, err)
		}
		return nil
	})
}

// onClose registers f to run on Close, before the namespaces go.
func (l *Lab) onClose(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		go f()
		return
	}
	l.closers = append(l.closers, f)
}

// Close stops the lab's servers and removes its namespaces (and with them
// their links and routes). It returns the first failure, after trying all.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	closers, nss := l.closers, l.nss
	l.mu.Unlock()

	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	var errs []error
	for i := len(nss) - 1; i >= 0; i-- {
		if err := netns.DeleteNamed(nss[i].full); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("netlab: delete namespace %q: %w", nss[i].full, err))
		}
	}
	return errors.Join(errs...)
}

// removeStale deletes namespaces of labs whose process has exited.
func removeStale() {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), namePrefix)
		if !ok {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		_ = netns.DeleteNamed(e.Name())
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
