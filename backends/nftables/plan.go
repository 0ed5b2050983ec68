package nftables

import (
	"net/netip"
	"slices"
	"unsafe"

	"github.com/wasp-proxy/wasp/backends"
)

// config is what a Backend's plans depend on besides the State.
type config struct {
	family backends.Family
	table  string
	mark   uint32 // the masquerade bit, as a mark value (1 << bit)
}

// Plan returns the ruleset that programs s in table cfg.table. It is pure:
// the same config and State give the same Ruleset.
func Plan(family backends.Family, table string, masqueradeBit int, s *backends.State) *Ruleset {
	return newPlanner(config{family: family, table: table, mark: 1 << uint(masqueradeBit)}).plan(s)
}

// planner plans rulesets and keeps the fragment of every service port of
// the last plan, to reuse it while the service port and the state-wide
// inputs it depends on stay the same. Reuse only saves work: plan(s)
// returns what Plan returns.
type planner struct {
	cfg  config
	wide stateWide
	last *Ruleset // the last plan, whose element index the next one starts from
	// svcs are the service ports of last.Services, one for one: the
	// caller's, which a State never modifies (backends.Backend), so
	// that an unchanged port is told by identity rather than by
	// comparing its endpoints. nil when the state-wide inputs changed.
	svcs []*backends.Service

	scratch []elem // where service builds a fragment's elements

	// lastGlobal is the last plan's global fragment, planned from
	// globalIn: reused while they stay the same, so that a Diff skips it.
	lastGlobal *Fragment
	globalIn   globalInputs
}

// globalInputs are what the global fragment depends on besides the
// config.
type globalInputs struct {
	wide          stateWide
	nodePortAddrs []netip.Addr
	serviceCIDRs  []netip.Prefix
	classes       []bucketClass // past presetBuckets, sorted
}

func (g *globalInputs) equal(o *globalInputs) bool {
	return g.wide.equal(&o.wide) && slices.Equal(g.nodePortAddrs, o.nodePortAddrs) &&
		slices.Equal(g.serviceCIDRs, o.serviceCIDRs) && slices.Equal(g.classes, o.classes)
}

func newPlanner(cfg config) *planner {
	return &planner{cfg: cfg}
}

// stateWide are the State fields a service port's fragment depends on.
type stateWide struct {
	masq     backends.Masquerade // of traffic to the ClusterIP
	podCIDRs []netip.Prefix      // local-traffic detection; empty: none
	nodeIPs  []netip.Addr        // for the firewall's node exception
}

func (w *stateWide) equal(o *stateWide) bool {
	return w.masq == o.masq && slices.Equal(w.podCIDRs, o.podCIDRs) && slices.Equal(w.nodeIPs, o.nodeIPs)
}

func (p *planner) plan(s *backends.State) *Ruleset {
	wide := stateWide{
		masq:     s.InternalMasquerade(),
		podCIDRs: backends.NormalizePrefixes(s.ClusterCIDRs),
		nodeIPs:  backends.SortedAddrs(s.NodeIPs),
	}
	prev := p.svcs
	if !wide.equal(&p.wide) || p.last == nil {
		prev = nil
	}
	p.wide = wide

	// A walk of the service ports, sorted by key, beside the last
	// plan's: a port identical to the one at the same place costs a few
	// comparisons, so that a change costs the same at any scale.
	rs := &Ruleset{Family: p.cfg.family, Table: p.cfg.table}
	rs.Services = make([]*Fragment, len(s.Services))
	svcs := make([]*backends.Service, len(s.Services))
	classes := map[bucketClass]bool{}
	j := 0
	for i := range s.Services {
		svc := &s.Services[i]
		var frag *Fragment
		if j < len(prev) && prev[j].Key != svc.Key {
			for j < len(prev) && prev[j].Key < svc.Key {
				j++
			}
		}
		if j < len(prev) && prev[j].Key == svc.Key {
			if identical(prev[j], svc) || serviceEqual(prev[j], svc) {
				frag = p.last.Services[j]
			}
			j++
		}
		if frag == nil {
			frag = p.service(&wide, svc)
		}
		rs.Services[i], svcs[i] = frag, svc
		for _, bc := range frag.classes {
			if bc.w > presetBuckets { // the global fragment has the others
				classes[bc] = true
			}
		}
	}
	p.svcs = svcs
	in := globalInputs{wide: wide, nodePortAddrs: s.NodePortAddresses, serviceCIDRs: s.ServiceCIDRs}
	for bc := range classes {
		in.classes = append(in.classes, bc)
	}
	slices.SortFunc(in.classes, bucketClass.compare)
	if p.lastGlobal != nil && p.globalIn.equal(&in) {
		rs.Global = p.lastGlobal
	} else {
		rs.Global = p.global(s, &wide, classes)
		p.lastGlobal, p.globalIn = rs.Global, in
	}
	if p.last != nil && p.last.Family == rs.Family && p.last.Table == rs.Table {
		rs.indexFrom(p.last)
	} else {
		rs.index()
	}
	p.last = rs
	return rs
}

// Base chains in the order upstream creates them, and the jumps from them.
var (
	baseChains = []struct {
		name string
		spec BaseChain
	}{
		// Filter chains see the destination before DNAT.
		{filterPreroutingChain, BaseChain{ChainFilter, HookPrerouting, priorityDstNAT - 10}},
		{filterInputChain, BaseChain{ChainFilter, HookInput, priorityDstNAT - 10}},
		{filterForwardChain, BaseChain{ChainFilter, HookForward, priorityDstNAT - 10}},
		{filterOutputChain, BaseChain{ChainFilter, HookOutput, priorityDstNAT - 10}},
		// After DNAT: an undefined port of a ClusterIP is still a ClusterIP.
		{filterOutputPostDNATChain, BaseChain{ChainFilter, HookOutput, priorityDstNAT + 10}},
		{natPreroutingChain, BaseChain{ChainNAT, HookPrerouting, priorityDstNAT}},
		{natOutputChain, BaseChain{ChainNAT, HookOutput, priorityDstNAT}},
		{natPostroutingChain, BaseChain{ChainNAT, HookPostrouting, prioritySrcNAT}},
	}
	baseJumps = []struct {
		from, to string
		newOnly  bool // "ct state new"
	}{
		// Reject is only allowed in input, forward and output (before
		// kernel 5.9), so the endpoint checks are not in prerouting.
		{filterInputChain, nodePortEndpointsCheckChain, true},
		{filterInputChain, serviceEndpointsCheckChain, true},
		{filterForwardChain, serviceEndpointsCheckChain, true},
		{filterOutputChain, serviceEndpointsCheckChain, true},
		{filterPreroutingChain, firewallCheckChain, true},
		{filterOutputChain, firewallCheckChain, true},
		{natOutputChain, servicesChain, false},
		{natPreroutingChain, servicesChain, false},
		{natPostroutingChain, masqueradingChain, false},
		{filterForwardChain, clusterIPsCheckChain, true},
		{filterOutputPostDNATChain, clusterIPsCheckChain, true},
	}
)

// dispatchKey is the key of service-ips, no-endpoint-services and
// firewall-ips: destination address, protocol, port.
var dispatchKey = []KeyField{KeyDAddr, KeyL4Proto, KeyTHDPort}

// nodePortKey is the key of service-nodeports and no-endpoint-nodeports.
var nodePortKey = []KeyField{KeyL4Proto, KeyTHDPort}

// global plans the table-wide objects, with the bucket chains and maps of
// the classes the service ports use.
func (p *planner) global(s *backends.State, w *stateWide, classes map[bucketClass]bool) *Fragment {
	fam := p.cfg.family
	f := &Fragment{}
	chains := map[string]*Chain{}
	chain := func(name string, base *BaseChain) *Chain {
		c := &Chain{Name: name, Base: base}
		chains[name] = c
		f.Chains = append(f.Chains, c)
		return c
	}
	for _, bc := range baseChains {
		spec := bc.spec
		chain(bc.name, &spec)
	}
	for _, name := range []string{nodePortEndpointsCheckChain, serviceEndpointsCheckChain, firewallCheckChain,
		servicesChain, simpleClassesChain, masqueradingChain, clusterIPsCheckChain, markMasqChain, rejectChain} {
		chain(name, nil)
	}
	for _, j := range baseJumps {
		var r Rule
		if j.newOnly {
			r.Exprs = append(r.Exprs, CtStateNew{})
		}
		r.Exprs = append(r.Exprs, Verdict{Jump, j.to})
		chains[j.from].Rules = append(chains[j.from].Rules, r)
	}

	chains[markMasqChain].Rules = []Rule{{Exprs: []Expr{MarkOr{p.cfg.mark}}}}
	chains[masqueradingChain].Rules = []Rule{
		{Exprs: []Expr{CtStatusDNAT{}, AddrPairMatch{fam, hairpinSet}, Verdict{Jump, markMasqChain}}},
		{Exprs: []Expr{MarkClear{p.cfg.mark}, Verdict{Kind: Return}}},
		{Exprs: []Expr{MarkXor{p.cfg.mark}}},
		{Exprs: []Expr{Masquerade{FullyRandom: true}}},
	}
	chains[rejectChain].Rules = []Rule{{Exprs: []Expr{Reject{}}}}

	addr := addrKey(fam)
	f.Sets = []*Set{
		{Name: clusterIPsSet, Key: []KeyType{addr}, Comment: "Active ClusterIPs"},
		{Name: serviceIPsMap, Key: []KeyType{addr, KeyInetProto, KeyInetService}, Map: true,
			Comment: "ClusterIP, ExternalIP and LoadBalancer IP traffic"},
		{Name: serviceNodePortsMap, Key: []KeyType{KeyInetProto, KeyInetService}, Map: true, Comment: "NodePort traffic"},
		{Name: noEndpointServicesMap, Key: []KeyType{addr, KeyInetProto, KeyInetService}, Map: true,
			Comment: "vmap to drop or reject packets to services with no endpoints"},
		{Name: noEndpointNodePortsMap, Key: []KeyType{KeyInetProto, KeyInetService}, Map: true,
			Comment: "vmap to drop or reject packets to service nodeports with no endpoints"},
		{Name: firewallIPsMap, Key: []KeyType{addr, KeyInetProto, KeyInetService}, Map: true,
			Comment: "destinations that are subject to LoadBalancerSourceRanges"},
		{Name: hairpinSet, Key: []KeyType{addr, addr}, Comment: "endpoint . endpoint: a pod reaching itself through a service"},
	}
	for _, local := range []bool{false, true} {
		name := bucketClassesMap(local)
		chain(name, nil).Rules = []Rule{
			{Exprs: []Expr{VMap{Family: fam, Key: dispatchKey, Map: name}}},
			{Exprs: []Expr{VMap{Family: fam, Key: nodePortKey, Map: name + bucketNodePorts}}},
		}
		for w := uint32(1); w <= presetBuckets; w++ {
			classes[bucketClass{local: local, w: w}] = true
		}
		f.Sets = append(f.Sets,
			&Set{Name: name, Key: []KeyType{addr, KeyInetProto, KeyInetService}, Map: true,
				Comment: "service address . protocol . port : bucket chain"},
			&Set{Name: name + bucketNodePorts, Key: []KeyType{KeyInetProto, KeyInetService}, Map: true,
				Comment: "NodePort protocol . port : bucket chain"})
	}

	// Simple service ports (see simpleServicesSet): the masquerade rule
	// their policy chains would start with, for all of them, then one
	// rule per bucket class.
	simpleKey := []KeyType{addr, KeyInetProto, KeyInetService}
	f.Sets = append(f.Sets, &Set{Name: simpleServicesSet, Key: simpleKey,
		Comment: "ClusterIP . protocol . port of service ports without a chain of their own"})
	simple := chains[simpleClassesChain]
	switch w.masq {
	case backends.MasqueradeAll:
		simple.Rules = append(simple.Rules, Rule{Exprs: []Expr{Verdict{Jump, markMasqChain}}})
	case backends.MasqueradeOffCluster:
		simple.Rules = append(simple.Rules, Rule{Exprs: []Expr{
			AddrMatch{Family: fam, Field: SAddr, Neg: true, Prefixes: w.podCIDRs}, Verdict{Jump, markMasqChain}}})
	}
	for _, bc := range simpleClasses {
		f.Sets = append(f.Sets, &Set{Name: bc.simpleSet(), Key: simpleKey,
			Comment: "simple service entries of " + bc.name()})
		simple.Rules = append(simple.Rules, Rule{Exprs: []Expr{
			KeySetMatch{Family: fam, Key: dispatchKey, Set: bc.simpleSet()}, Verdict{Goto, bc.name()}}})
	}

	chains[clusterIPsCheckChain].Rules = []Rule{{
		Exprs:   []Expr{SetMatch{fam, DAddr, clusterIPsSet}, Reject{}},
		Comment: "Reject traffic to invalid ports of ClusterIPs",
	}}
	if cidrs := backends.NormalizePrefixes(s.ServiceCIDRs); len(cidrs) > 0 {
		chains[clusterIPsCheckChain].Rules = append(chains[clusterIPsCheckChain].Rules, Rule{
			Exprs:   []Expr{AddrMatch{Family: fam, Field: DAddr, Prefixes: cidrs, Braces: true}, Verdict{Kind: Drop}},
			Comment: "Drop traffic to unallocated ClusterIPs",
		})
	}

	// NodePorts answer on every local address but loopback (upstream
	// never supports localhost NodePorts in nftables mode), or on the
	// configured addresses.
	var nodePortMatch []Expr
	var nodePortIPs []netip.Addr
	addrs, all := s.NodePortAddrs()
	for _, a := range addrs {
		if !a.IsLoopback() {
			nodePortIPs = append(nodePortIPs, a)
		}
	}
	var noEndpointNodePortMatch []Expr
	if all {
		loop := netip.MustParsePrefix("127.0.0.0/8")
		if fam == backends.IPv6 {
			loop = netip.MustParsePrefix("::1/128")
		}
		notLoop := AddrMatch{Family: fam, Field: DAddr, Neg: true, Prefixes: []netip.Prefix{loop}}
		nodePortMatch = []Expr{FibLocal{DAddr}, notLoop}
		noEndpointNodePortMatch = []Expr{notLoop}
	} else {
		f.Sets = append(f.Sets, &Set{Name: nodePortIPsSet, Key: []KeyType{addr}, Comment: "IPs that accept NodePort traffic"})
		for _, a := range nodePortIPs {
			f.addElement(Element{Set: nodePortIPsSet, Key: ElemKey{Addr: a}})
		}
		nodePortMatch = []Expr{SetMatch{fam, DAddr, nodePortIPsSet}}
		noEndpointNodePortMatch = nodePortMatch
	}

	chains[serviceEndpointsCheckChain].Rules = []Rule{{Exprs: []Expr{VMap{Family: fam, Key: dispatchKey, Map: noEndpointServicesMap}}}}
	chains[nodePortEndpointsCheckChain].Rules = []Rule{{
		Exprs: append(slices.Clone(noEndpointNodePortMatch), VMap{Family: fam, Key: nodePortKey, Map: noEndpointNodePortsMap}),
	}}
	chains[firewallCheckChain].Rules = []Rule{{Exprs: []Expr{VMap{Family: fam, Key: dispatchKey, Map: firewallIPsMap}}}}
	chains[servicesChain].Rules = []Rule{
		{Exprs: []Expr{VMap{Family: fam, Key: dispatchKey, Map: serviceIPsMap}}},
		// After service-ips: other service entries pay no extra lookup.
		{Exprs: []Expr{KeySetMatch{Family: fam, Key: dispatchKey, Set: simpleServicesSet}, Verdict{Goto, simpleClassesChain}}},
		{Exprs: append(slices.Clone(nodePortMatch), VMap{Family: fam, Key: nodePortKey, Map: serviceNodePortsMap})},
	}

	// Bucket chains: the address rule first, as in services, so that a
	// packet whose address and port are both a service entry and a
	// NodePort finds the service the services chain chose.
	sorted := make([]bucketClass, 0, len(classes))
	for bc := range classes {
		sorted = append(sorted, bc)
	}
	slices.SortFunc(sorted, bucketClass.compare)
	target := []KeyType{addr, KeyInetService}
	for _, bc := range sorted {
		name := bc.name()
		c := chain(name, nil)
		c.Rules = []Rule{
			{Exprs: []Expr{DNATMap{Family: fam, Key: bucketKey, Mod: bc.w, Map: name}}},
			{Exprs: []Expr{DNATMap{Family: fam, Key: nodePortBucketKey, Mod: bc.w, Map: name + bucketNodePorts}}},
		}
		f.Sets = append(f.Sets,
			&Set{Name: name, Key: []KeyType{addr, KeyInetProto, KeyInetService, KeyBucket}, Data: target,
				Comment: "service address . protocol . port . bucket : endpoint"},
			&Set{Name: name + bucketNodePorts, Key: []KeyType{KeyInetProto, KeyInetService, KeyBucket}, Data: target,
				Comment: "NodePort protocol . port . bucket : endpoint"})
	}
	return f
}

// bucketKey and nodePortBucketKey are the keys of the bucket maps.
var (
	bucketKey         = []KeyField{KeyDAddr, KeyL4Proto, KeyTHDPort, KeyNumgen}
	nodePortBucketKey = []KeyField{KeyL4Proto, KeyTHDPort, KeyNumgen}
)

// service plans one service port, following upstream's syncProxyRules.
func (p *planner) service(w *stateWide, svc *backends.Service) *Fragment {
	fam := p.cfg.family
	names := newServiceNames(svc)
	proto := svc.Protocol.Number()
	f := &Fragment{Key: svc.Key, elems: p.scratch[:0]}
	defer func() {
		// Kept for as long as the service port does not change: exactly
		// sized, the scratch buffer left for the next.
		p.scratch, f.elems = f.elems, slices.Clone(f.elems)
	}()

	hasEndpoints := svc.HasAnyEndpoints
	usesCluster := len(svc.Cluster) > 0
	usesLocal := len(svc.Local) > 0

	internal, external := svc.InternalRoute(), svc.ExternalRoute()
	internalChain, hasInternal := names.policy(internal), internal.Verdict == backends.Forward
	externalPolicyChain, hasExternal := names.policy(external), external.Verdict == backends.Forward
	// The external chain exists whenever there are endpoints anywhere,
	// for its short-circuit rules, even with none for external traffic.
	usesExternal := hasEndpoints && svc.ExternallyReachable()

	internalVerdict, externalVerdict := noEndpointVerdict(internal), noEndpointVerdict(external)

	dispatch := func(a netip.Addr) ElemKey { return ElemKey{Addr: a, Proto: proto, Port: svc.Port} }
	elem := func(set string, k ElemKey, v Verdict) {
		f.addElement(Element{Set: set, Key: k, Value: v})
	}

	firewall := svc.FirewallSources(w.nodeIPs)
	usesFirewall := firewall != nil
	frontends := svc.Frontends()
	if bc, ng, ok := simpleClass(svc, internal, frontends); ok {
		p.simpleService(f, svc, bc, ng, internal.Endpoints)
		return f
	}
	for _, fe := range frontends {
		switch fe.Kind {
		case backends.FrontendClusterIP:
			elem(clusterIPsSet, ElemKey{Addr: fe.Addr}, Verdict{})
			if hasInternal {
				elem(serviceIPsMap, dispatch(fe.Addr), Verdict{Goto, internalChain})
			} else {
				elem(noEndpointServicesMap, dispatch(fe.Addr), internalVerdict)
			}
		case backends.FrontendExternalIP, backends.FrontendLoadBalancer:
			if hasEndpoints {
				elem(serviceIPsMap, dispatch(fe.Addr), Verdict{Goto, names.external})
			}
			if !hasExternal {
				elem(noEndpointServicesMap, dispatch(fe.Addr), externalVerdict)
			}
			if fe.Kind == backends.FrontendLoadBalancer && usesFirewall {
				elem(firewallIPsMap, dispatch(fe.Addr), Verdict{Goto, names.firewall})
			}
		case backends.FrontendNodePort:
			k := ElemKey{Proto: proto, Port: fe.Port}
			if hasEndpoints {
				elem(serviceNodePortsMap, k, Verdict{Goto, names.external})
			}
			if !hasExternal {
				elem(noEndpointNodePortsMap, k, externalVerdict)
			}
		}
	}

	// Chains. The masquerade rule goes first in the internal policy chain.
	var masq []Rule
	if hasInternal {
		match := []Expr{AddrMatch{Family: fam, Field: DAddr, Prefixes: []netip.Prefix{netip.PrefixFrom(svc.ClusterIP, svc.ClusterIP.BitLen())}},
			DPort{proto, svc.Port}}
		switch w.masq {
		case backends.MasqueradeAll:
			masq = []Rule{{Exprs: append(match, Verdict{Jump, markMasqChain})}}
		case backends.MasqueradeOffCluster:
			masq = []Rule{{Exprs: append(match, AddrMatch{Family: fam, Field: SAddr, Neg: true, Prefixes: w.podCIDRs},
				Verdict{Jump, markMasqChain})}}
		}
	}

	affinity := svc.AffinityTimeout > 0

	// Each policy chain picks an endpoint either through data maps (DNAT
	// from a bucket map, no per-endpoint chain: an endpoint change only
	// changes elements) or, with affinity or weights too uneven for
	// buckets, through endpoint chains.
	type policy struct {
		name     string
		local    bool
		list     []backends.Endpoint
		ng       Numgen
		bucketed bool
	}
	var policies []*policy
	newPolicy := func(name string, local bool, list []backends.Endpoint) {
		ng := numgen(list, func(int) string { return "" })
		policies = append(policies, &policy{name: name, local: local, list: list, ng: ng,
			bucketed: !affinity && ng.Mod <= max(maxBuckets, uint32(len(list)))})
	}
	if usesCluster {
		newPolicy(names.cluster, false, svc.Cluster)
	}
	if usesLocal {
		newPolicy(names.local, true, svc.Local)
	}

	// Endpoint chains for every endpoint a policy chain without buckets
	// uses.
	type epInfo struct {
		chain, affinity string
	}
	eps := map[netip.AddrPort]epInfo{}
	var epOrder []*backends.Endpoint
	for _, pc := range policies {
		if pc.bucketed {
			continue
		}
		for i := range pc.list {
			ep := &pc.list[i]
			ap := netip.AddrPortFrom(ep.Addr, ep.Port)
			if _, ok := eps[ap]; ok {
				continue
			}
			base := endpointBase(svc, ep)
			eps[ap] = epInfo{chain: endpointChainPrefix + base, affinity: affinitySetPrefix + base}
			epOrder = append(epOrder, ep)
		}
	}

	// The service entries that lead to each policy chain, for the
	// bucket maps: the ClusterIP to the internal one; external IPs, VIPs
	// and the NodePort through the external chain to the external
	// policy's, and with eTP=Local to the Cluster one (short-circuit).
	type entries struct{ clusterIP, external bool }
	reach := map[string]*entries{names.cluster: {}, names.local: {}}
	if hasInternal {
		reach[internalChain].clusterIP = true
	}
	if usesExternal {
		if hasExternal {
			reach[externalPolicyChain].external = true
		}
		if svc.ExternalPolicyLocal && usesCluster {
			reach[names.cluster].external = true
		}
	}

	for _, pc := range policies {
		c := &Chain{Name: pc.name}
		if pc.name == internalChain {
			c.Rules = append(c.Rules, masq...)
		}
		if !pc.bucketed {
			if affinity {
				for i := range pc.list {
					info := eps[netip.AddrPortFrom(pc.list[i].Addr, pc.list[i].Port)]
					c.Rules = append(c.Rules, Rule{Exprs: []Expr{SetMatch{fam, SAddr, info.affinity}, Verdict{Goto, info.chain}}})
				}
			}
			ng := pc.ng
			for i := range ng.Targets {
				ng.Targets[i].Chain = eps[netip.AddrPortFrom(pc.list[i].Addr, pc.list[i].Port)].chain
			}
			if len(ng.Targets) == 1 {
				c.Rules = append(c.Rules, Rule{Exprs: []Expr{Verdict{Goto, ng.Targets[0].Chain}}})
			} else {
				c.Rules = append(c.Rules, Rule{Exprs: []Expr{ng}})
			}
			f.Chains = append(f.Chains, c)
			continue
		}
		// The same rules for every bucketed policy chain of a kind: the
		// service entry's bucket class comes from a map, looked up in a
		// chain they share. (The kernel's commit-time validation walks
		// a verdict map once per chain that looks it up.)
		classes := bucketClassesMap(pc.local)
		c.Rules = append(c.Rules, Rule{Exprs: []Expr{Verdict{Goto, classes}}})
		f.Chains = append(f.Chains, c)

		bc := bucketClass{local: pc.local, w: pc.ng.Mod}
		f.classes = append(f.classes, bc)
		toClass := Verdict{Goto, bc.name()}
		var addrs []netip.Addr
		nodePort := uint16(0)
		for _, fe := range frontends {
			switch {
			case !fe.External() && reach[pc.name].clusterIP:
				addrs = append(addrs, fe.Addr)
			case fe.Kind == backends.FrontendNodePort && reach[pc.name].external:
				nodePort = fe.Port
			case fe.External() && reach[pc.name].external:
				addrs = append(addrs, fe.Addr)
			}
		}
		addrs = backends.SortedAddrs(addrs)
		for _, a := range addrs {
			elem(classes, dispatch(a), toClass)
		}
		if nodePort != 0 {
			elem(classes+bucketNodePorts, ElemKey{Proto: proto, Port: nodePort}, toClass)
		}
		for i, t := range pc.ng.Targets {
			ep := &pc.list[i]
			to := netip.AddrPortFrom(ep.Addr, ep.Port)
			// Hairpin: a pod reaching itself through the service.
			f.addElement(Element{Set: hairpinSet, Key: ElemKey{Addr: ep.Addr, Addr2: ep.Addr}})
			for b := t.Lo; b <= t.Hi; b++ {
				for _, a := range addrs {
					f.addElement(Element{Set: bc.name(), Key: ElemKey{Addr: a, Proto: proto, Port: svc.Port, Bucket: b}, To: to})
				}
				if nodePort != 0 {
					f.addElement(Element{Set: bc.name() + bucketNodePorts, Key: ElemKey{Proto: proto, Port: nodePort, Bucket: b}, To: to})
				}
			}
		}
	}

	if usesExternal {
		c := &Chain{Name: names.external}
		switch svc.ExternalMasquerade() {
		case backends.MasqueradeAll:
			c.Rules = append(c.Rules, Rule{Exprs: []Expr{Verdict{Jump, markMasqChain}}})
		case backends.MasqueradeFromNode:
			if !usesCluster {
				break
			}
			// Pod and host traffic to an external address acts as if it
			// went out to the load balancer and back: Cluster policy.
			if len(w.podCIDRs) > 0 {
				c.Rules = append(c.Rules, Rule{
					Exprs:   []Expr{AddrMatch{Family: fam, Field: SAddr, Prefixes: w.podCIDRs}, Verdict{Goto, names.cluster}},
					Comment: "short-circuit pod traffic",
				})
			}
			c.Rules = append(c.Rules,
				Rule{Exprs: []Expr{FibLocal{SAddr}, Verdict{Jump, markMasqChain}}, Comment: "masquerade local traffic"},
				Rule{Exprs: []Expr{FibLocal{SAddr}, Verdict{Goto, names.cluster}}, Comment: "short-circuit local traffic"},
			)
		}
		if hasExternal {
			c.Rules = append(c.Rules, Rule{Exprs: []Expr{Verdict{Goto, externalPolicyChain}}})
		}
		f.Chains = append(f.Chains, c)
	}

	if usesFirewall {
		f.Chains = append(f.Chains, &Chain{Name: names.firewall, Rules: []Rule{{
			Exprs: []Expr{AddrMatch{Family: fam, Field: SAddr, Neg: true, Prefixes: firewall, Braces: true}, Verdict{Kind: Drop}},
		}}})
	}

	for _, ep := range epOrder {
		info := eps[netip.AddrPortFrom(ep.Addr, ep.Port)]
		c := &Chain{Name: info.chain}
		// Hairpin: a pod reaching itself through the service.
		c.Rules = append(c.Rules, Rule{Exprs: []Expr{
			AddrMatch{Family: fam, Field: SAddr, Prefixes: []netip.Prefix{netip.PrefixFrom(ep.Addr, ep.Addr.BitLen())}},
			Verdict{Jump, markMasqChain},
		}})
		if affinity {
			c.Rules = append(c.Rules, Rule{Exprs: []Expr{SetUpdate{fam, info.affinity}}})
			f.Sets = append(f.Sets, &Set{Name: info.affinity, Key: []KeyType{addrKey(fam)}, Dynamic: true, Timeout: svc.AffinityTimeout})
		}
		c.Rules = append(c.Rules, Rule{Exprs: []Expr{L4Proto{proto}, DNAT{fam, netip.AddrPortFrom(ep.Addr, ep.Port)}}})
		f.Chains = append(f.Chains, c)
	}
	return f
}

// simpleClass reports whether svc, whose internal route and frontends are
// given, is a simple service port (see simpleServicesSet), and returns its
// bucket class and buckets.
func simpleClass(svc *backends.Service, internal backends.Route, frontends []backends.Frontend) (bucketClass, Numgen, bool) {
	if len(frontends) != 1 || internal.Verdict != backends.Forward || svc.AffinityTimeout > 0 {
		return bucketClass{}, Numgen{}, false
	}
	ng := numgen(internal.Endpoints, func(int) string { return "" })
	if ng.Mod < 1 || ng.Mod > presetBuckets {
		return bucketClass{}, Numgen{}, false
	}
	return bucketClass{local: internal.Local, w: ng.Mod}, ng, true
}

// simpleService adds the elements of a simple service port of class bc,
// whose endpoints eps ng spreads over its buckets: its ClusterIP in
// cluster-ips, its entry in simple-services and in the set of its class,
// and, as a policy chain's, its buckets and hairpin pairs. No chain, no
// rule, no verdict: a new simple service port, or an endpoint change of
// one, adds and deletes data elements only.
func (p *planner) simpleService(f *Fragment, svc *backends.Service, bc bucketClass, ng Numgen, eps []backends.Endpoint) {
	k := ElemKey{Addr: svc.ClusterIP, Proto: svc.Protocol.Number(), Port: svc.Port}
	f.addElement(Element{Set: clusterIPsSet, Key: ElemKey{Addr: svc.ClusterIP}})
	f.addElement(Element{Set: simpleServicesSet, Key: k})
	f.addElement(Element{Set: bc.simpleSet(), Key: k})
	f.classes = append(f.classes, bc)
	buckets := bc.name()
	for i, t := range ng.Targets {
		ep := &eps[i]
		f.addElement(Element{Set: hairpinSet, Key: ElemKey{Addr: ep.Addr, Addr2: ep.Addr}})
		to := netip.AddrPortFrom(ep.Addr, ep.Port)
		for b := t.Lo; b <= t.Hi; b++ {
			k.Bucket = b
			f.addElement(Element{Set: buckets, Key: k, To: to})
		}
	}
}

// noEndpointVerdict is the verdict of a route that does not forward.
func noEndpointVerdict(r backends.Route) Verdict {
	if r.Verdict == backends.Reject {
		return Verdict{Goto, rejectChain}
	}
	return Verdict{Kind: Drop}
}

// numgen spreads new connections over endpoints in proportion to their
// weights, normalised by backends.NormalizeWeights: weights 3 and 1 give
// "numgen random mod 4 vmap { 0-2 : goto A, 3 : goto B }", equal weights
// upstream's "numgen random mod N vmap { 0 : goto A, 1 : goto B, ... }".
func numgen(eps []backends.Endpoint, chain func(int) string) Numgen {
	ws, total := backends.NormalizeWeights(eps)
	n := Numgen{Mod: total}
	var lo uint64
	for i, w := range ws {
		n.Targets = append(n.Targets, NumgenTarget{Lo: uint32(lo), Hi: uint32(lo + uint64(w) - 1), Chain: chain(i)})
		lo += uint64(w)
	}
	return n
}

// serviceEqual reports whether two service ports plan alike: Equal but
// for the fields the plan does not read.
func serviceEqual(a, b *backends.Service) bool {
	c := *b
	c.Serving, c.HealthCheckNodePort = a.Serving, a.HealthCheckNodePort
	return a.Equal(&c)
}

// identical reports whether a and b are the same service port by
// identity: equal fields, and the same slices (array and length; nil and
// empty apart). A State is never modified once given to a Backend, so
// identical service ports are equal, and telling so costs the same
// whatever their number of endpoints. TestIdenticalCoversEveryField
// checks that it reads every field.
func identical(a, b *backends.Service) bool {
	if a == b {
		return true
	}
	return a.Key == b.Key && a.Namespace == b.Namespace && a.Name == b.Name && a.PortName == b.PortName &&
		a.Protocol == b.Protocol && a.ClusterIP == b.ClusterIP && a.Port == b.Port && a.NodePort == b.NodePort &&
		sameSlice(a.ExternalIPs, b.ExternalIPs) && sameSlice(a.LoadBalancerVIPs, b.LoadBalancerVIPs) &&
		sameSlice(a.LoadBalancerSourceRanges, b.LoadBalancerSourceRanges) &&
		a.AffinityTimeout == b.AffinityTimeout && a.HealthCheckNodePort == b.HealthCheckNodePort &&
		a.InternalPolicyLocal == b.InternalPolicyLocal && a.ExternalPolicyLocal == b.ExternalPolicyLocal &&
		a.HasAnyEndpoints == b.HasAnyEndpoints && sameSlice(a.Cluster, b.Cluster) && sameSlice(a.Local, b.Local) &&
		sameSlice(a.Serving, b.Serving)
}

// sameSlice reports whether a and b are the same slice: both nil, or the
// same array and length.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (a == nil) == (b == nil) && unsafe.SliceData(a) == unsafe.SliceData(b)
}
