package iptables

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

// The packet tracer walks a Fake's tables (parsed back from its
// iptables-save output, so it sees what a restore made of the rules) the
// way the kernel walks a new connection's first packet: nat PREROUTING
// (or OUTPUT, from the node), where DNAT picks the destination; then
// filter INPUT (to a node address), FORWARD, or OUTPUT (from the node);
// then nat POSTROUTING for the masquerade. A rule with a probability
// does not end the walk, so every endpoint a connection may reach is
// collected. Addresses of addrtype LOCAL are the node's and loopback.

// trRule is one parsed rule.
type trRule struct {
	src, dst         *negPrefix
	proto            string
	dport            int
	srcType, dstType *negString
	probability      bool
	recentName       string
	rcheck, set      bool
	matchSet         string     // "-m set --match-set NAME dst,dst,src"
	mark             *negString // value/mask
	ctstate          *negString
	target           string
	toDestination    string
	orMark, xorMark  string
}

type negPrefix struct {
	neg bool
	p   netip.Prefix
}

type negString struct {
	neg bool
	v   string
}

// parseSave parses iptables-save output into table → chain → rules.
func parseSave(t *testing.T, save string) map[string]map[string][]trRule {
	t.Helper()
	out := map[string]map[string][]trRule{}
	var table string
	for _, line := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
			out[table] = map[string][]trRule{}
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			out[table][name] = nil
		case strings.HasPrefix(line, "-A "):
			args, err := splitArgs(line)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			out[table][args[1]] = append(out[table][args[1]], parseRule(t, args[2:]))
		}
	}
	return out
}

func parseRule(t *testing.T, args []string) trRule {
	t.Helper()
	var r trRule
	neg := false
	next := func(i *int) string {
		*i++
		if *i >= len(args) {
			t.Fatalf("rule %q: %s without a value", args, args[*i-1])
		}
		return args[*i]
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch a {
		case "!":
			neg = true
			continue
		case "-s", "-d":
			v := next(&i)
			p, err := netip.ParsePrefix(v)
			if err != nil {
				t.Fatalf("rule %q: %v", args, err)
			}
			if a == "-s" {
				r.src = &negPrefix{neg, p}
			} else {
				r.dst = &negPrefix{neg, p}
			}
		case "-p":
			r.proto = next(&i)
		case "--dport":
			r.dport, _ = strconv.Atoi(next(&i))
		case "--src-type":
			r.srcType = &negString{neg, next(&i)}
		case "--dst-type":
			r.dstType = &negString{neg, next(&i)}
		case "--probability":
			r.probability = true
			next(&i)
		case "--name":
			r.recentName = next(&i)
		case "--rcheck":
			r.rcheck = true
		case "--set":
			r.set = true
		case "--mark":
			r.mark = &negString{neg, next(&i)}
		case "--ctstate":
			r.ctstate = &negString{neg, next(&i)}
		case "-j":
			r.target = next(&i)
		case "--to-destination":
			r.toDestination = next(&i)
		case "--or-mark":
			r.orMark = next(&i)
		case "--xor-mark":
			r.xorMark = next(&i)
		case "--match-set":
			r.matchSet = next(&i)
			if flags := next(&i); flags != "dst,dst,src" {
				t.Fatalf("rule %q: the tracer knows the set flags dst,dst,src, not %s", args, flags)
			}
		case "-m", "--comment", "--mode", "--seconds":
			next(&i)
		case "--reap", "--random-fully":
		default:
			t.Fatalf("rule %q: the tracer does not know %s", args, a)
		}
		neg = false
	}
	return r
}

type tracer struct {
	t      *testing.T
	tables map[string]map[string][]trRule
	sets   map[string][]string // entries, as ipset writes them
	local  []netip.Addr
}

func newTracer(t *testing.T, f *Fake, nodeIPs ...netip.Addr) *tracer {
	t.Helper()
	sets := map[string][]string{}
	for _, name := range []string{SetHairpin4, SetHairpin6} {
		sets[name] = f.setEntries(name)
	}
	return &tracer{t: t, tables: parseSave(t, f.Dump()), sets: sets, local: append(nodeIPs, ip("127.0.0.1"), ip("::1"))}
}

// packet is the first packet of a new connection.
type packet struct {
	src, dst netip.Addr
	proto    string
	dport    int
	fromNode bool            // sent by the node itself (nat and filter OUTPUT)
	recent   map[string]bool // affinity lists (recent --name) that hold src
}

// walk is the state of one packet's walk.
type walk struct {
	p      packet
	dnat   []string
	mark   uint64
	filter string // ACCEPT, DROP, REJECT
	masq   bool
}

func (tr *tracer) isLocal(a netip.Addr) bool { return slices.Contains(tr.local, a) }

func parseMark(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		t.Fatalf("mark %q: %v", s, err)
	}
	return v
}

func (tr *tracer) matches(w *walk, r *trRule) bool {
	p := &w.p
	ok := func(neg, m bool) bool { return m != neg }
	if r.src != nil && !ok(r.src.neg, r.src.p.Contains(p.src)) {
		return false
	}
	if r.dst != nil && !ok(r.dst.neg, r.dst.p.Contains(p.dst)) {
		return false
	}
	if r.proto != "" && r.proto != p.proto || r.dport != 0 && r.dport != p.dport {
		return false
	}
	if r.srcType != nil && !ok(r.srcType.neg, r.srcType.v == "LOCAL" && tr.isLocal(p.src)) {
		return false
	}
	if r.dstType != nil && !ok(r.dstType.neg, r.dstType.v == "LOCAL" && tr.isLocal(p.dst)) {
		return false
	}
	if r.rcheck && !p.recent[r.recentName] {
		return false
	}
	if r.matchSet != "" {
		// dst,dst,src: destination address, protocol:destination port,
		// source address.
		entry := p.dst.String() + "," + p.proto + ":" + strconv.Itoa(p.dport) + "," + p.src.String()
		if !slices.Contains(tr.sets[r.matchSet], entry) {
			return false
		}
	}
	if r.mark != nil {
		v, m, _ := strings.Cut(r.mark.v, "/")
		if !ok(r.mark.neg, w.mark&parseMark(tr.t, m) == parseMark(tr.t, v)) {
			return false
		}
	}
	if r.ctstate != nil {
		states := []string{"NEW"}
		if len(w.dnat) > 0 {
			states = append(states, "DNAT")
		}
		in := false
		for _, s := range strings.Split(r.ctstate.v, ",") {
			in = in || slices.Contains(states, s)
		}
		if !ok(r.ctstate.neg, in) {
			return false
		}
	}
	return true
}

// run walks chain of table; it reports whether the walk ended there.
func (tr *tracer) run(w *walk, table, chain string, depth int) bool {
	if depth > 20 {
		tr.t.Fatalf("loop through %s", chain)
	}
	for i := range tr.tables[table][chain] {
		r := &tr.tables[table][chain][i]
		if !tr.matches(w, r) {
			continue
		}
		ended := false
		switch r.target {
		case "":
		case targetDNAT:
			w.dnat = append(w.dnat, r.toDestination)
			ended = true
		case targetMark:
			if r.orMark != "" {
				w.mark |= parseMark(tr.t, r.orMark)
			}
			if r.xorMark != "" {
				w.mark ^= parseMark(tr.t, r.xorMark)
			}
		case targetAccept, targetDrop, targetReject:
			w.filter, ended = r.target, true
		case targetMasquerade:
			w.masq, ended = true, true
		case targetReturn:
			return false
		default:
			if _, ok := tr.tables[table][r.target]; !ok {
				tr.t.Fatalf("%s %s jumps to missing chain %s", table, chain, r.target)
			}
			ended = tr.run(w, table, r.target, depth+1)
		}
		if ended && !r.probability {
			return true
		}
	}
	return false
}

// trace returns where the connection goes: its possible endpoints
// (sorted, ", "-separated), DROP or REJECT, ACCEPT when a filter rule
// accepted it un-DNATed, or its own destination when nothing changed it;
// and whether it is masqueraded.
func (tr *tracer) trace(p packet) (string, bool) {
	w := &walk{p: p}
	natHook, filterHook := chainPrerouting, chainForward
	if p.fromNode {
		natHook, filterHook = chainOutput, chainOutput
	}
	tr.run(w, TableNAT, natHook, 0)
	if len(w.dnat) > 0 {
		ap := netip.MustParseAddrPort(w.dnat[0])
		w.p.dst, w.p.dport = ap.Addr(), int(ap.Port())
	}
	if !p.fromNode && tr.isLocal(w.p.dst) {
		filterHook = chainInput
	}
	if tr.run(w, TableFilter, filterHook, 0); w.filter == targetDrop || w.filter == targetReject {
		return w.filter, false
	}
	tr.run(w, TableNAT, chainPostrouting, 0)
	if len(w.dnat) == 0 && w.filter == targetAccept {
		return targetAccept, w.masq
	}
	if len(w.dnat) == 0 {
		return netip.AddrPortFrom(p.dst, uint16(p.dport)).String(), w.masq
	}
	d := slices.Clone(w.dnat)
	slices.Sort(d)
	return strings.Join(slices.Compact(d), ", "), w.masq
}

type flowCase struct {
	name     string
	src      string
	dst      string // addr:port
	proto    string // "" is tcp
	fromNode bool
	affinity string // endpoint whose affinity list holds src
	want     string
	masq     bool
}

func runFlows(t *testing.T, tr *tracer, cases []flowCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := netip.MustParseAddrPort(c.dst)
			p := packet{src: ip(c.src), dst: dst.Addr(), dport: int(dst.Port()), proto: c.proto, fromNode: c.fromNode, recent: map[string]bool{}}
			if p.proto == "" {
				p.proto = "tcp"
			}
			if c.affinity != "" {
				for _, rules := range tr.tables[TableNAT] {
					for _, r := range rules {
						if r.toDestination == c.affinity && r.recentName != "" {
							p.recent[r.recentName] = true
						}
					}
				}
				if len(p.recent) != 1 {
					t.Fatalf("endpoint %s has affinity lists %v, want one", c.affinity, p.recent)
				}
			}
			got, masq := tr.trace(p)
			if got != c.want || masq != c.masq {
				t.Errorf("%s -> %s: got %s masq %v, want %s masq %v", c.src, c.dst, got, masq, c.want, c.masq)
			}
		})
	}
}

func syncedFake(t *testing.T, o Opts, s *backends.State) *Fake {
	t.Helper()
	f := NewFake()
	b, err := NewWithFake(o, f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Sync(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestPacketFlows(t *testing.T) {
	const (
		offNodePod = "10.244.3.5"
		client     = "198.51.100.200" // off-cluster, outside the lb's ranges
		allowed    = "192.0.2.100"    // inside the lb's ranges
	)
	f := syncedFake(t, Opts{Family: backends.IPv4, LocalhostNodePorts: true}, goldenState4())
	tr := newTracer(t, f, ip(nodeIP))
	runFlows(t, tr, []flowCase{
		{name: "clusterIP from a pod", src: offNodePod, dst: "10.96.0.10:80", want: "10.244.1.10:8080, 10.244.2.10:8080"},
		{name: "clusterIP from off-cluster is masqueraded", src: client, dst: "10.96.0.10:80", want: "10.244.1.10:8080, 10.244.2.10:8080", masq: true},
		{name: "clusterIP from the node", src: nodeIP, dst: "10.96.0.10:80", fromNode: true, want: "10.244.1.10:8080, 10.244.2.10:8080", masq: true},
		{name: "clusterIP other port", src: offNodePod, dst: "10.96.0.10:81", want: "10.96.0.10:81"},
		{name: "weighted", src: offNodePod, dst: "10.96.0.11:80", want: "10.244.1.11:8080, 10.244.2.11:8080"},
		{name: "UDP", src: offNodePod, dst: "10.96.0.17:53", proto: "udp", want: "10.244.1.17:53"},
		{name: "UDP service, TCP packet", src: offNodePod, dst: "10.96.0.17:53", want: "10.96.0.17:53"},
		{name: "SCTP", src: offNodePod, dst: "10.96.0.20:80", proto: "sctp", want: "10.244.2.20:8080"},
		{name: "SCTP NodePort", src: client, dst: nodeIP + ":30020", proto: "sctp", want: "10.244.2.20:8080", masq: true},
		{name: "hairpin is masqueraded", src: "10.244.1.17", dst: "10.96.0.17:53", proto: "udp", want: "10.244.1.17:53", masq: true},
		{name: "hairpin with affinity", src: "10.244.1.12", dst: "10.96.0.12:80", affinity: "10.244.1.12:8080", want: "10.244.1.12:8080", masq: true},
		{name: "an endpoint to another service is not masqueraded", src: "10.244.1.17", dst: "10.96.0.12:80", affinity: "10.244.2.12:8080", want: "10.244.2.12:8080"},
		{name: "no endpoints: reject", src: offNodePod, dst: "10.96.0.13:80", want: "REJECT"},
		{name: "no endpoints: external IP rejects", src: client, dst: "192.0.2.13:80", want: "REJECT"},
		{name: "no endpoints: NodePort rejects", src: client, dst: nodeIP + ":30013", want: "REJECT"},
		{name: "internal Local without local endpoints: drop", src: offNodePod, dst: "10.96.0.14:80", want: "DROP"},
		{name: "affinity", src: offNodePod, dst: "10.96.0.12:80", affinity: "10.244.2.12:8080", want: "10.244.2.12:8080"},
		{name: "affinity spans the NodePort", src: client, dst: nodeIP + ":30012", affinity: "10.244.1.12:8080", want: "10.244.1.12:8080", masq: true},
		{name: "NodePort, policy Cluster: masqueraded", src: client, dst: nodeIP + ":30018", want: "10.244.2.18:8080, 10.244.2.19:8080", masq: true},
		{name: "NodePort on another address", src: client, dst: "198.51.100.12:30018", want: "198.51.100.12:30018"},
		{name: "LB VIP, policy Cluster", src: client, dst: "203.0.113.18:80", want: "10.244.2.18:8080, 10.244.2.19:8080", masq: true},
		{name: "NodePort, policy Local: client kept", src: client, dst: nodeIP + ":30015", want: "10.244.1.15:8080"},
		{name: "external IP, policy Local, no firewall", src: client, dst: "192.0.2.15:80", want: "10.244.1.15:8080"},
		{name: "LB firewall allows", src: allowed, dst: "203.0.113.15:80", want: "10.244.1.15:8080"},
		{name: "LB firewall denies", src: client, dst: "203.0.113.15:80", want: "DROP"},
		{name: "LB firewall, the NodePort is not filtered", src: client, dst: nodeIP + ":30015", want: "10.244.1.15:8080"},
		{name: "LB from the node: exception, short circuit", src: nodeIP, dst: "203.0.113.15:80", fromNode: true,
			want: "10.244.1.15:8080, 10.244.2.15:8080", masq: true},
		{name: "LB firewall applies to pods", src: offNodePod, dst: "203.0.113.15:80", want: "DROP"},
		{name: "health check node port", src: client, dst: nodeIP + ":32015", want: "ACCEPT"},
		{name: "policy Local, no local endpoint: drop", src: client, dst: nodeIP + ":30016", want: "DROP"},
		{name: "policy Local, no local endpoint, LB drops", src: client, dst: "203.0.113.16:80", want: "DROP"},
		{name: "policy Local, no local endpoint, a pod short-circuits", src: offNodePod, dst: "203.0.113.16:80", want: "10.244.2.16:8080"},
		{name: "policy Local, no local endpoint, the node short-circuits", src: nodeIP, dst: "203.0.113.16:80", fromNode: true, want: "10.244.2.16:8080", masq: true},
		{name: "localhost NodePort", src: "127.0.0.1", dst: "127.0.0.1:30018", fromNode: true, want: "10.244.2.18:8080, 10.244.2.19:8080", masq: true},
		{name: "martian to localhost dropped", src: client, dst: "127.0.0.1:8080", want: "DROP"},
	})
}

func TestPacketFlowsOptions(t *testing.T) {
	t.Run("localhost NodePorts off", func(t *testing.T) {
		f := syncedFake(t, Opts{Family: backends.IPv4}, goldenState4())
		runFlows(t, newTracer(t, f, ip(nodeIP)), []flowCase{
			{name: "localhost NodePort", src: "127.0.0.1", dst: "127.0.0.1:30018", fromNode: true, want: "127.0.0.1:30018"},
			{name: "no martian rule", src: "198.51.100.200", dst: "127.0.0.1:8080", want: "127.0.0.1:8080"},
			{name: "node IP NodePort", src: "198.51.100.200", dst: nodeIP + ":30018", want: "10.244.2.18:8080, 10.244.2.19:8080", masq: true},
		})
	})
	t.Run("NodePort addresses with loopback", func(t *testing.T) {
		s := goldenState4()
		s.NodePortAddresses = []netip.Addr{ip("127.0.0.1"), ip("198.51.100.12")}
		f := syncedFake(t, Opts{Family: backends.IPv4, LocalhostNodePorts: true}, s)
		runFlows(t, newTracer(t, f, ip(nodeIP), ip("198.51.100.12")), []flowCase{
			{name: "localhost", src: "127.0.0.1", dst: "127.0.0.1:30018", fromNode: true, want: "10.244.2.18:8080, 10.244.2.19:8080", masq: true},
			{name: "listed address", src: "198.51.100.200", dst: "198.51.100.12:30018", want: "10.244.2.18:8080, 10.244.2.19:8080", masq: true},
			{name: "unlisted node address", src: "198.51.100.200", dst: nodeIP + ":30018", want: nodeIP + ":30018"},
		})
	})
	t.Run("IPv6, masquerade all", func(t *testing.T) {
		f := syncedFake(t, Opts{Family: backends.IPv6, LocalhostNodePorts: true}, goldenState6())
		runFlows(t, newTracer(t, f, ip("2001:db8:100::11")), []flowCase{
			{name: "clusterIP from a pod", src: "fd00:10:244:3::5", dst: "[fd00:10:96::10]:80",
				want: "[fd00:10:244:1::10]:8080, [fd00:10:244:2::10]:8080", masq: true},
			{name: "NodePort", src: "2001:db8:100::200", dst: "[2001:db8:100::11]:30010",
				want: "[fd00:10:244:1::10]:8080, [fd00:10:244:2::10]:8080", masq: true},
			{name: "no localhost NodePorts on IPv6", src: "::1", dst: "[::1]:30010", fromNode: true, want: "[::1]:30010"},
			{name: "no endpoints", src: "fd00:10:244:3::5", dst: "[fd00:10:96::13]:80", want: "REJECT"},
		})
	})
	t.Run("masquerade none without cluster CIDRs", func(t *testing.T) {
		s := goldenState4()
		s.ClusterCIDRs = nil
		f := syncedFake(t, Opts{Family: backends.IPv4}, s)
		runFlows(t, newTracer(t, f, ip(nodeIP)), []flowCase{
			{name: "off-cluster client", src: "198.51.100.200", dst: "10.96.0.10:80", want: "10.244.1.10:8080, 10.244.2.10:8080"},
			{name: "LB policy Local from a pod is not short-circuited", src: "10.244.3.5", dst: "203.0.113.16:80", want: "DROP"},
		})
	})
}
