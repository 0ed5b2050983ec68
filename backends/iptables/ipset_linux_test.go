//go:build linux

package iptables

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
)

// nla is a netlink attribute of type typ holding the concatenation of
// values, padded to 4 bytes.
func nla(typ uint16, values ...[]byte) []byte {
	v := slices.Concat(values...)
	b := binary.NativeEndian.AppendUint16(nil, uint16(unix.SizeofNlAttr+len(v)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// ipsetMsg is a message of an ipset dump: a netfilter header, then attrs.
func ipsetMsg(attrs ...[]byte) []byte {
	return slices.Concat(append([][]byte{{unix.AF_INET, nl.NFNETLINK_V0, 0, 0}}, attrs...)...)
}

// ipsetAddr is an address attribute of an entry as the kernel writes it.
func ipsetAddr(typ uint16, a netip.Addr) []byte {
	inner := uint16(nl.IPSET_ATTR_IPADDR_IPV6)
	if a.Is4() {
		inner = nl.IPSET_ATTR_IPADDR_IPV4
	}
	return nla(typ|unix.NLA_F_NESTED, nla(inner|unix.NLA_F_NET_BYTEORDER, a.AsSlice()))
}

// ipsetData is an entry (IPSET_ATTR_DATA) made of attrs.
func ipsetData(attrs ...[]byte) []byte { return nla(nl.IPSET_ATTR_DATA|unix.NLA_F_NESTED, attrs...) }

func ipsetPort(p uint16) []byte {
	return nla(nl.IPSET_ATTR_PORT|unix.NLA_F_NET_BYTEORDER, binary.BigEndian.AppendUint16(nil, p))
}

func ipsetProto(p uint8) []byte { return nla(nl.IPSET_ATTR_PROTO, []byte{p}) }

// ipsetEntry is the IPSET_ATTR_DATA of entry ip,proto:port,ip2.
func ipsetEntry(ip, ip2 string, proto uint8, port uint16) []byte {
	return ipsetData(ipsetAddr(nl.IPSET_ATTR_IP, netip.MustParseAddr(ip)), ipsetAddr(nl.IPSET_ATTR_IP2, netip.MustParseAddr(ip2)),
		ipsetPort(port), ipsetProto(proto))
}

// ipsetADT is the IPSET_ATTR_ADT of entries.
func ipsetADT(entries ...[]byte) []byte { return nla(nl.IPSET_ATTR_ADT|unix.NLA_F_NESTED, entries...) }

// ipsetHeader is the first message of a dump of set name of family
// holding n entries.
func ipsetHeader(family uint8, n uint32, entries ...[]byte) []byte {
	return ipsetMsg(nla(nl.IPSET_ATTR_PROTOCOL, []byte{nl.IPSET_PROTOCOL}), nla(nl.IPSET_ATTR_SETNAME, []byte("WASP-HAIRPIN\x00")),
		nla(nl.IPSET_ATTR_TYPENAME, []byte(setType+"\x00")), nla(nl.IPSET_ATTR_REVISION, []byte{5}), nla(nl.IPSET_ATTR_FAMILY, []byte{family}),
		nla(nl.IPSET_ATTR_DATA|unix.NLA_F_NESTED,
			nla(nl.IPSET_ATTR_HASHSIZE|unix.NLA_F_NET_BYTEORDER, binary.BigEndian.AppendUint32(nil, 1024)),
			nla(nl.IPSET_ATTR_ELEMENTS|unix.NLA_F_NET_BYTEORDER, binary.BigEndian.AppendUint32(nil, n))),
		ipsetADT(entries...))
}

func TestSetDump(t *testing.T) {
	tcp80 := ipsetEntry("10.244.1.10", "10.244.1.10", backends.ProtoNumberTCP, 80)
	v6 := ipsetEntry("fd00::a", "fd00::a", backends.ProtoNumberSCTP, 3868)
	e := func(a string, p backends.Protocol, port uint16) HairpinEntry {
		return HairpinEntry{Addr: netip.MustParseAddr(a), Protocol: p, Port: port}
	}
	f := func(ip, ip2 string, proto uint8, port uint16) setEntry {
		return setEntry{ip: netip.MustParseAddr(ip), ip2: netip.MustParseAddr(ip2), proto: proto, port: port, hasProto: true, hasPort: true}
	}
	tests := []struct {
		name    string
		msgs    [][]byte
		want    []HairpinEntry
		foreign []setEntry
		err     bool
	}{{
		name: "ipv4 in two messages",
		msgs: [][]byte{
			ipsetHeader(unix.AF_INET, 3, tcp80),
			ipsetMsg(nla(nl.IPSET_ATTR_PROTOCOL, []byte{nl.IPSET_PROTOCOL}), ipsetADT(
				ipsetEntry("10.244.1.10", "10.244.1.10", backends.ProtoNumberUDP, 53),
				ipsetEntry("10.244.2.7", "10.244.2.7", backends.ProtoNumberSCTP, 9))),
		},
		want: []HairpinEntry{e("10.244.1.10", backends.TCP, 80), e("10.244.1.10", backends.UDP, 53), e("10.244.2.7", backends.SCTP, 9)},
	}, {
		name: "ipv6",
		msgs: [][]byte{ipsetHeader(unix.AF_INET6, 1, v6)},
		want: []HairpinEntry{e("fd00::a", backends.SCTP, 3868)},
	}, {
		name: "empty set",
		msgs: [][]byte{ipsetHeader(unix.AF_INET, 0)},
	}, {
		name: "extensions and unknown attributes are skipped",
		msgs: [][]byte{ipsetHeader(unix.AF_INET, 1, ipsetData(
			nla(nl.IPSET_ATTR_TIMEOUT|unix.NLA_F_NET_BYTEORDER, []byte{0, 0, 0, 9}),
			ipsetAddr(nl.IPSET_ATTR_IP, netip.MustParseAddr("10.0.0.1")),
			nla(nl.IPSET_ATTR_COMMENT, []byte("hi\x00")),
			ipsetAddr(nl.IPSET_ATTR_IP2, netip.MustParseAddr("10.0.0.1")),
			ipsetProto(backends.ProtoNumberTCP), ipsetPort(443),
			nla(nl.IPSET_ATTR_PACKETS|unix.NLA_F_NET_BYTEORDER, make([]byte, 8))),
			nla(nl.IPSET_ATTR_LINENO, []byte{0, 0, 0, 0}))},
		want: []HairpinEntry{e("10.0.0.1", backends.TCP, 443)},
	}, {
		name: "the last attribute's padding may be missing",
		msgs: [][]byte{ipsetMsg(ipsetADT(tcp80), nla(nl.IPSET_ATTR_SETNAME, []byte("x"))[:5])},
		want: []HairpinEntry{e("10.244.1.10", backends.TCP, 80)},
	}, {
		name: "foreign entries",
		msgs: [][]byte{ipsetHeader(unix.AF_INET, 4,
			ipsetEntry("10.9.9.9", "10.9.9.8", backends.ProtoNumberUDP, 53),
			ipsetEntry("10.9.9.9", "10.9.9.9", 47, 0),
			tcp80,
			ipsetData(ipsetAddr(nl.IPSET_ATTR_IP, netip.MustParseAddr("10.1.1.1")), ipsetAddr(nl.IPSET_ATTR_IP2, netip.MustParseAddr("10.1.1.1")), ipsetProto(6)))},
		want: []HairpinEntry{e("10.244.1.10", backends.TCP, 80)},
		foreign: []setEntry{f("10.9.9.9", "10.9.9.8", backends.ProtoNumberUDP, 53), f("10.9.9.9", "10.9.9.9", 47, 0),
			{ip: netip.MustParseAddr("10.1.1.1"), ip2: netip.MustParseAddr("10.1.1.1"), proto: 6, hasProto: true}},
	}, {
		name: "short message", msgs: [][]byte{{unix.AF_INET, 0, 0}}, err: true,
	}, {
		name: "attribute header cut", msgs: [][]byte{ipsetMsg(ipsetADT(tcp80), []byte{8, 0, 1})}, err: true,
	}, {
		name: "attribute longer than the message", msgs: [][]byte{ipsetMsg(ipsetADT(tcp80)[:20])}, err: true,
	}, {
		name: "attribute shorter than its header", msgs: [][]byte{ipsetMsg([]byte{2, 0, 1, 0})}, err: true,
	}, {
		name: "nested attribute cut", msgs: [][]byte{ipsetMsg(ipsetADT(ipsetData([]byte{12, 0, 1, 0x80, 8, 0, 1, 0})))}, err: true,
	}, {
		name: "bad family", msgs: [][]byte{ipsetMsg(nla(nl.IPSET_ATTR_FAMILY, []byte{7}))}, err: true,
	}, {
		name: "bad element count", msgs: [][]byte{ipsetMsg(nla(nl.IPSET_ATTR_DATA|unix.NLA_F_NESTED, nla(nl.IPSET_ATTR_ELEMENTS, []byte{1})))}, err: true,
	}, {
		name: "ipv6 address in an ipv4 set", msgs: [][]byte{ipsetHeader(unix.AF_INET, 1, v6)}, err: true,
	}, {
		name: "ipv4 address in an ipv6 set", msgs: [][]byte{ipsetHeader(unix.AF_INET6, 1, tcp80)}, err: true,
	}, {
		name: "ipv4 address of 5 bytes",
		msgs: [][]byte{ipsetMsg(ipsetADT(ipsetData(nla(nl.IPSET_ATTR_IP|unix.NLA_F_NESTED, nla(nl.IPSET_ATTR_IPADDR_IPV4, []byte{1, 2, 3, 4, 5})))))},
		err:  true,
	}, {
		name: "address without a value", msgs: [][]byte{ipsetMsg(ipsetADT(ipsetData(nla(nl.IPSET_ATTR_IP2 | unix.NLA_F_NESTED))))}, err: true,
	}, {
		name: "address with two values",
		msgs: [][]byte{ipsetMsg(ipsetADT(ipsetData(nla(nl.IPSET_ATTR_IP|unix.NLA_F_NESTED,
			nla(nl.IPSET_ATTR_IPADDR_IPV4, []byte{1, 2, 3, 4}), nla(nl.IPSET_ATTR_IPADDR_IPV4, []byte{1, 2, 3, 5})))))},
		err: true,
	}, {
		name: "port of 3 bytes", msgs: [][]byte{ipsetMsg(ipsetADT(ipsetData(nla(nl.IPSET_ATTR_PORT, []byte{0, 80, 0}))))}, err: true,
	}, {
		name: "protocol of 2 bytes", msgs: [][]byte{ipsetMsg(ipsetADT(ipsetData(nla(nl.IPSET_ATTR_PROTO, []byte{6, 0}))))}, err: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d setDump
			var err error
			for _, m := range tt.msgs {
				if err = d.message(m); err != nil {
					break
				}
			}
			if tt.err {
				if !errors.Is(err, errMalformed) {
					t.Fatalf("error %v, want one of a malformed message", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(d.entries, tt.want) || !slices.Equal(d.foreign, tt.foreign) {
				t.Errorf("entries %v, foreign %v; want %v, %v", d.entries, d.foreign, tt.want, tt.foreign)
			}
		})
	}
}

// TestSetEntryEncoding: entries encoded for an add or delete read back
// the same through the listing's parser.
func TestSetEntryEncoding(t *testing.T) {
	hairpin := []HairpinEntry{
		{Addr: netip.MustParseAddr("10.244.1.10"), Protocol: backends.TCP, Port: 80},
		{Addr: netip.MustParseAddr("fd00::a"), Protocol: backends.SCTP, Port: 65535},
	}
	foreign := []setEntry{
		{ip: netip.MustParseAddr("10.9.9.9"), ip2: netip.MustParseAddr("10.9.9.8"), proto: 17, port: 53, hasProto: true, hasPort: true},
		{ip: netip.MustParseAddr("10.9.9.9"), ip2: netip.MustParseAddr("10.9.9.9"), proto: 47, hasProto: true},
		{ip: netip.MustParseAddr("fd00::1")},
	}
	b, adt := beginNested(nil, nl.IPSET_ATTR_ADT)
	for _, e := range hairpin {
		b = appendSetEntry(b, hairpinSetEntry(e))
	}
	for _, e := range foreign {
		b = appendSetEntry(b, e)
	}
	endNested(b, adt)
	var d setDump
	if err := d.message(ipsetMsg(b)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.entries, hairpin) || !slices.Equal(d.foreign, foreign) {
		t.Errorf("read back %v and %v, want %v and %v", d.entries, d.foreign, hairpin, foreign)
	}
}

// FuzzSetDump: no input makes the parser panic or read out of range, and
// what it accepts is whole.
func FuzzSetDump(f *testing.F) {
	f.Add(ipsetHeader(unix.AF_INET, 1, ipsetEntry("10.244.1.10", "10.244.1.10", backends.ProtoNumberTCP, 80)))
	f.Add(ipsetHeader(unix.AF_INET6, 2, ipsetEntry("fd00::a", "fd00::a", backends.ProtoNumberUDP, 53), ipsetEntry("fd00::a", "fd00::b", 6, 1)))
	f.Add(ipsetMsg(ipsetADT(ipsetEntry("10.0.0.1", "10.0.0.2", 47, 0))))
	f.Fuzz(func(t *testing.T, msg []byte) {
		var d setDump
		if err := d.message(msg); err != nil {
			return
		}
		for _, e := range d.entries {
			if !e.Addr.IsValid() || !e.Protocol.Valid() {
				t.Fatalf("accepted entry %v", e)
			}
		}
	})
}

// kernelSet creates the hairpin set of family in a fresh network
// namespace and returns the namespace's sets and the set's name; it skips
// in -short mode, without root, or without ipset in the kernel.
func kernelSet(tb testing.TB, family backends.Family) (netnsSets, string) {
	tb.Helper()
	sets, name := netnsSets{kernelNS(tb, "kernel test", "sets")}, hairpinSet(family)
	if err := sets.ensureSet(context.Background(), name, family); err != nil {
		if setHint(err) != "" {
			tb.Skipf("kernel test: %v", err)
		}
		tb.Fatal(err)
	}
	return sets, name
}

// TestKernelListSet: listing a set of either family that spans many
// netlink messages returns every entry wasp writes and deletes the
// others from the set.
func TestKernelListSet(t *testing.T) {
	ctx := context.Background()
	for _, family := range []backends.Family{backends.IPv4, backends.IPv6} {
		t.Run(family.String(), func(t *testing.T) {
			sets, name := kernelSet(t, family)
			base := netip.MustParseAddr("10.244.0.0")
			if family == backends.IPv6 {
				base = netip.MustParseAddr("fd00:10:244::")
			}
			// 3000 entries take about 130 KiB: several messages.
			var want []HairpinEntry
			a := base
			for i := range 1000 {
				a = a.Next()
				for _, p := range []backends.Protocol{backends.TCP, backends.UDP, backends.SCTP} {
					want = append(want, HairpinEntry{Addr: a, Protocol: p, Port: uint16(1000 + i)})
				}
			}
			if err := sets.addToSet(ctx, name, want); err != nil {
				t.Fatal(err)
			}
			other := base.Next().Next()
			foreign := []setEntry{
				{ip: base, ip2: other, proto: backends.ProtoNumberUDP, port: 53, hasProto: true, hasPort: true},
				{ip: base, ip2: base, proto: 47, hasProto: true, hasPort: true}, // GRE
			}
			if err := sets.change(ctx, nl.IPSET_CMD_ADD, name, len(foreign), func(i int) setEntry { return foreign[i] }); err != nil {
				t.Fatal(err)
			}

			got, err := sets.listSet(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			sortEntries(got)
			sortEntries(want)
			if !slices.Equal(got, want) {
				t.Errorf("listed %d entries, want %d", len(got), len(want))
			}
			var raw *netlink.IPSetResult
			if err := sets.do(func() (err error) { raw, err = netlink.IpsetList(name); return err }); err != nil {
				t.Fatal(err)
			}
			if len(raw.Entries) != len(want) {
				t.Errorf("the set holds %d entries after the listing, want %d (the foreign ones deleted)", len(raw.Entries), len(want))
			}
			if got, err := sets.listSet(ctx, "WASP-NO-SUCH-SET"); !errors.Is(err, unix.ENOENT) {
				t.Errorf("listing a missing set: %v, %v; want ENOENT", got, err)
			}
		})
	}
}

// TestKernelSetChange: adds and deletes go many entries to a message;
// an entry the kernel refuses is named in the error, with the entries
// before it in the set and none after it; deleting entries the set
// lacks is no error.
func TestKernelSetChange(t *testing.T) {
	ctx := context.Background()
	sets, _ := kernelSet(t, backends.IPv4)
	var entries []HairpinEntry
	a := netip.MustParseAddr("10.244.0.0")
	for i := range 3000 {
		a = a.Next()
		entries = append(entries, HairpinEntry{Addr: a, Protocol: backends.UDP, Port: uint16(i)})
	}
	bad := HairpinEntry{Addr: netip.MustParseAddr("fd00::1"), Protocol: backends.TCP, Port: 80}
	entries[1500] = bad // an IPv6 entry in an IPv4 set
	err := sets.addToSet(ctx, SetHairpin4, entries)
	if err == nil || !strings.Contains(err.Error(), bad.String()) {
		t.Fatalf("adding an IPv6 entry to an IPv4 set: %v, want an error naming %s", err, bad)
	}
	got, err := sets.listSet(ctx, SetHairpin4)
	if err != nil {
		t.Fatal(err)
	}
	sortEntries(got)
	if want := slices.Clone(entries[:1500]); !slices.Equal(got, want) {
		t.Errorf("the set holds %d entries after the failed add, want the %d before the refused one", len(got), len(want))
	}
	entries[1500] = HairpinEntry{Addr: netip.MustParseAddr("10.244.255.1"), Protocol: backends.TCP, Port: 80}
	if err := sets.delFromSet(ctx, SetHairpin4, entries); err != nil {
		t.Fatal(err)
	}
	if got, err := sets.listSet(ctx, SetHairpin4); err != nil || len(got) != 0 {
		t.Errorf("the set after deleting every entry: %d entries, %v; want none", len(got), err)
	}
}

// BenchmarkKernelListSet lists a hairpin set of benchServices ×
// benchEndpoints entries, as a restarted Backend's first Sync does
// (root only; skipped otherwise and in -short mode):
//
//	go test -run '^$' -bench KernelListSet -benchtime 5x ./backends/iptables/
func BenchmarkKernelListSet(b *testing.B) {
	ctx := context.Background()
	sets, _ := kernelSet(b, backends.IPv4)
	want := make([]HairpinEntry, 0, benchServices*benchEndpoints)
	a := netip.MustParseAddr("10.244.0.0")
	for i := range benchServices * benchEndpoints {
		if i%benchEndpoints == 0 {
			a = a.Next()
		}
		want = append(want, HairpinEntry{Addr: a, Protocol: backends.TCP, Port: uint16(1000 + i%benchEndpoints)})
	}
	if err := sets.addToSet(ctx, SetHairpin4, want); err != nil {
		b.Fatal(err)
	}
	var m backendtest.HeapMeter
	for b.Loop() {
		m.Start()
		got, err := sets.listSet(ctx, SetHairpin4)
		if err != nil {
			b.Fatal(err)
		}
		m.Stop()
		if len(got) != len(want) {
			b.Fatalf("listed %d entries, want %d", len(got), len(want))
		}
	}
	m.Report(b)
}
