package nftables

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/wasp-proxy/wasp/backends"
)

// This file is the rule IR: tables, chains, sets, maps and elements as
// plain data, and one Go type per expression or statement, each printing
// itself in nft syntax. The planner builds it, the diff compares it, the
// fake kernel validates and dumps it, and the netlink kernel compiles it to
// google/nftables expressions. Nothing here touches the kernel.

// Hook is the netfilter hook of a base chain.
type Hook uint8

const (
	HookPrerouting Hook = iota + 1
	HookInput
	HookForward
	HookOutput
	HookPostrouting
)

func (h Hook) String() string {
	switch h {
	case HookPrerouting:
		return "prerouting"
	case HookInput:
		return "input"
	case HookForward:
		return "forward"
	case HookOutput:
		return "output"
	case HookPostrouting:
		return "postrouting"
	}
	return fmt.Sprintf("hook(%d)", uint8(h))
}

// ChainType is the type of a base chain.
type ChainType uint8

const (
	ChainFilter ChainType = iota + 1
	ChainNAT
)

func (t ChainType) String() string {
	switch t {
	case ChainFilter:
		return "filter"
	case ChainNAT:
		return "nat"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Standard priorities (the same in the ip and ip6 families).
const (
	priorityDstNAT = -100
	prioritySrcNAT = 100
)

// BaseChain makes a chain a base chain: attached to a hook.
type BaseChain struct {
	Type     ChainType
	Hook     Hook
	Priority int32
}

func (b BaseChain) String() string {
	return fmt.Sprintf("type %s hook %s priority %s; policy accept;", b.Type, b.Hook, priorityString(b.Priority))
}

// priorityString spells p relative to dstnat or srcnat, as nft lists it.
func priorityString(p int32) string {
	for _, std := range []struct {
		name string
		v    int32
	}{{"dstnat", priorityDstNAT}, {"srcnat", prioritySrcNAT}} {
		switch d := p - std.v; {
		case d == 0:
			return std.name
		case d > -50 && d < 0:
			return fmt.Sprintf("%s - %d", std.name, -d)
		case d > 0 && d < 50:
			return fmt.Sprintf("%s + %d", std.name, d)
		}
	}
	return fmt.Sprint(p)
}

// Chain is a chain and its rules. A nil Base makes a regular chain, only
// reached by jump, goto or a verdict map.
type Chain struct {
	Name  string
	Base  *BaseChain
	Rules []Rule
}

// Rule is a sequence of expressions, matches first, then statements.
type Rule struct {
	Exprs   []Expr
	Comment string
}

func (r Rule) String() string {
	var b strings.Builder
	for i, e := range r.Exprs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(e.String())
	}
	if r.Comment != "" {
		fmt.Fprintf(&b, " comment %q", r.Comment)
	}
	return b.String()
}

func rulesEqual(a, b []Rule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].String() != b[i].String() {
			return false
		}
	}
	return true
}

// Expr is an expression or statement of a rule. The set of types is
// closed: the compiler and the fake know each one.
type Expr interface {
	String() string
	expr()
}

// KeyType is the type of one field of a set key.
type KeyType uint8

const (
	KeyIPv4Addr KeyType = iota + 1
	KeyIPv6Addr
	KeyInetProto
	KeyInetService
	// KeyBucket is a numgen bucket, a 32-bit number in host byte order;
	// nft calls the type "mark" (the 32-bit host-order type it has).
	KeyBucket
)

func (k KeyType) String() string {
	switch k {
	case KeyIPv4Addr:
		return "ipv4_addr"
	case KeyIPv6Addr:
		return "ipv6_addr"
	case KeyInetProto:
		return "inet_proto"
	case KeyInetService:
		return "inet_service"
	case KeyBucket:
		return "mark"
	}
	return fmt.Sprintf("keytype(%d)", uint8(k))
}

// addrKey is the address key type of family f.
func addrKey(f backends.Family) KeyType {
	if f == backends.IPv6 {
		return KeyIPv6Addr
	}
	return KeyIPv4Addr
}

// Set is a named set or, with Map, a verdict map, or with Data a data map
// (Data is then the address and inet_service of a DNAT target). A Timeout
// makes a set whose elements expire; with Dynamic, rules may add to it
// (affinity).
type Set struct {
	Name    string
	Key     []KeyType
	Map     bool      // a verdict map
	Data    []KeyType // a data map: the type of its values
	Dynamic bool      // flags dynamic: updated from the packet path
	Timeout uint32    // seconds; non-zero means flags timeout
	Comment string
}

func (s *Set) equal(o *Set) bool {
	return s.Name == o.Name && s.Map == o.Map && s.Dynamic == o.Dynamic && s.Timeout == o.Timeout &&
		s.Comment == o.Comment && slices.Equal(s.Key, o.Key) && slices.Equal(s.Data, o.Data)
}

// isMap reports whether s is a verdict or data map.
func (s *Set) isMap() bool { return s.Map || len(s.Data) > 0 }

// typeString is the set's "type" line: "ipv4_addr . inet_proto : verdict".
func (s *Set) typeString() string {
	parts := make([]string, len(s.Key))
	for i, k := range s.Key {
		parts[i] = k.String()
	}
	t := strings.Join(parts, " . ")
	if s.Map {
		t += " : verdict"
	}
	for i, d := range s.Data {
		if i == 0 {
			t += " : "
		} else {
			t += " . "
		}
		t += d.String()
	}
	return t
}

// ElemKey is the key of a set or map element. Only the fields of the
// set's key type are used; the others stay zero. Addr2 is the second
// address of a key of two. It is comparable.
type ElemKey struct {
	Addr   netip.Addr
	Addr2  netip.Addr
	Proto  uint8
	Port   uint16
	Bucket uint32
}

// string prints k for a set of key type kt.
func (k ElemKey) string(kt []KeyType) string {
	parts := make([]string, 0, len(kt))
	addrs := 0
	for _, t := range kt {
		switch t {
		case KeyIPv4Addr, KeyIPv6Addr:
			if addrs++; addrs == 2 {
				parts = append(parts, k.Addr2.String())
				continue
			}
			parts = append(parts, k.Addr.String())
		case KeyInetProto:
			parts = append(parts, protoName(k.Proto))
		case KeyInetService:
			parts = append(parts, itoa(uint64(k.Port)))
		case KeyBucket:
			parts = append(parts, itoa(uint64(k.Bucket)))
		}
	}
	return strings.Join(parts, " . ")
}

func (k ElemKey) compare(o ElemKey) int {
	if c := k.Addr.Compare(o.Addr); c != 0 {
		return c
	}
	if c := k.Addr2.Compare(o.Addr2); c != 0 {
		return c
	}
	if k.Proto != o.Proto {
		return int(k.Proto) - int(o.Proto)
	}
	if k.Port != o.Port {
		return int(k.Port) - int(o.Port)
	}
	return cmp.Compare(k.Bucket, o.Bucket)
}

// Element is an element of a named set, of a verdict map when Value is
// set, or of a data map when To is.
type Element struct {
	Set   string
	Key   ElemKey
	Value Verdict        // zero for a set or data map
	To    netip.AddrPort // a data map's value: a DNAT target
}

// elemValue is what an element maps its key to; comparable.
type elemValue struct {
	verdict Verdict
	to      netip.AddrPort
}

func (e *Element) value() elemValue { return elemValue{e.Value, e.To} }

// String prints v as the value of an element of s.
func (v elemValue) string(s *Set) string {
	switch {
	case s.Map:
		return v.verdict.String()
	case len(s.Data) > 0:
		return v.to.Addr().String() + " . " + itoa(uint64(v.to.Port()))
	}
	return ""
}

// IP protocol numbers of the Service protocols.
const (
	protoTCP  = backends.ProtoNumberTCP
	protoUDP  = backends.ProtoNumberUDP
	protoSCTP = backends.ProtoNumberSCTP
)

func protoName(p uint8) string {
	switch p {
	case protoTCP:
		return "tcp"
	case protoUDP:
		return "udp"
	case protoSCTP:
		return "sctp"
	}
	return itoa(uint64(p))
}

func ipKeyword(f backends.Family) string {
	if f == backends.IPv6 {
		return "ip6"
	}
	return "ip"
}

// AddrField is the address a match or key reads.
type AddrField uint8

const (
	SAddr AddrField = iota + 1
	DAddr
)

func (f AddrField) String() string {
	if f == SAddr {
		return "saddr"
	}
	return "daddr"
}

// VerdictKind is what a verdict does.
type VerdictKind uint8

const (
	VerdictNone VerdictKind = iota // no verdict: the element of a plain set
	Accept
	Drop
	Return
	Jump
	Goto
)

// Verdict ends (or, for jump, suspends) the evaluation of a chain: accept,
// drop, return, jump CHAIN or goto CHAIN. It is both a statement and the
// value of a verdict-map element.
type Verdict struct {
	Kind  VerdictKind
	Chain string // for Jump and Goto
}

func (v Verdict) String() string {
	switch v.Kind {
	case Accept:
		return "accept"
	case Drop:
		return "drop"
	case Return:
		return "return"
	case Jump:
		return "jump " + v.Chain
	case Goto:
		return "goto " + v.Chain
	}
	return ""
}

func (Verdict) expr() {}

// CtStateNew matches the first packet of a connection: "ct state new".
type CtStateNew struct{}

func (CtStateNew) String() string { return "ct state new" }
func (CtStateNew) expr()          {}

// AddrMatch matches the source or destination address against prefixes
// (a prefix of full length is an address): "ip daddr 10.96.0.1",
// "ip saddr != 10.244.0.0/16", or with several prefixes or Braces an
// anonymous set, "ip saddr != { 203.0.113.0/24, 198.51.100.7 }".
type AddrMatch struct {
	Family   backends.Family
	Field    AddrField
	Neg      bool
	Prefixes []netip.Prefix
	Braces   bool // print a single prefix in braces, as upstream does for some rules
}

func (m AddrMatch) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s ", ipKeyword(m.Family), m.Field)
	if m.Neg {
		b.WriteString("!= ")
	}
	set := m.Braces || len(m.Prefixes) != 1
	if set {
		b.WriteString("{ ")
	}
	for i, p := range m.Prefixes {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(prefixString(p))
	}
	if set {
		b.WriteString(" }")
	}
	return b.String()
}

func (AddrMatch) expr() {}

func prefixString(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.Masked().String()
}

// SetMatch matches an address against a named set: "ip daddr @cluster-ips".
type SetMatch struct {
	Family backends.Family
	Field  AddrField
	Set    string
}

func (m SetMatch) String() string {
	return fmt.Sprintf("%s %s @%s", ipKeyword(m.Family), m.Field, m.Set)
}
func (SetMatch) expr() {}

// L4Proto matches the transport protocol: "meta l4proto tcp".
type L4Proto struct{ Proto uint8 }

func (m L4Proto) String() string { return "meta l4proto " + protoName(m.Proto) }
func (L4Proto) expr()            {}

// DPort matches protocol and destination port: "tcp dport 80".
type DPort struct {
	Proto uint8
	Port  uint16
}

func (m DPort) String() string { return fmt.Sprintf("%s dport %d", protoName(m.Proto), m.Port) }
func (DPort) expr()            {}

// FibLocal matches a local source or destination address:
// "fib daddr type local".
type FibLocal struct{ Field AddrField }

func (m FibLocal) String() string { return fmt.Sprintf("fib %s type local", m.Field) }
func (FibLocal) expr()            {}

// KeyField is one field of a concatenated lookup key.
type KeyField uint8

const (
	KeyDAddr   KeyField = iota + 1 // ip daddr / ip6 daddr
	KeyL4Proto                     // meta l4proto
	KeyTHDPort                     // th dport
	KeyNumgen                      // numgen random mod VMap.Mod
)

// VMap looks a concatenation of packet fields up in a named verdict map:
// "ip daddr . meta l4proto . th dport vmap @service-ips". A KeyNumgen
// field is a random number below Mod: "... . numgen random mod 4 vmap @m".
type VMap struct {
	Family backends.Family
	Key    []KeyField
	Mod    uint32 // for KeyNumgen
	Map    string
}

func (m VMap) String() string {
	return keyString(m.Family, m.Key, m.Mod) + " vmap @" + m.Map
}
func (VMap) expr() {}

// KeySetMatch matches a concatenation of packet fields against a named
// set: "ip daddr . meta l4proto . th dport @simple-services". It is
// VMap's lookup without a verdict: no element, no match.
type KeySetMatch struct {
	Family backends.Family
	Key    []KeyField // without KeyNumgen
	Set    string
}

func (m KeySetMatch) String() string {
	return keyString(m.Family, m.Key, 0) + " @" + m.Set
}
func (KeySetMatch) expr() {}

// DNATMap DNATs to the address and port a concatenation of packet fields
// maps to in a named data map: "dnat ip to ip daddr . meta l4proto . th
// dport . numgen random mod 4 map @m". No element: no match.
type DNATMap struct {
	Family backends.Family
	Key    []KeyField
	Mod    uint32 // for KeyNumgen
	Map    string
}

func (m DNATMap) String() string {
	return fmt.Sprintf("dnat %s to %s map @%s", ipKeyword(m.Family), keyString(m.Family, m.Key, m.Mod), m.Map)
}
func (DNATMap) expr() {}

func keyString(f backends.Family, key []KeyField, mod uint32) string {
	parts := make([]string, len(key))
	for i, k := range key {
		switch k {
		case KeyDAddr:
			parts[i] = ipKeyword(f) + " daddr"
		case KeyL4Proto:
			parts[i] = "meta l4proto"
		case KeyTHDPort:
			parts[i] = "th dport"
		case KeyNumgen:
			parts[i] = fmt.Sprintf("numgen random mod %d", mod)
		}
	}
	return strings.Join(parts, " . ")
}

// AddrPairMatch matches source and destination address together against
// a named set of address pairs: "ip saddr . ip daddr @hairpin-endpoints".
type AddrPairMatch struct {
	Family backends.Family
	Set    string
}

func (m AddrPairMatch) String() string {
	k := ipKeyword(m.Family)
	return fmt.Sprintf("%s saddr . %s daddr @%s", k, k, m.Set)
}
func (AddrPairMatch) expr() {}

// CtStatusDNAT matches connections whose destination was NATed:
// "ct status dnat".
type CtStatusDNAT struct{}

func (CtStatusDNAT) String() string { return "ct status dnat" }
func (CtStatusDNAT) expr()          {}

// Numgen picks a chain at random: "numgen random mod 4 vmap { 0-2 : goto
// A, 3 : goto B }". Targets cover 0..Mod-1 in order without gaps; a
// target of one value prints as "3", of several as "0-2".
type Numgen struct {
	Mod     uint32
	Targets []NumgenTarget
}

// NumgenTarget sends the numbers Lo..Hi (inclusive) to Chain.
type NumgenTarget struct {
	Lo, Hi uint32
	Chain  string
}

func (m Numgen) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "numgen random mod %d vmap { ", m.Mod)
	for i, t := range m.Targets {
		if i > 0 {
			b.WriteString(", ")
		}
		if t.Lo == t.Hi {
			fmt.Fprintf(&b, "%d : goto %s", t.Lo, t.Chain)
		} else {
			fmt.Fprintf(&b, "%d-%d : goto %s", t.Lo, t.Hi, t.Chain)
		}
	}
	b.WriteString(" }")
	return b.String()
}
func (Numgen) expr() {}

// intervals reports whether a target spans more than one value, so the
// map needs interval keys.
func (m Numgen) intervals() bool {
	for _, t := range m.Targets {
		if t.Lo != t.Hi {
			return true
		}
	}
	return false
}

// Reject rejects with ICMP port unreachable (ICMPv6 in ip6): "reject".
type Reject struct{}

func (Reject) String() string { return "reject" }
func (Reject) expr()          {}

// MarkOr sets bits of the packet mark: "mark set mark or 0x004000".
type MarkOr struct{ Bits uint32 }

func (m MarkOr) String() string { return fmt.Sprintf("mark set mark or %#08x", m.Bits) }
func (MarkOr) expr()            {}

// MarkXor flips bits of the packet mark: "mark set mark xor 0x004000".
type MarkXor struct{ Bits uint32 }

func (m MarkXor) String() string { return fmt.Sprintf("mark set mark xor %#08x", m.Bits) }
func (MarkXor) expr()            {}

// MarkClear matches packets whose mark has none of Bits:
// "mark and 0x004000 == 0".
type MarkClear struct{ Bits uint32 }

func (m MarkClear) String() string { return fmt.Sprintf("mark and %#08x == 0", m.Bits) }
func (MarkClear) expr()            {}

// Masquerade source-NATs to the outgoing interface's address:
// "masquerade fully-random".
type Masquerade struct{ FullyRandom bool }

func (m Masquerade) String() string {
	if m.FullyRandom {
		return "masquerade fully-random"
	}
	return "masquerade"
}
func (Masquerade) expr() {}

// DNAT rewrites the destination: "dnat to 10.244.1.10:8080",
// "dnat to [fd00:10:244:1::10]:8080".
type DNAT struct {
	Family backends.Family
	To     netip.AddrPort
}

func (s DNAT) String() string { return "dnat to " + s.To.String() }
func (DNAT) expr()            {}

// SetUpdate adds the source address to a dynamic set or refreshes its
// timeout: "update @affinity-X { ip saddr }".
type SetUpdate struct {
	Family backends.Family
	Set    string
}

func (s SetUpdate) String() string {
	return fmt.Sprintf("update @%s { %s saddr }", s.Set, ipKeyword(s.Family))
}
func (SetUpdate) expr() {}

// refs returns the chains and named sets r refers to.
func (r *Rule) refs(chains, sets func(string)) {
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case Verdict:
			if e.Kind == Jump || e.Kind == Goto {
				chains(e.Chain)
			}
		case Numgen:
			for _, t := range e.Targets {
				chains(t.Chain)
			}
		case SetMatch:
			sets(e.Set)
		case VMap:
			sets(e.Map)
		case KeySetMatch:
			sets(e.Set)
		case DNATMap:
			sets(e.Map)
		case AddrPairMatch:
			sets(e.Set)
		case SetUpdate:
			sets(e.Set)
		}
	}
}
