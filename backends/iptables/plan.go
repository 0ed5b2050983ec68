package iptables

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/wasp-proxy/wasp/backends"
)

// config is what a Backend's plans depend on besides the State.
type config struct {
	family             backends.Family
	mark               uint32 // the masquerade bit, as a mark value (1 << bit)
	localhostNodePorts bool   // Opts.LocalhostNodePorts
	tcpBeLiberal       bool   // Opts.TCPBeLiberal: no INVALID drop
	randomFully        bool   // MASQUERADE --random-fully is supported
}

// Chain is one chain and its rules, each the arguments that follow
// "-A <name> " in iptables-restore input.
type Chain struct {
	Name  string
	Rules []string
}

// Fragment is what one service port adds to a Ruleset: its own chains in
// the nat table (SVC, SVL, EXT, FW), its rules in the fixed chains, which
// are written in full by every restore, and the entries of its endpoints
// in the hairpin set.
type Fragment struct {
	Key    string
	Chains []*Chain
	// hairpin are the entries of the service port's endpoints (Cluster
	// and Local, each once) in the hairpin set (SetHairpin4,
	// SetHairpin6).
	hairpin []entryKey

	natServices, natNodePorts                                       []string
	filterServices, filterExternal, filterNodePorts, filterFirewall []string
}

// HairpinEntry is an entry of a hairpin set: an endpoint, whose address
// is both the first and the last part of the hash:ip,port,ip entry
// ("10.244.1.10,tcp:8080,10.244.1.10").
type HairpinEntry struct {
	Addr     netip.Addr
	Protocol backends.Protocol
	Port     uint16
}

// String is the entry as ipset(8) writes it.
func (e HairpinEntry) String() string {
	a := e.Addr.String()
	return a + "," + e.Protocol.Lower() + ":" + strconv.Itoa(int(e.Port)) + "," + a
}

// Hairpin returns the entries of the hairpin set, with the number of
// service ports that want each.
func (rs *Ruleset) Hairpin() map[HairpinEntry]int {
	out := map[HairpinEntry]int{}
	for _, f := range rs.Services {
		for _, k := range f.hairpin {
			out[k.entry()]++
		}
	}
	return out
}

// entryKey is a HairpinEntry as a key of 20 bytes, not 48 (an Addr
// carries a zone pointer, a Protocol is a string): a Backend keeps a
// count of every entry of the set, 100k of them at 10k service ports.
// A State's addresses are all of its family and never IPv4-mapped
// (backends.Validate), so that As16 keeps them apart.
type entryKey struct {
	addr  [16]byte
	port  uint16
	proto uint8
}

func (e HairpinEntry) key() entryKey {
	return entryKey{addr: e.Addr.As16(), port: e.Port, proto: e.Protocol.Number()}
}

// entry is the HairpinEntry of k.
func (k entryKey) entry() HairpinEntry {
	return HairpinEntry{Addr: netip.AddrFrom16(k.addr).Unmap(), Protocol: backends.ProtocolOf(k.proto), Port: k.port}
}

// hairpinCounts is Hairpin by entryKey.
func (rs *Ruleset) hairpinCounts() map[entryKey]int32 {
	n := 0
	for _, f := range rs.Services {
		n += len(f.hairpin)
	}
	out := make(map[entryKey]int32, n)
	for _, f := range rs.Services {
		for _, k := range f.hairpin {
			out[k]++
		}
	}
	return out
}

// Ruleset is the plan of the filter and nat tables: the fixed chains in
// full (per-service-port rules in them included), and each service port's
// Fragment.
type Ruleset struct {
	Filter   []*Chain
	NAT      []*Chain
	Services []*Fragment
}

// Rules returns the number of rules the plan has in table (TableFilter or
// TableNAT), service chains included.
func (rs *Ruleset) Rules(table string) int {
	n := 0
	chains := rs.Filter
	if table == TableNAT {
		chains = rs.NAT
		for _, f := range rs.Services {
			for _, c := range f.Chains {
				n += len(c.Rules)
			}
		}
	}
	for _, c := range chains {
		n += len(c.Rules)
	}
	return n
}

// Restore returns the plan as one iptables-restore input that writes
// every chain (see restoreInput.write), as a full sync on an empty node would.
func (rs *Ruleset) Restore() string {
	var b strings.Builder
	fullInput(rs).write(&b) // a strings.Builder takes every write
	return b.String()
}

// Plan returns the filter and nat rules that program s with the options
// o (Family, MasqueradeBit, LocalhostNodePorts and TCPBeLiberal count),
// MASQUERADE taking --random-fully when randomFully. It is pure: the same
// arguments give the same Ruleset. A State the Backend would refuse is
// refused with the same error.
func Plan(o Opts, randomFully bool, s *backends.State) (*Ruleset, error) {
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	cfg.randomFully = randomFully
	if err := validate(cfg.family, s); err != nil {
		return nil, err
	}
	return newPlanner(cfg).plan(s), nil
}

// planner plans Rulesets and keeps the Fragment of every service port of
// the last plan, to reuse it while the service port and the state-wide
// inputs it depends on stay the same. Reuse only saves work: plan(s)
// returns what a fresh planner returns.
type planner struct {
	cfg   config
	wide  stateWide
	cache map[string]*cached // by service key
	// hairpin is scratch space for the hairpin entries of a service
	// port.
	hairpin []entryKey
}

type cached struct {
	// svc is a copy of the input. Its lists are shared with the State,
	// which is never modified (backends.Backend), not copied: at 10k
	// service ports, deep copies held 3 MiB of endpoints twice.
	svc  backends.Service
	frag *Fragment
}

func newPlanner(cfg config) *planner { return &planner{cfg: cfg} }

// stateWide are the State fields a service port's Fragment depends on.
type stateWide struct {
	masq     backends.Masquerade // of traffic to the ClusterIP
	podCIDRs []netip.Prefix      // local-traffic detection; empty: none
	nodeIPs  []netip.Addr        // for the firewall's node exception
	// large: more than LargeClusterEndpoints endpoints in all, so the
	// DNAT rules of the policy chains carry no comment.
	large bool
}

func (w *stateWide) equal(o *stateWide) bool {
	return w.masq == o.masq && slices.Equal(w.podCIDRs, o.podCIDRs) && slices.Equal(w.nodeIPs, o.nodeIPs) && w.large == o.large
}

// LargeClusterEndpoints is the number of endpoints (of every service
// port's Cluster and Local sets) above which the DNAT rules of the
// policy chains carry no comment, as upstream's large-cluster mode does
// for the rules to and of its endpoint chains.
const LargeClusterEndpoints = 1000

func largeCluster(s *backends.State) bool {
	n := 0
	for i := range s.Services {
		n += len(s.Services[i].Cluster) + len(s.Services[i].Local)
	}
	return n > LargeClusterEndpoints
}

func (p *planner) plan(s *backends.State) *Ruleset {
	wide := stateWide{
		masq:     s.InternalMasquerade(),
		podCIDRs: backends.NormalizePrefixes(s.ClusterCIDRs),
		nodeIPs:  backends.SortedAddrs(s.NodeIPs),
		large:    largeCluster(s),
	}
	old := p.cache
	if !wide.equal(&p.wide) {
		old = nil
	}
	p.wide = wide
	p.cache = make(map[string]*cached, len(s.Services))
	rs := &Ruleset{Services: make([]*Fragment, 0, len(s.Services))}
	for i := range s.Services {
		svc := &s.Services[i]
		c, ok := old[svc.Key]
		if !ok || !c.svc.Equal(svc) {
			c = &cached{svc: *svc, frag: p.service(&wide, svc)}
		}
		p.cache[svc.Key] = c
		rs.Services = append(rs.Services, c.frag)
	}
	p.fixed(s, &wide, rs)
	return rs
}

// Targets of the rules.
const (
	targetAccept     = "ACCEPT"
	targetDrop       = "DROP"
	targetReject     = "REJECT"
	targetReturn     = "RETURN"
	targetDNAT       = "DNAT"
	targetMark       = "MARK"
	targetMasquerade = "MASQUERADE"
)

// comment is the match of a rule's comment. Comments hold service port
// names (DNS labels, '/', ':') and fixed text, never a quote.
func comment(text string) string { return `-m comment --comment "` + text + `"` }

// hostPrefix is a as a one-address prefix, as iptables-save shows it.
func hostPrefix(a netip.Addr) string { return netip.PrefixFrom(a, a.BitLen()).String() }

// verdictTarget is the filter target of a route that does not forward.
func verdictTarget(v backends.Verdict) string {
	if v == backends.Reject {
		return targetReject
	}
	return targetDrop
}

// noEndpointComment says why the packet is rejected or dropped.
func noEndpointComment(name string, v backends.Verdict) string {
	if v == backends.Reject {
		return comment(name + " has no endpoints")
	}
	return comment(name + " has no local endpoints")
}

// join joins rule parts with spaces, skipping empty ones.
func join(parts ...string) string {
	n := 0
	for _, p := range parts {
		if p != "" {
			n++
		}
	}
	out := make([]string, 0, n)
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, " ")
}

// service plans one service port: its chains, and its rules in the fixed
// chains, in upstream iptables mode's order.
func (p *planner) service(w *stateWide, s *backends.Service) *Fragment {
	n := newServiceChains(s)
	name := portName(s)
	f := &Fragment{Key: s.Key}
	proto := s.Protocol.Lower()
	l4 := "-p " + proto + " -m " + proto
	dst := func(a netip.Addr, port uint16) string {
		return "-d " + hostPrefix(a) + " " + l4 + " --dport " + strconv.Itoa(int(port))
	}
	has := s.HasAnyEndpoints
	in, ext := s.InternalRoute(), s.ExternalRoute()
	usesSVC, usesSVL := len(s.Cluster) > 0, len(s.Local) > 0
	usesEXT := has && s.ExternallyReachable()
	fwSources := s.FirewallSources(w.nodeIPs)
	usesFW := has && fwSources != nil
	toExt := n.ext
	if usesFW {
		toExt = n.fw
	}

	// Internal traffic.
	cipMatch := dst(s.ClusterIP, s.Port)
	internalChain := n.svc
	if in.Local {
		internalChain = n.svl
	}
	if in.Verdict == backends.Forward {
		f.natServices = append(f.natServices, join(comment(name+" cluster IP"), cipMatch, "-j", internalChain))
	} else {
		f.filterServices = append(f.filterServices, join(noEndpointComment(name, in.Verdict), cipMatch, "-j", verdictTarget(in.Verdict)))
	}

	// External traffic, for each frontend but the ClusterIP.
	for _, fe := range s.Frontends() {
		blocked := ext.Verdict != backends.Forward
		switch fe.Kind {
		case backends.FrontendExternalIP:
			if has {
				f.natServices = append(f.natServices, join(comment(name+" external IP"), dst(fe.Addr, fe.Port), "-j", n.ext))
			}
			if blocked {
				f.filterExternal = append(f.filterExternal, join(noEndpointComment(name, ext.Verdict), dst(fe.Addr, fe.Port), "-j", verdictTarget(ext.Verdict)))
			}
		case backends.FrontendLoadBalancer:
			if has {
				f.natServices = append(f.natServices, join(comment(name+" loadbalancer IP"), dst(fe.Addr, fe.Port), "-j", toExt))
			}
			if usesFW {
				f.filterFirewall = append(f.filterFirewall, join(comment(name+" traffic not accepted by "+n.fw), dst(fe.Addr, fe.Port), "-j", targetDrop))
			}
			if blocked {
				f.filterExternal = append(f.filterExternal, join(noEndpointComment(name, ext.Verdict), dst(fe.Addr, fe.Port), "-j", verdictTarget(ext.Verdict)))
			}
		case backends.FrontendNodePort:
			port := l4 + " --dport " + strconv.Itoa(int(fe.Port))
			if has {
				f.natNodePorts = append(f.natNodePorts, join(comment(name), port, "-j", n.ext))
			}
			if blocked {
				f.filterExternal = append(f.filterExternal, join(noEndpointComment(name, ext.Verdict), "-m addrtype --dst-type LOCAL", port, "-j", verdictTarget(ext.Verdict)))
			}
		}
	}
	if s.HealthCheckNodePort != 0 {
		f.filterNodePorts = append(f.filterNodePorts, join(comment(name+" health check node port"),
			"-p tcp -m tcp --dport", strconv.Itoa(int(s.HealthCheckNodePort)), "-j", targetAccept))
	}

	// The policy chains: masquerade first (internal chain only), then
	// affinity, then the weighted choice.
	policy := func(chain string, eps []backends.Endpoint) *Chain {
		c := &Chain{Name: chain}
		if chain == internalChain && in.Verdict == backends.Forward {
			c.Rules = append(c.Rules, p.internalMasq(w, name, cipMatch)...)
		}
		// "-p" alone: DNAT to a port needs the protocol, and a "-m tcp"
		// without options would be one more match per endpoint for the
		// kernel to check at every restore (iptables-legacy replaces
		// the whole table: 100k of them at 10k service ports).
		c.Rules = append(c.Rules, endpointRules(n.base, name, "-p "+proto, w.large, s.AffinityTimeout, eps)...)
		return c
	}
	if usesSVC {
		f.Chains = append(f.Chains, policy(n.svc, s.Cluster))
	}
	if usesSVL {
		f.Chains = append(f.Chains, policy(n.svl, s.Local))
	}
	if usesEXT {
		c := &Chain{Name: n.ext}
		if s.ExternalMasquerade() == backends.MasqueradeAll {
			c.Rules = append(c.Rules, join(comment("masquerade traffic for "+name+" external destinations"), "-j", ChainMarkMasq))
		}
		if ext.Local {
			// Short circuits: pods and the node itself reach the
			// service as if through the load balancer, so use every
			// endpoint; the node's own traffic is masqueraded.
			if usesSVC {
				for _, cidr := range w.podCIDRs {
					c.Rules = append(c.Rules, join(comment("pod traffic for "+name+" external destinations"), "-s", cidr.String(), "-j", n.svc))
				}
			}
			c.Rules = append(c.Rules, join(comment("masquerade LOCAL traffic for "+name+" external destinations"),
				"-m addrtype --src-type LOCAL -j", ChainMarkMasq))
			if usesSVC {
				c.Rules = append(c.Rules, join(comment("route LOCAL traffic for "+name+" external destinations"),
					"-m addrtype --src-type LOCAL -j", n.svc))
			}
			if usesSVL {
				c.Rules = append(c.Rules, "-j "+n.svl)
			}
		} else if usesSVC {
			c.Rules = append(c.Rules, "-j "+n.svc)
		}
		f.Chains = append(f.Chains, c)
	}
	if usesFW {
		c := &Chain{Name: n.fw}
		for _, src := range fwSources {
			c.Rules = append(c.Rules, join(comment(name+" loadbalancer IP"), "-s", src.String(), "-j", n.ext))
		}
		c.Rules = append(c.Rules, comment("other traffic to "+name+" will be dropped by "+ChainProxyFirewall))
		f.Chains = append(f.Chains, c)
	}

	// Hairpin traffic, one entry per endpoint of either set.
	seen := map[netip.AddrPort]bool{}
	hairpin := p.hairpin[:0]
	for _, set := range [][]backends.Endpoint{s.Cluster, s.Local} {
		for i := range set {
			ap := netip.AddrPortFrom(set[i].Addr, set[i].Port)
			if !seen[ap] {
				seen[ap] = true
				hairpin = append(hairpin, HairpinEntry{Addr: ap.Addr(), Protocol: s.Protocol, Port: ap.Port()}.key())
			}
		}
	}
	// Kept for as long as the service port is unchanged: no spare room.
	f.hairpin, p.hairpin = slices.Clone(hairpin), hairpin
	return f
}

// internalMasq are the rules at the top of the internal policy chain that
// mark ClusterIP traffic for masquerade (State.InternalMasquerade).
func (p *planner) internalMasq(w *stateWide, name, cipMatch string) []string {
	cmt := comment(name + " cluster IP")
	switch w.masq {
	case backends.MasqueradeAll:
		return []string{join(cmt, cipMatch, "-j", ChainMarkMasq)}
	case backends.MasqueradeOffCluster:
		if len(w.podCIDRs) == 1 {
			return []string{join(cmt, "!", "-s", w.podCIDRs[0].String(), cipMatch, "-j", ChainMarkMasq)}
		}
		return []string{join(cmt, cipMatch, "-j", ChainMasqOffCluster)}
	}
	return nil
}

// endpointRules are a policy chain's DNAT rules to its endpoints (l4,
// the protocol, lets DNAT take a port): with affinity, first one
// per endpoint for the clients its affinity list saw within timeout
// seconds, which refreshes their entry; then the weighted choice
// (Probabilities), which, with affinity, adds the client to the list of
// the endpoint it chose. Matches are evaluated in order, so "--set"
// records only the connections the statistic match before it took.
// Without comments when large.
func endpointRules(base, name, l4 string, large bool, timeout uint32, eps []backends.Endpoint) []string {
	n := len(eps)
	if timeout > 0 {
		n *= 2
	}
	out := make([]string, 0, n)
	cmt := func(e *backends.Endpoint) string {
		if large {
			return ""
		}
		return comment(name + " -> " + netip.AddrPortFrom(e.Addr, e.Port).String())
	}
	dnat := func(e *backends.Endpoint) string {
		return "-j " + targetDNAT + " --to-destination " + netip.AddrPortFrom(e.Addr, e.Port).String()
	}
	if timeout > 0 {
		secs := strconv.FormatUint(uint64(timeout), 10)
		for i := range eps {
			list := endpointName(base, &eps[i])
			out = append(out, join(cmt(&eps[i]), l4, "-m recent --name", list, "--rcheck --seconds", secs, "--reap",
				"-m recent --name", list, "--set", dnat(&eps[i])))
		}
	}
	probs := Probabilities(eps)
	for i := range eps {
		stat, set := "", ""
		if i < len(probs) {
			stat = "-m statistic --mode random --probability " + probs[i]
		}
		if timeout > 0 {
			set = "-m recent --name " + endpointName(base, &eps[i]) + " --set"
		}
		out = append(out, join(cmt(&eps[i]), l4, stat, set, dnat(&eps[i])))
	}
	return out
}

// Probabilities returns the "--probability" of each rule of a weighted
// choice among eps but the last, which is unconditional: rule i is
// reached by the connections rules 0..i-1 did not take, and takes
// w_i / (w_i + ... + w_n-1) of them (weights of backends.NormalizeWeights),
// so endpoint i gets w_i / Σw of all. Equal weights give upstream's
// 1/n, 1/(n-1), ..., 1/2. Formatted "%0.10f": the kernel keeps 32 bits
// of it.
func Probabilities(eps []backends.Endpoint) []string {
	ws, total := backends.NormalizeWeights(eps)
	if len(ws) < 2 {
		return nil
	}
	out := make([]string, len(ws)-1)
	rest := uint64(total)
	for i := range out {
		out[i] = fmt.Sprintf("%0.10f", float64(ws[i])/float64(rest))
		rest -= uint64(ws[i])
	}
	return out
}

// The comments of the jump rules and of fixed rules.
const (
	commentNodePortsTail = "wasp service nodeports; NOTE: this must be the last rule in this chain"
	commentMasquerade    = "wasp service traffic requiring SNAT"
	commentHairpin       = "wasp hairpin traffic: an endpoint reaching itself"
)

// loopback4 and loopback6 are the loopback ranges.
var (
	loopback4 = netip.MustParsePrefix("127.0.0.0/8")
	loopback6 = netip.MustParsePrefix("::1/128")
)

// localhostNodePorts reports whether NodePorts answer on 127.0.0.0/8:
// asked for, IPv4, and NodePorts on every address or on an IPv4 loopback
// one (upstream's condition).
func (p *planner) localhostNodePorts(s *backends.State) bool {
	if !p.cfg.localhostNodePorts || p.cfg.family != backends.IPv4 {
		return false
	}
	addrs, all := s.NodePortAddrs()
	return all || slices.ContainsFunc(addrs, netip.Addr.IsLoopback)
}

// fixed fills in the fixed chains of both tables, with the per-service
// rules of rs.Services.
func (p *planner) fixed(s *backends.State, w *stateWide, rs *Ruleset) {
	mark := fmt.Sprintf("0x%x", p.cfg.mark)
	gather := func(name string, pick func(*Fragment) []string) *Chain {
		c := &Chain{Name: name}
		for _, f := range rs.Services {
			c.Rules = append(c.Rules, pick(f)...)
		}
		return c
	}

	// filter
	fwd := &Chain{Name: ChainForward}
	if !p.cfg.tcpBeLiberal {
		fwd.Rules = append(fwd.Rules, "-m conntrack --ctstate INVALID -j "+targetDrop)
	}
	fwd.Rules = append(fwd.Rules,
		join(comment("wasp forwarding rules"), "-m mark --mark", mark+"/"+mark, "-j", targetAccept),
		join(comment("wasp forwarding conntrack rule"), "-m conntrack --ctstate RELATED,ESTABLISHED -j", targetAccept))
	rs.Filter = []*Chain{
		gather(ChainServices, func(f *Fragment) []string { return f.filterServices }),
		gather(ChainExternalServices, func(f *Fragment) []string { return f.filterExternal }),
		fwd,
		gather(ChainNodePorts, func(f *Fragment) []string { return f.filterNodePorts }),
		gather(ChainProxyFirewall, func(f *Fragment) []string { return f.filterFirewall }),
	}
	localhost := p.localhostNodePorts(s)
	if p.cfg.localhostNodePorts && p.cfg.family == backends.IPv4 {
		c := &Chain{Name: ChainFirewall}
		if localhost {
			c.Rules = []string{join(comment("block incoming localnet connections"), "-d", loopback4.String(), "!", "-s", loopback4.String(),
				"-m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j", targetDrop)}
		}
		rs.Filter = append(rs.Filter, c)
	}
	rs.Filter = append(rs.Filter, &Chain{Name: ChainCanary})

	// nat
	svcs := gather(ChainServices, func(f *Fragment) []string { return f.natServices })
	addrs, all := s.NodePortAddrs()
	if all {
		notLoop := "! -d " + loopback4.String()
		if p.cfg.family == backends.IPv6 {
			notLoop = "! -d " + loopback6.String()
		} else if localhost {
			notLoop = ""
		}
		svcs.Rules = append(svcs.Rules, join(comment(commentNodePortsTail), "-m addrtype --dst-type LOCAL", notLoop, "-j", ChainNodePorts))
	} else {
		for _, a := range addrs {
			if a.IsLoopback() && !localhost {
				continue // loopback NodePorts need route_localnet: IPv4 and asked for
			}
			svcs.Rules = append(svcs.Rules, join(comment(commentNodePortsTail), "-d", hostPrefix(a), "-j", ChainNodePorts))
		}
	}
	masq := join(comment(commentMasquerade), "-j", targetMasquerade)
	hairpin := join(comment(commentHairpin), "-m set --match-set", hairpinSet(p.cfg.family), "dst,dst,src -j", targetMasquerade)
	if p.cfg.randomFully {
		masq += " --random-fully"
		hairpin += " --random-fully"
	}
	offCluster := &Chain{Name: ChainMasqOffCluster}
	if w.masq == backends.MasqueradeOffCluster && len(w.podCIDRs) > 1 {
		for _, cidr := range w.podCIDRs {
			offCluster.Rules = append(offCluster.Rules, join("-s", cidr.String(), "-j", targetReturn))
		}
		offCluster.Rules = append(offCluster.Rules, "-j "+ChainMarkMasq)
	}
	rs.NAT = []*Chain{
		svcs,
		gather(ChainNodePorts, func(f *Fragment) []string { return f.natNodePorts }),
		{Name: ChainPostrouting, Rules: []string{
			hairpin,
			join("-m mark ! --mark", mark+"/"+mark, "-j", targetReturn),
			join("-j", targetMark, "--xor-mark", mark),
			masq,
		}},
		{Name: ChainMarkMasq, Rules: []string{join("-j", targetMark, "--or-mark", mark)}},
		offCluster,
		{Name: ChainCanary},
	}
}

// jump is a rule of a built-in chain that jumps to one of wasp's.
type jump struct {
	table, from, to string
	newOnly         bool // only new connections: "-m conntrack --ctstate NEW"
	comment         string
}

// args are the jump's rule, as EnsureRule and DeleteRule take it.
func (j jump) args() []string {
	var a []string
	if j.newOnly {
		a = append(a, "-m", "conntrack", "--ctstate", "NEW")
	}
	return append(a, "-m", "comment", "--comment", j.comment, "-j", j.to)
}

// jumps are the rules of the built-in chains, as upstream's (with wasp's
// chains), and those to ChainFirewall when localhost NodePorts are asked
// for on IPv4.
func (c config) jumps() []jump {
	const (
		external = "wasp externally-visible service portals"
		portals  = "wasp service portals"
		firewall = "wasp load balancer firewall"
	)
	js := []jump{
		{TableFilter, chainInput, ChainExternalServices, true, external},
		{TableFilter, chainForward, ChainExternalServices, true, external},
		{TableFilter, chainInput, ChainNodePorts, false, "wasp health check service ports"},
		{TableFilter, chainForward, ChainServices, true, portals},
		{TableFilter, chainOutput, ChainServices, true, portals},
		{TableFilter, chainForward, ChainForward, false, "wasp forwarding rules"},
		{TableFilter, chainInput, ChainProxyFirewall, true, firewall},
		{TableFilter, chainOutput, ChainProxyFirewall, true, firewall},
		{TableFilter, chainForward, ChainProxyFirewall, true, firewall},
		{TableNAT, chainOutput, ChainServices, false, portals},
		{TableNAT, chainPrerouting, ChainServices, false, portals},
		{TableNAT, chainPostrouting, ChainPostrouting, false, "wasp postrouting rules"},
	}
	if c.localhostNodePorts && c.family == backends.IPv4 {
		js = append(js,
			jump{TableFilter, chainInput, ChainFirewall, false, "wasp localhost nodeports firewall"},
			jump{TableFilter, chainOutput, ChainFirewall, false, "wasp localhost nodeports firewall"})
	}
	return js
}
