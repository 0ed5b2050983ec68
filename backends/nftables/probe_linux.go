//go:build linux

package nftables

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	nft "github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/wasp-proxy/wasp/backends"
)

// probeTable is the scratch table the nftables probes create and delete.
// Every probe transaction starts by adding, deleting and adding it again,
// so a table left by a probe that was killed halfway is replaced.
const probeTable = "wasp-nodesetup-probe"

// Probes runs the nftables mode's kernel probes (the nftables-* ones) in
// the network namespace at netns ("" for the current one), in order; each
// but the first is asked only when nf_tables itself is Supported. It
// changes nothing that outlives it. Using NAT chains, ct expressions and
// numgen makes the kernel load the modules behind them, nf_conntrack
// among them, so the node setup runs these before its conntrack probes.
func Probes(ctx context.Context, netns string) []backends.ProbeResult {
	return backends.RunProbes(ctx, probes(netns))
}

// probes returns the nftables mode's probes, asked in the network
// namespace at netns.
func probes(netns string) []backends.Probe {
	k := nftProber{netns: netns}
	return []backends.Probe{
		{Name: nftProbeTables, Checks: "nf_tables: add and delete a table in one transaction",
			Run: k.outcome(k.table)},
		{Name: nftProbeNAT, After: nftProbeTables, Checks: "a nat chain with ct state and masquerade (nft_chain_nat, nft_ct, nft_masq)",
			Run: k.outcome(k.nat)},
		{Name: nftProbeNumgen, After: nftProbeTables, Checks: "numgen random mod N (nft_numgen)",
			Run: k.outcome(k.numgen)},
		{Name: nftProbeConcatMaps, After: nftProbeTables, Checks: "a verdict map keyed by ip daddr . meta l4proto . th dport",
			Run: k.outcome(k.concatMap)},
		{Name: nftProbeStaleChains, After: nftProbeTables, Checks: "delete a map element and the chain it jumps to in one transaction (kernel 6.2 or later)",
			Run: k.staleChains},
	}
}

// nftProber runs nftables probe transactions in a network namespace.
type nftProber struct {
	netns string
}

// scratchTable describes the scratch table.
func scratchTable() *nft.Table { return &nft.Table{Name: probeTable, Family: nft.TableFamilyIPv4} }

// send sends what build queues as one transaction.
func (k nftProber) send(build func(c *nft.Conn) error) error {
	var opts []nft.ConnOption
	if k.netns != "" {
		f, err := os.Open(k.netns)
		if err != nil {
			return fmt.Errorf("open network namespace: %w", err)
		}
		defer f.Close()
		opts = append(opts, nft.WithNetNSFd(int(f.Fd())))
	}
	c, err := nft.New(opts...)
	if err != nil {
		return err
	}
	if err := build(c); err != nil {
		return err
	}
	return c.Flush()
}

// tx sends one transaction: the scratch table replaced, what build
// queues (if not nil), and the table deleted again unless keep.
func (k nftProber) tx(keep bool, build func(c *nft.Conn, t *nft.Table) error) error {
	return k.send(func(c *nft.Conn) error {
		t := c.AddTable(scratchTable())
		c.DelTable(t)
		t = c.AddTable(scratchTable())
		if build != nil {
			if err := build(c, t); err != nil {
				return err
			}
		}
		if !keep {
			c.DelTable(t)
		}
		return nil
	})
}

// outcome adapts a one-transaction probe.
func (k nftProber) outcome(build func(c *nft.Conn, t *nft.Table) error) func(context.Context) (backends.ProbeOutcome, string) {
	return func(context.Context) (backends.ProbeOutcome, string) {
		return backends.ProbeOutcomeOf(k.tx(false, build))
	}
}

// table is the scratch table alone.
func (nftProber) table(*nft.Conn, *nft.Table) error { return nil }

// ctStateNew is "ct state new": the state into reg 1, masked, compared.
func ctStateNew() []expr.Any {
	ne := binaryutil.NativeEndian.PutUint32
	return []expr.Any{
		&expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne(expr.CtStateBitNEW), Xor: ne(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: ne(0)},
	}
}

// nat: a srcnat base chain with "ct state new masquerade".
func (nftProber) nat(c *nft.Conn, t *nft.Table) error {
	hook, prio, policy := *nft.ChainHookPostrouting, *nft.ChainPriorityNATSource, nft.ChainPolicyAccept
	ch := c.AddChain(&nft.Chain{Name: "nat-postrouting", Table: t, Type: nft.ChainTypeNAT,
		Hooknum: &hook, Priority: &prio, Policy: &policy})
	c.AddRule(&nft.Rule{Table: t, Chain: ch, Exprs: append(ctStateNew(), &expr.Masq{FullyRandom: true})})
	return nil
}

// numgen: "numgen random mod 2 0 accept".
func (nftProber) numgen(c *nft.Conn, t *nft.Table) error {
	ch := c.AddChain(&nft.Chain{Name: "numgen", Table: t})
	c.AddRule(&nft.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Numgen{Register: reg1, Modulus: 2, Type: unix.NFT_NG_RANDOM},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}})
	return nil
}

// concatMap: a verdict map keyed by address . protocol . port, with an
// element, looked up by a rule, as wasp's service dispatch.
func (nftProber) concatMap(c *nft.Conn, t *nft.Table) error {
	target := c.AddChain(&nft.Chain{Name: "target", Table: t})
	dispatch := c.AddChain(&nft.Chain{Name: "dispatch", Table: t})
	m := &nft.Set{Table: t, Name: "service-ips", ID: 1, IsMap: true, Concatenation: true,
		KeyType:  nft.MustConcatSetType(nft.TypeIPAddr, nft.TypeInetProto, nft.TypeInetService),
		DataType: nft.TypeVerdict}
	// Each field is padded to a 4-byte register.
	key := []byte{192, 0, 2, 1, unix.IPPROTO_TCP, 0, 0, 0, 0, 80, 0, 0}
	if err := c.AddSet(m, []nft.SetElement{{Key: key,
		VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: target.Name}}}); err != nil {
		return err
	}
	c.AddRule(&nft.Rule{Table: t, Chain: dispatch, Exprs: []expr.Any{
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: unix.NFT_REG32_01},
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: unix.NFT_REG32_02, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: reg1, IsDestRegSet: true, DestRegister: 0, SetName: m.Name, SetID: m.ID},
	}})
	return nil
}

// staleChains asks whether a transaction can delete a chain together with
// the last verdict-map element that jumps to it. Kernels before 6.2
// release the element's reference only after the transaction and refuse
// (EBUSY); wasp deletes stale chains that way.
func (k nftProber) staleChains(context.Context) (backends.ProbeOutcome, string) {
	err := k.deleteReferencedChain(true)
	if errors.Is(err, unix.EBUSY) {
		return backends.ProbeNotSupported, "the kernel keeps a deleted map element's reference to its chain until the transaction ends (kernels before 6.2): " + err.Error()
	}
	return backends.ProbeOutcomeOf(err)
}

// deleteReferencedChain builds a chain that a verdict-map element jumps
// to, then deletes the chain in a second transaction, with the element
// if withElement. It returns the second transaction's error (or the
// first's), and leaves no table behind.
func (k nftProber) deleteReferencedChain(withElement bool) error {
	var (
		m   = &nft.Set{Name: "dispatch-map", ID: 1, IsMap: true, KeyType: nft.TypeIPAddr, DataType: nft.TypeVerdict}
		key = net.IPv4(192, 0, 2, 1).To4()
	)
	defer k.dropTable()
	err := k.tx(true, func(c *nft.Conn, t *nft.Table) error {
		target := c.AddChain(&nft.Chain{Name: "target", Table: t})
		dispatch := c.AddChain(&nft.Chain{Name: "dispatch", Table: t})
		m.Table = t
		if err := c.AddSet(m, []nft.SetElement{{Key: key,
			VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: target.Name}}}); err != nil {
			return err
		}
		c.AddRule(&nft.Rule{Table: t, Chain: dispatch, Exprs: []expr.Any{
			&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Lookup{SourceRegister: reg1, IsDestRegSet: true, DestRegister: 0, SetName: m.Name, SetID: m.ID},
		}})
		return nil
	})
	if err != nil {
		return err
	}
	return k.send(func(c *nft.Conn) error {
		if withElement {
			m.ID = 0
			if err := c.SetDeleteElements(m, []nft.SetElement{{Key: key}}); err != nil {
				return err
			}
		}
		c.DelChain(&nft.Chain{Name: "target", Table: scratchTable()})
		return nil
	})
}

// dropTable deletes the scratch table, if it is there.
func (k nftProber) dropTable() {
	_ = k.tx(false, nil)
}
