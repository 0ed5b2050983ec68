//go:build linux

package framework

import (
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/wasp-proxy/wasp/internal/netlab"
)

// program writes a small wasp table into ns: a chain whose rule looks up
// an anonymous set, and a named map with the given elements.
func program(t *testing.T, ns *netlab.NS, ports ...byte) {
	t.Helper()
	c, done, err := NFTables(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	tb := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: WaspTable})
	ch := c.AddChain(&nftables.Chain{Name: "services", Table: tb})
	anon := &nftables.Set{Table: tb, Anonymous: true, Constant: true, KeyType: nftables.TypeInetService}
	if err := c.AddSet(anon, []nftables.SetElement{{Key: []byte{0, 80}}, {Key: []byte{1, 187}}}); err != nil {
		t.Fatal(err)
	}
	c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: 1, SetName: anon.Name, SetID: anon.ID},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}})
	m := &nftables.Set{Table: tb, Name: "service-ports", IsMap: true, KeyType: nftables.TypeInetService, DataType: nftables.TypeInetService}
	var elems []nftables.SetElement
	for _, p := range ports {
		elems = append(elems, nftables.SetElement{Key: []byte{0, p}, Val: []byte{0x1f, 0x90}})
	}
	if err := c.AddSet(m, elems); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("program the test table: %v", err)
	}
}

// TestReadRuleset checks that two programs of the same table read the
// same, whatever names the kernel gave their anonymous sets, and that one
// element more or less shows in the counts and the diff.
func TestReadRuleset(t *testing.T) {
	if err := netlab.Probe(); err != nil {
		t.Skip(err)
	}
	lab := netlab.NewForTest(t)
	var nss []*netlab.NS
	for _, name := range []string{"one", "two", "three"} {
		ns, err := lab.AddNS(name)
		if err != nil {
			t.Fatal(err)
		}
		nss = append(nss, ns)
	}
	// A table programmed before shifts the anonymous set IDs of "two".
	program(t, nss[1], 9)
	if err := nss[1].Do(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		c.FlushRuleset()
		return c.Flush()
	}); err != nil {
		t.Fatal(err)
	}
	program(t, nss[0], 1, 2, 3)
	program(t, nss[1], 1, 2, 3)
	program(t, nss[2], 1, 2)

	var rs []*Ruleset
	for _, ns := range nss {
		r, err := ReadRuleset(ns)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	if got, want := rs[0].Counts(), "tables 1, chains 1, rules 1, sets 0, maps 1, anonymous sets 1, elements 3"; got != want {
		t.Errorf("counts %q, want %q; listing:\n%s", got, want, strings.Join(rs[0].Lines, "\n"))
	}
	if d := rs[0].Diff(rs[1], 0); d != "" {
		t.Errorf("the same table programmed twice reads differently:\n%s", d)
	}
	d := rs[0].Diff(rs[2], 0)
	if !strings.Contains(d, "only in the first: 1 lines") || !strings.Contains(d, "element service-ports key=0003 : 1f90") {
		t.Errorf("one element less: diff %q, want the element of port 3 only in the first", d)
	}
	empty, err := ReadRuleset(mustNS(t, lab, "empty"))
	if err != nil {
		t.Fatal(err)
	}
	if empty.Tables != 0 || len(empty.Lines) != 0 {
		t.Errorf("a namespace without a wasp table reads %s, %q", empty.Counts(), empty.Lines)
	}
}

func mustNS(t *testing.T, lab *netlab.Lab, name string) *netlab.NS {
	t.Helper()
	ns, err := lab.AddNS(name)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}
