//go:build linux

package framework

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/wasp-proxy/wasp/internal/netlab"
)

// WaspTable is the name of the nftables tables wasp owns.
const WaspTable = "wasp"

// Ruleset is what a namespace's nftables tables named WaspTable hold, read
// over netlink (what `nft list table ip wasp` shows), with counts for
// reports and a canonical listing for exact comparisons.
type Ruleset struct {
	Tables, Chains, Rules int
	// Sets and Maps are the named ones; Anonymous counts the anonymous
	// sets and maps that rules carry.
	Sets, Maps, Anonymous int
	// Elements is the number of elements of named sets and maps,
	// dynamic ones (filled by traffic, as affinity sets) included.
	Elements int
	// Lines is the canonical listing, sorted: one line per chain, rule,
	// set and element, without handles, kernel-assigned set IDs, counter
	// values or the elements of dynamic sets.
	Lines []string
}

// Counts is a one-line summary of the object counts, for reports.
func (r *Ruleset) Counts() string {
	return fmt.Sprintf("tables %d, chains %d, rules %d, sets %d, maps %d, anonymous sets %d, elements %d",
		r.Tables, r.Chains, r.Rules, r.Sets, r.Maps, r.Anonymous, r.Elements)
}

// Diff returns the lines only in r and only in other, at most max of each
// (0: all), or "" when both listings are equal.
func (r *Ruleset) Diff(other *Ruleset, max int) string {
	only := func(a, b []string) []string {
		var out []string
		for _, l := range a {
			if _, found := slices.BinarySearch(b, l); !found {
				out = append(out, l)
			}
		}
		return out
	}
	a, b := only(r.Lines, other.Lines), only(other.Lines, r.Lines)
	if len(a) == 0 && len(b) == 0 {
		return ""
	}
	cut := func(l []string) string {
		n := len(l)
		if max > 0 && len(l) > max {
			l = l[:max]
		}
		s := fmt.Sprintf("%d lines", n)
		for _, x := range l {
			s += "\n    " + x
		}
		return s
	}
	return fmt.Sprintf("only in the first: %s\n  only in the second: %s", cut(a), cut(b))
}

// NFTables returns a netlink nftables connection into ns, and a function
// that closes it.
func NFTables(ns *netlab.NS) (*nftables.Conn, func(), error) {
	h, err := netns.GetFromPath(ns.Path())
	if err != nil {
		return nil, nil, fmt.Errorf("nftables in %s: %w", ns.Name(), err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(h)), nftables.AsLasting())
	if err != nil {
		h.Close()
		return nil, nil, fmt.Errorf("nftables in %s: %w", ns.Name(), err)
	}
	return c, func() { c.CloseLasting(); h.Close() }, nil
}

// ReadRuleset reads the WaspTable tables of ns.
func ReadRuleset(ns *netlab.NS) (*Ruleset, error) {
	c, done, err := NFTables(ns)
	if err != nil {
		return nil, fmt.Errorf("ruleset: %w", err)
	}
	defer done()
	tables, err := c.ListTables()
	if err != nil {
		return nil, fmt.Errorf("ruleset of %s: list tables: %w", ns.Name(), err)
	}
	r := &Ruleset{}
	for _, t := range tables {
		if t.Name != WaspTable {
			continue
		}
		if err := r.addTable(c, t); err != nil {
			return nil, fmt.Errorf("ruleset of %s: table %s: %w", ns.Name(), familyName(t.Family), err)
		}
	}
	sort.Strings(r.Lines)
	return r, nil
}

func familyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyINet:
		return "inet"
	}
	return strconv.Itoa(int(f))
}

func (r *Ruleset) addTable(c *nftables.Conn, t *nftables.Table) error {
	r.Tables++
	fam := familyName(t.Family)
	sets, err := c.GetSets(t)
	if err != nil {
		return fmt.Errorf("list sets: %w", err)
	}
	// Anonymous sets get kernel-chosen names (__set%d): a rule's lookup
	// of one is listed by its content instead.
	anon := map[string]string{}
	for _, s := range sets {
		elems, err := c.GetSetElements(s)
		if err != nil {
			return fmt.Errorf("set %s: %w", s.Name, err)
		}
		var rendered []string
		for _, e := range elems {
			rendered = append(rendered, element(e))
		}
		sort.Strings(rendered)
		def := fmt.Sprintf("map=%v interval=%v timeout=%v dynamic=%v concat=%v key=%s data=%s",
			s.IsMap, s.Interval, s.HasTimeout || s.Timeout != 0, s.Dynamic, s.Concatenation, s.KeyType.Name, s.DataType.Name)
		if s.Timeout != 0 {
			def += " timeout=" + s.Timeout.String()
		}
		if s.Anonymous {
			r.Anonymous++
			anon[s.Name] = "{" + strings.Join(rendered, ", ") + "} " + def
			continue
		}
		if s.IsMap {
			r.Maps++
		} else {
			r.Sets++
		}
		r.Elements += len(elems)
		r.Lines = append(r.Lines, fmt.Sprintf("%s set %s %s", fam, s.Name, def))
		if s.Dynamic {
			continue
		}
		for _, e := range rendered {
			r.Lines = append(r.Lines, fmt.Sprintf("%s element %s %s", fam, s.Name, e))
		}
	}

	chains, err := c.ListChainsOfTableFamily(t.Family)
	if err != nil {
		return fmt.Errorf("list chains: %w", err)
	}
	for _, ch := range chains {
		if ch.Table.Name != t.Name {
			continue
		}
		r.Chains++
		def := ""
		if ch.Hooknum != nil {
			def = fmt.Sprintf(" type %s hook %d", ch.Type, *ch.Hooknum)
		}
		if ch.Priority != nil {
			def += fmt.Sprintf(" priority %d", *ch.Priority)
		}
		if ch.Policy != nil {
			def += fmt.Sprintf(" policy %d", *ch.Policy)
		}
		r.Lines = append(r.Lines, fmt.Sprintf("%s chain %s%s", fam, ch.Name, def))
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return fmt.Errorf("chain %s: %w", ch.Name, err)
		}
		for i, rule := range rules {
			r.Rules++
			parts := make([]string, 0, len(rule.Exprs))
			for _, e := range rule.Exprs {
				parts = append(parts, exprString(e, anon))
			}
			r.Lines = append(r.Lines, fmt.Sprintf("%s rule %s #%d %s", fam, ch.Name, i, strings.Join(parts, " ; ")))
		}
	}
	return nil
}

func element(e nftables.SetElement) string {
	s := "key=" + hex.EncodeToString(e.Key)
	if len(e.KeyEnd) > 0 {
		s += "-" + hex.EncodeToString(e.KeyEnd)
	}
	if e.IntervalEnd {
		s += " end"
	}
	if e.VerdictData != nil {
		s += fmt.Sprintf(" : verdict %d %s", e.VerdictData.Kind, e.VerdictData.Chain)
	} else if len(e.Val) > 0 {
		s += " : " + hex.EncodeToString(e.Val)
	}
	return s
}

// exprString renders one expression without what differs between two
// programs of the same ruleset: set IDs, anonymous set names, counter
// values.
func exprString(e expr.Any, anon map[string]string) string {
	set := func(name string) string {
		if content, ok := anon[name]; ok {
			return "anonymous " + content
		}
		return "@" + name
	}
	switch x := e.(type) {
	case *expr.Lookup:
		c := *x
		c.SetID, c.SetName = 0, set(x.SetName)
		return fmt.Sprintf("%T%+v", x, c)
	case *expr.Dynset:
		c := *x
		c.SetID, c.SetName = 0, set(x.SetName)
		var inner []string
		for _, ie := range x.Exprs {
			inner = append(inner, exprString(ie, anon))
		}
		c.Exprs = nil
		return fmt.Sprintf("%T%+v[%s]", x, c, strings.Join(inner, " ; "))
	case *expr.Counter:
		return "counter"
	}
	return fmt.Sprintf("%T%+v", e, e)
}

// ConntrackEntry is one conntrack flow, reduced to what tests look at.
type ConntrackEntry struct {
	Proto uint8 // syscall.IPPROTO_TCP, ...
	// OrigDst is the original destination (a Service address for a
	// proxied flow), ReplySrc who answers (the endpoint after DNAT).
	OrigDst, ReplySrc netip.AddrPort
	// TCPState is the conntrack TCP state (3 = ESTABLISHED, 7 =
	// TIME_WAIT); 0 for other protocols.
	TCPState uint8
}

// Conntrack lists the conntrack entries of ns, both families.
func Conntrack(ns *netlab.NS) ([]ConntrackEntry, error) {
	h, err := netns.GetFromPath(ns.Path())
	if err != nil {
		return nil, fmt.Errorf("conntrack of %s: %w", ns.Name(), err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("conntrack of %s: %w", ns.Name(), err)
	}
	defer nh.Close()
	var out []ConntrackEntry
	for _, fam := range []netlink.InetFamily{syscall.AF_INET, syscall.AF_INET6} {
		flows, err := nh.ConntrackTableList(netlink.ConntrackTable, fam)
		if err != nil {
			return nil, fmt.Errorf("conntrack of %s: %w", ns.Name(), err)
		}
		for _, f := range flows {
			e := ConntrackEntry{Proto: f.Forward.Protocol}
			if a, ok := netip.AddrFromSlice(f.Forward.DstIP); ok {
				e.OrigDst = netip.AddrPortFrom(a.Unmap(), f.Forward.DstPort)
			}
			if a, ok := netip.AddrFromSlice(f.Reverse.SrcIP); ok {
				e.ReplySrc = netip.AddrPortFrom(a.Unmap(), f.Reverse.SrcPort)
			}
			if tcp, ok := f.ProtoInfo.(*netlink.ProtoInfoTCP); ok {
				e.TCPState = tcp.State
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// Kill ends the process with SIGKILL, at once, and waits for it.
func (w *Process) Kill() {
	select {
	case <-w.done:
		return
	default:
	}
	_ = w.cmd.Process.Kill()
	<-w.done
}

// RSS returns the process's resident set size in bytes (VmRSS).
func (w *Process) RSS() (int64, error) { return w.Memory("VmRSS") }

// Memory returns a memory field of the process's /proc/PID/status, such
// as VmRSS or VmHWM (the peak resident set size), in bytes.
func (w *Process) Memory(field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.Pid()))
	if err != nil {
		return 0, fmt.Errorf("%s of pid %d: %w", field, w.Pid(), err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s of pid %d: %q: %w", field, w.Pid(), line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("%s of pid %d: not in /proc/%d/status", field, w.Pid(), w.Pid())
}

// untranslated matches the conntrack entries of flows sent to dst that no
// rule translated: the reply would come from dst itself.
type untranslated netip.AddrPort

func (u untranslated) MatchConntrackFlow(f *netlink.ConntrackFlow) bool {
	dst, ok := netip.AddrFromSlice(f.Forward.DstIP)
	if !ok || netip.AddrPortFrom(dst.Unmap(), f.Forward.DstPort) != netip.AddrPort(u) {
		return false
	}
	src, ok := netip.AddrFromSlice(f.Reverse.SrcIP)
	return ok && netip.AddrPortFrom(src.Unmap(), f.Reverse.SrcPort) == netip.AddrPort(u)
}

// ForgetUntranslated deletes ns's conntrack entries of flows sent to dst
// that were not translated (no DNAT), and returns how many. A test that
// asked a Service before the proxy programmed it leaves such entries (an
// unanswered SYN is tracked for 120 s); a later connection that happens
// to reuse one's source port follows it, untranslated, as upstream's
// would: in iptables mode it times out, in nftables mode the ClusterIP
// check rejects it (connection refused). A test calls this once the
// Service answers, before traffic it counts.
func ForgetUntranslated(ns *netlab.NS, dst netip.AddrPort) (uint, error) {
	h, err := netns.GetFromPath(ns.Path())
	if err != nil {
		return 0, fmt.Errorf("conntrack of %s: %w", ns.Name(), err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return 0, fmt.Errorf("conntrack of %s: %w", ns.Name(), err)
	}
	defer nh.Close()
	fam := netlink.InetFamily(syscall.AF_INET)
	if dst.Addr().Is6() {
		fam = syscall.AF_INET6
	}
	n, err := nh.ConntrackDeleteFilters(netlink.ConntrackTable, fam, untranslated(dst))
	if err != nil {
		return n, fmt.Errorf("conntrack of %s: delete untranslated flows to %s: %w", ns.Name(), dst, err)
	}
	return n, nil
}
