//go:build linux

package nftables

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	nft "github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/wasp-proxy/wasp/backends"
)

// netlinkKernel programs nftables over netlink with google/nftables,
// in the current network namespace or in the one ns refers to.
type netlinkKernel struct {
	ns *os.File // nil: the current namespace
}

var _ kernel = (*netlinkKernel)(nil)

func newNetlinkKernel(netns string) (kernel, error) {
	k := &netlinkKernel{}
	if netns != "" {
		f, err := os.Open(netns)
		if err != nil {
			return nil, fmt.Errorf("open network namespace: %w", err)
		}
		k.ns = f
	}
	return k, nil
}

func (k *netlinkKernel) close() error {
	if k.ns == nil {
		return nil
	}
	return k.ns.Close()
}

// conn returns a google/nftables connection, for listing, whose socket
// buffers fit about messages replies.
func (k *netlinkKernel) conn(messages int) (*nft.Conn, error) {
	const perMessage = 1024 // bytes of buffer per message
	opts := []nft.ConnOption{nft.WithSockOptions(func(c *netlink.Conn) error {
		return setBuffers(c, messages*perMessage)
	})}
	if k.ns != nil {
		opts = append(opts, nft.WithNetNSFd(int(k.ns.Fd())))
	}
	return nft.New(opts...)
}

func tableFamily(f backends.Family) nft.TableFamily {
	if f == backends.IPv6 {
		return nft.TableFamilyIPv6
	}
	return nft.TableFamilyIPv4
}

func (k *netlinkKernel) load(ctx context.Context, family backends.Family, table string) (*inventory, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := k.conn(0)
	if err != nil {
		return nil, err
	}
	_, err = c.ListTableOfFamily(table, tableFamily(family))
	if errors.Is(err, unix.ENOENT) {
		return &inventory{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list table: %w", err)
	}
	inv := &inventory{exists: true, chains: map[string]*BaseChain{}, notAccept: map[string]bool{}, sets: map[string]*Set{}}
	chains, err := c.ListChainsOfTableFamily(tableFamily(family))
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != table {
			continue
		}
		var base *BaseChain
		if ch.Hooknum != nil && ch.Priority != nil {
			base = &BaseChain{Hook: hookOf(*ch.Hooknum), Priority: int32(*ch.Priority)}
			switch ch.Type {
			case nft.ChainTypeFilter:
				base.Type = ChainFilter
			case nft.ChainTypeNAT:
				base.Type = ChainNAT
			}
			if ch.Policy != nil && *ch.Policy != nft.ChainPolicyAccept {
				inv.notAccept[ch.Name] = true
			}
		}
		inv.chains[ch.Name] = base
	}
	if inv.sets, err = k.sets(ctx, family, table); err != nil {
		return nil, fmt.Errorf("list sets: %w", err)
	}
	return inv, nil
}

var hooks = map[Hook]nft.ChainHook{
	HookPrerouting:  *nft.ChainHookPrerouting,
	HookInput:       *nft.ChainHookInput,
	HookForward:     *nft.ChainHookForward,
	HookOutput:      *nft.ChainHookOutput,
	HookPostrouting: *nft.ChainHookPostrouting,
}

func hookOf(h nft.ChainHook) Hook {
	for k, v := range hooks {
		if v == h {
			return k
		}
	}
	return 0
}

func (k *netlinkKernel) apply(ctx context.Context, tx *Transaction) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	parts := tx.parts()
	batches := make([]*wireBatch, len(parts))
	for i, part := range parts {
		w, err := k.compile(part)
		if err != nil {
			return err
		}
		batches[i] = w
	}
	return k.send(batches)
}

// compile returns tx's operations as one batch of netlink messages.
func (k *netlinkKernel) compile(tx *Transaction) (*wireBatch, error) {
	// google/nftables marshals the messages; they go to a capturing
	// connection, which appends them to w in their wire format at every
	// Conn.Flush, and send sends w as one batch. Flushing every few
	// operations keeps one copy of the transaction in memory, the wire
	// bytes, rather than google/nftables' messages, their batch and the
	// buffer netlink.Conn.SendMessages marshals them into (three copies,
	// about 250 MiB at 10k services).
	w := &wireBatch{}
	acks := []netlink.Message{{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 4+16)}}
	c, err := nft.New(nft.WithTestDial(func(req []netlink.Message) ([]netlink.Message, error) {
		if req == nil {
			return acks, nil // Flush waits for an acknowledgement per message
		}
		for i := range req {
			w.add(&req[i])
		}
		return nil, nil
	}))
	if err != nil {
		return nil, err
	}
	cp := &compiler{
		c:      c,
		family: tx.Family,
		table:  &nft.Table{Name: tx.Table, Family: tableFamily(tx.Family)},
		added:  map[string]*nft.Set{},
		w:      w,
	}
	// opsPerFlush bounds the operations google/nftables holds as messages.
	const opsPerFlush = 256
	for i := range tx.ops {
		if err := cp.op(&tx.ops[i]); err != nil {
			return nil, fmt.Errorf("operation %d: %w", i, err)
		}
		if i%opsPerFlush == opsPerFlush-1 {
			if err := c.Flush(); err != nil {
				return nil, fmt.Errorf("marshal: %w", err)
			}
		}
	}
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("marshal: %w", err)
	}
	return w, nil
}

// wireBatch is a batch of netlink messages in their wire format, in
// chunks sent together by one sendmsg: the kernel applies a batch (begin,
// messages, end) only when all of it arrives in one datagram.
type wireBatch struct {
	chunks [][]byte
	size   int    // bytes in chunks
	msgs   int    // messages, without begin and end
	seq    uint32 // sequence number of the last message
	last   []byte // header of the last message, in its chunk
}

const (
	nlmsgHeaderLen = 16
	// batchChunk is the size of a chunk; chunks grow past it so that a
	// batch of up to 1 GiB (the socket buffer's limit, setBuffers) stays
	// within the kernel's 1024 iovecs of a sendmsg.
	batchChunk = 1 << 20
)

// add appends m, but for the batch begin and end messages google/nftables
// wraps every Flush in: w gets its own at send. As nft, only the last
// message asks for an acknowledgement (finish sets it), and none for an
// echo.
func (w *wireBatch) add(m *netlink.Message) {
	switch m.Header.Type {
	case netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN), netlink.HeaderType(unix.NFNL_MSG_BATCH_END):
		return
	}
	w.append(m.Header.Type, m.Header.Flags&^(netlink.Acknowledge|netlink.Echo), m.Data)
	w.msgs++
}

func (w *wireBatch) append(typ netlink.HeaderType, flags netlink.HeaderFlags, data []byte) {
	n := (nlmsgHeaderLen + len(data) + 3) &^ 3
	if len(w.chunks) == 0 || cap(w.chunks[len(w.chunks)-1])-len(w.chunks[len(w.chunks)-1]) < n {
		size := batchChunk << (len(w.chunks) / 256)
		w.chunks = append(w.chunks, make([]byte, 0, max(size, n)))
	}
	c := &w.chunks[len(w.chunks)-1]
	off := len(*c)
	w.seq++
	b := binary.NativeEndian.AppendUint32(*c, uint32(n))
	b = binary.NativeEndian.AppendUint16(b, uint16(typ))
	b = binary.NativeEndian.AppendUint16(b, uint16(flags))
	b = binary.NativeEndian.AppendUint32(b, w.seq)
	b = binary.NativeEndian.AppendUint32(b, 0) // port ID: the kernel
	b = append(b, data...)
	for len(b)-off < n {
		b = append(b, 0)
	}
	*c = b
	w.last = b[off : off+nlmsgHeaderLen]
	w.size += n
}

// finish asks for the acknowledgement of the last message, wraps the
// messages in a batch and returns the sequence number of the last one.
func (w *wireBatch) finish() uint32 {
	flags := binary.NativeEndian.Uint16(w.last[6:])
	binary.NativeEndian.PutUint16(w.last[6:], flags|uint16(netlink.Acknowledge))
	last := w.seq
	// The begin message goes in front, in a chunk of its own.
	hdr := extraHeader(unix.NFNL_SUBSYS_NFTABLES)
	chunks := w.chunks
	w.chunks = nil
	w.append(netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN), netlink.Request, hdr)
	w.chunks = append(w.chunks, chunks...)
	w.append(netlink.HeaderType(unix.NFNL_MSG_BATCH_END), netlink.Request, hdr)
	return last
}

// extraHeader is the nfgenmsg after the netlink header: family
// NFPROTO_UNSPEC, version 0, the resource ID in network byte order.
func extraHeader(resID uint16) []byte {
	return []byte{unix.NFPROTO_UNSPEC, unix.NFNETLINK_V0, byte(resID >> 8), byte(resID)}
}

// send sends each batch (begin, messages, end) in one sendmsg, in order
// on one socket, and waits for its outcome before the next. google/nftables asks for an acknowledgement of every
// message and for an echo of every rule: at 10k services that is 300k
// replies to receive, and rule echoes the kernel has to build, which
// took most of a full sync. Like nft, send asks for the acknowledgement
// of the last message only. The kernel processes a batch within the
// sendmsg and reports every failed message; any error means the batch
// was aborted as a whole, and the batches after it are not sent.
func (k *netlinkKernel) send(batches []*wireBatch) error {
	size := 0
	for _, w := range batches {
		size = max(size, w.size)
	}
	cfg := &netlink.Config{}
	if k.ns != nil {
		cfg.NetNS = int(k.ns.Fd())
	}
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := setBuffers(conn, size+1<<20); err != nil {
		return err
	}
	for i, w := range batches {
		if err := sendBatch(conn, w); err != nil {
			if len(batches) > 1 {
				return fmt.Errorf("commit %d of %d: %w", i+1, len(batches), err)
			}
			return err
		}
	}
	return nil
}

// sendBatch sends w on conn and waits for its acknowledgement.
func sendBatch(conn *netlink.Conn, w *wireBatch) error {
	if w.msgs == 0 {
		return nil
	}
	last := w.finish()
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Write(func(fd uintptr) bool {
		_, serr = unix.SendmsgBuffers(int(fd), w.chunks, nil, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}, 0)
		return serr != unix.EAGAIN
	})
	if err = errors.Join(err, serr); err != nil {
		return fmt.Errorf("send batch of %d messages: %w", w.msgs+2, err)
	}
	w.chunks = nil
	if err := conn.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		return err
	}
	for {
		msgs, err := conn.Receive()
		if err != nil {
			return err // a failed message: the kernel aborted the batch
		}
		for _, m := range msgs {
			if m.Header.Type == netlink.Error && m.Header.Sequence == last {
				return nil
			}
		}
	}
}

// setBuffers sizes both socket buffers of conn to size bytes, forcing
// past rmem_max and wmem_max (CAP_NET_ADMIN allows it) as nft does.
func setBuffers(conn *netlink.Conn, size int) error {
	size = min(max(size, 1<<20), 1<<30)
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		for _, o := range []struct{ force, plain int }{{unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}, {unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o.force, size) != nil {
				if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o.plain, size); e != nil && serr == nil {
					serr = e
				}
			}
		}
	})
	return errors.Join(err, serr)
}

// elementsPerMessage bounds the elements of one netlink message: their
// list is one attribute, whose length is 16 bits. An element of an IPv6
// verdict map with the longest chain name takes about 300 bytes.
const elementsPerMessage = 200

// compiler turns operations into google/nftables calls, queued on c.
type compiler struct {
	c      *nft.Conn
	family backends.Family
	table  *nft.Table
	nextID uint32              // set IDs of this batch
	added  map[string]*nft.Set // named sets added in this batch
	w      *wireBatch          // where c's messages go, and the elements'
	attrs  attrs               // the elements' message being built
}

func (cp *compiler) id() uint32 {
	cp.nextID++
	return cp.nextID
}

func (cp *compiler) chain(name string) *nft.Chain {
	return &nft.Chain{Name: name, Table: cp.table}
}

func (cp *compiler) op(o *op) error {
	c := cp.c
	switch o.kind {
	case opAddTable:
		c.AddTable(cp.table)
	case opDeleteTable:
		c.DelTable(cp.table)
	case opAddChain:
		ch := cp.chain(o.chain.Name)
		if b := o.chain.Base; b != nil {
			hook, prio := hooks[b.Hook], nft.ChainPriority(b.Priority)
			policy := nft.ChainPolicyAccept
			ch.Hooknum, ch.Priority, ch.Policy = &hook, &prio, &policy
			ch.Type = nft.ChainTypeFilter
			if b.Type == ChainNAT {
				ch.Type = nft.ChainTypeNAT
			}
		}
		c.AddChain(ch)
	case opFlushChain:
		c.FlushChain(cp.chain(o.name))
	case opDeleteChain:
		c.DelChain(cp.chain(o.name))
	case opAddRule:
		exprs, err := cp.rule(o.rule)
		if err != nil {
			return fmt.Errorf("rule %q: %w", o.rule, err)
		}
		r := &nft.Rule{Table: cp.table, Chain: cp.chain(o.name), Exprs: exprs}
		if o.rule.Comment != "" {
			r.UserData = userdata.AppendString(nil, userdata.TypeComment, o.rule.Comment)
		}
		r.UserData = appendRuleTag(r.UserData, ruleTag(o.rule))
		c.AddRule(r)
	case opAddSet:
		s := cp.namedSet(o.set)
		s.ID = cp.id()
		if err := c.AddSet(s, nil); err != nil {
			return fmt.Errorf("set %q: %w", o.set.Name, err)
		}
		cp.added[o.set.Name] = s
	case opDeleteSet:
		c.DelSet(&nft.Set{Table: cp.table, Name: o.name})
		delete(cp.added, o.name)
	case opAddElements, opDeleteElements:
		// Written to the batch directly (see elementMessage), after
		// what google/nftables holds.
		if err := c.Flush(); err != nil {
			return fmt.Errorf("marshal: %w", err)
		}
		var id uint32
		if s, ok := cp.added[o.set.Name]; ok {
			id = s.ID
		}
		for elems := o.elems; len(elems) > 0; {
			n := min(len(elems), elementsPerMessage)
			cp.elementMessage(o.set, id, elems[:n], o.kind == opDeleteElements)
			elems = elems[n:]
		}
	default:
		return fmt.Errorf("unknown operation %d", o.kind)
	}
	return nil
}

var datatypes = map[KeyType]nft.SetDatatype{
	KeyIPv4Addr:    nft.TypeIPAddr,
	KeyIPv6Addr:    nft.TypeIP6Addr,
	KeyInetProto:   nft.TypeInetProto,
	KeyInetService: nft.TypeInetService,
	KeyBucket:      nft.TypeMark,
}

// namedSet describes s for google/nftables, without an ID.
func (cp *compiler) namedSet(s *Set) *nft.Set {
	out := &nft.Set{Table: cp.table, Name: s.Name, Comment: s.Comment, Dynamic: s.Dynamic}
	out.KeyType = setDatatype(s.Key)
	out.Concatenation = len(s.Key) > 1
	switch {
	case s.Map:
		out.IsMap, out.DataType = true, nft.TypeVerdict
	case len(s.Data) > 0:
		out.IsMap, out.DataType = true, setDatatype(s.Data)
	}
	if s.Timeout > 0 {
		out.HasTimeout, out.Timeout = true, time.Duration(s.Timeout)*time.Second
	}
	return out
}

func setDatatype(kt []KeyType) nft.SetDatatype {
	if len(kt) == 1 {
		return datatypes[kt[0]]
	}
	ts := make([]nft.SetDatatype, len(kt))
	for i, k := range kt {
		ts[i] = datatypes[k]
	}
	return nft.MustConcatSetType(ts...)
}

// appendKey appends the encoding of an element key (or a data map's
// value) to b: each field in network byte order, padded to the 4-byte
// registers a concatenation uses.
func appendKey(b []byte, kt []KeyType, k ElemKey) []byte {
	addrs := 0
	for _, t := range kt {
		switch t {
		case KeyIPv4Addr, KeyIPv6Addr:
			if addrs++; addrs == 2 {
				b = appendAddr(b, k.Addr2)
				break
			}
			b = appendAddr(b, k.Addr)
		case KeyInetProto:
			b = append(b, k.Proto)
		case KeyInetService:
			b = binary.BigEndian.AppendUint16(b, k.Port)
		case KeyBucket:
			b = binary.NativeEndian.AppendUint32(b, k.Bucket)
		}
		if len(kt) > 1 {
			for len(b)%4 != 0 {
				b = append(b, 0)
			}
		}
	}
	return b
}

// appendAddr appends a's 4 or 16 bytes (none when a is not valid, as
// AsSlice), without the allocation of AsSlice.
func appendAddr(b []byte, a netip.Addr) []byte {
	switch {
	case a.Is4():
		a4 := a.As4()
		return append(b, a4[:]...)
	case a.IsValid():
		a16 := a.As16()
		return append(b, a16[:]...)
	}
	return b
}

func verdict(v Verdict) *expr.Verdict {
	return &expr.Verdict{Kind: verdictKind(v.Kind), Chain: v.Chain}
}

// verdictKind is the kernel's code of a verdict kind (NFTA_VERDICT_CODE).
func verdictKind(k VerdictKind) expr.VerdictKind {
	switch k {
	case Accept:
		return expr.VerdictAccept
	case Jump:
		return expr.VerdictJump
	case Goto:
		return expr.VerdictGoto
	case Return:
		return expr.VerdictReturn
	}
	return expr.VerdictDrop
}

// Registers: reg 1 is the first 16-byte register; the 4-byte registers
// NFT_REG32_00.. (8..) overlap reg 1 onwards, and a concatenation puts its
// fields in consecutive 4-byte registers from reg 1.
const reg1 = 1

func regAt(words int) uint32 {
	if words == 0 {
		return reg1
	}
	return unix.NFT_REG32_00 + uint32(words)
}

// addrPayload loads the source or destination address into reg.
func (cp *compiler) addrPayload(f AddrField, reg uint32) *expr.Payload {
	p := &expr.Payload{OperationType: expr.PayloadLoad, DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Len: 4}
	switch {
	case cp.family == backends.IPv6 && f == SAddr:
		p.Offset, p.Len = 8, 16
	case cp.family == backends.IPv6:
		p.Offset, p.Len = 24, 16
	case f == SAddr:
		p.Offset = 12
	default:
		p.Offset = 16
	}
	return p
}

func ne32(v uint32) []byte { return binaryutil.NativeEndian.PutUint32(v) }
func be32(v uint32) []byte { return binaryutil.BigEndian.PutUint32(v) }

func (cp *compiler) rule(r *Rule) ([]expr.Any, error) {
	var out []expr.Any
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case CtStateNew:
			out = append(out,
				&expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(expr.CtStateBitNEW), Xor: ne32(0)},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: ne32(0)})
		case Verdict:
			out = append(out, verdict(e))
		case AddrMatch:
			out = append(out, cp.addrPayload(e.Field, reg1))
			if len(e.Prefixes) == 1 {
				p := e.Prefixes[0].Masked()
				if !p.IsSingleIP() {
					out = append(out, &expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: uint32(p.Addr().BitLen() / 8),
						Mask: prefixMask(p), Xor: make([]byte, p.Addr().BitLen()/8)})
				}
				op := expr.CmpOpEq
				if e.Neg {
					op = expr.CmpOpNeq
				}
				out = append(out, &expr.Cmp{Op: op, Register: reg1, Data: p.Addr().AsSlice()})
				break
			}
			s, err := cp.anonAddrSet(e.Prefixes)
			if err != nil {
				return nil, err
			}
			out = append(out, &expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID, Invert: e.Neg})
		case SetMatch:
			out = append(out, cp.addrPayload(e.Field, reg1), cp.lookup(e.Set, false))
		case L4Proto:
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{e.Proto}})
		case DPort:
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{e.Proto}},
				&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.BigEndian.PutUint16(e.Port)})
		case FibLocal:
			out = append(out,
				&expr.Fib{Register: reg1, FlagSADDR: e.Field == SAddr, FlagDADDR: e.Field == DAddr, ResultADDRTYPE: true},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ne32(unix.RTN_LOCAL)})
		case VMap:
			out = append(out, cp.keyLoads(e.Key, e.Mod)...)
			out = append(out, cp.lookup(e.Map, true))
		case KeySetMatch:
			out = append(out, cp.keyLoads(e.Key, 0)...)
			out = append(out, cp.lookup(e.Set, false))
		case DNATMap:
			// The map's value, "addr . port", lands in reg 1 onwards: the
			// address in the first 4-byte registers, the port after it.
			out = append(out, cp.keyLoads(e.Key, e.Mod)...)
			l := cp.lookup(e.Map, false)
			l.IsDestRegSet, l.DestRegister = true, reg1
			fam, words := uint32(unix.NFPROTO_IPV4), 1
			if cp.family == backends.IPv6 {
				fam, words = unix.NFPROTO_IPV6, 4
			}
			out = append(out, l,
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: fam, RegAddrMin: reg1, RegProtoMin: regAt(words), Specified: true})
		case AddrPairMatch:
			s := cp.addrPayload(SAddr, reg1)
			out = append(out, s, cp.addrPayload(DAddr, regAt(int(s.Len)/4)), cp.lookup(e.Set, false))
		case CtStatusDNAT:
			out = append(out,
				&expr.Ct{Register: reg1, Key: expr.CtKeySTATUS},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(ipsDstNAT), Xor: ne32(0)},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: ne32(0)})
		case Numgen:
			s, err := cp.anonNumgenMap(e)
			if err != nil {
				return nil, err
			}
			out = append(out, &expr.Numgen{Register: reg1, Modulus: e.Mod, Type: unix.NFT_NG_RANDOM})
			if e.intervals() {
				// Interval keys compare as big-endian bytes.
				out = append(out, &expr.Byteorder{SourceRegister: reg1, DestRegister: reg1, Op: expr.ByteorderHton, Len: 4, Size: 4})
			}
			out = append(out, &expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: s.Name, SetID: s.ID})
		case Reject:
			code := uint8(3) // ICMP_PORT_UNREACH
			if cp.family == backends.IPv6 {
				code = 4 // ICMPV6_PORT_UNREACH
			}
			out = append(out, &expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: code})
		case MarkOr:
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(^e.Bits), Xor: ne32(e.Bits)},
				&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1})
		case MarkXor:
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(0xffffffff), Xor: ne32(e.Bits)},
				&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1})
		case MarkClear:
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ne32(e.Bits), Xor: ne32(0)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ne32(0)})
		case Masquerade:
			out = append(out, &expr.Masq{FullyRandom: e.FullyRandom})
		case DNAT:
			fam := uint32(unix.NFPROTO_IPV4)
			if cp.family == backends.IPv6 {
				fam = unix.NFPROTO_IPV6
			}
			out = append(out,
				&expr.Immediate{Register: reg1, Data: e.To.Addr().AsSlice()},
				&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(e.To.Port())},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: fam, RegAddrMin: reg1, RegProtoMin: 2, Specified: true})
		case SetUpdate:
			s := cp.added[e.Set]
			ds := &expr.Dynset{SrcRegKey: reg1, SetName: e.Set, Operation: unix.NFT_DYNSET_OP_UPDATE}
			if s != nil {
				ds.SetID = s.ID
			}
			out = append(out, cp.addrPayload(SAddr, reg1), ds)
		default:
			return nil, fmt.Errorf("expression %T not supported", e)
		}
	}
	return out, nil
}

// ipsDstNAT is the conntrack status bit of a connection whose destination
// was NATed (IPS_DST_NAT).
const ipsDstNAT = 1 << 5

// keyLoads loads the fields of a concatenated key into consecutive 4-byte
// registers from reg 1.
func (cp *compiler) keyLoads(key []KeyField, mod uint32) []expr.Any {
	var out []expr.Any
	words := 0
	for _, k := range key {
		switch k {
		case KeyDAddr:
			p := cp.addrPayload(DAddr, regAt(words))
			out = append(out, p)
			words += int(p.Len) / 4
		case KeyL4Proto:
			out = append(out, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regAt(words)})
			words++
		case KeyTHDPort:
			out = append(out, &expr.Payload{OperationType: expr.PayloadLoad, DestRegister: regAt(words),
				Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
			words++
		case KeyNumgen:
			// Host byte order, as the map's "mark" keys.
			out = append(out, &expr.Numgen{Register: regAt(words), Modulus: mod, Type: unix.NFT_NG_RANDOM})
			words++
		}
	}
	return out
}

// lookup looks reg 1 up in a named set, or map with dreg 0 (the verdict).
func (cp *compiler) lookup(name string, vmap bool) *expr.Lookup {
	l := &expr.Lookup{SourceRegister: reg1, SetName: name, IsDestRegSet: vmap}
	if s, ok := cp.added[name]; ok {
		l.SetID = s.ID
	}
	return l
}

func prefixMask(p netip.Prefix) []byte {
	m := make([]byte, p.Addr().BitLen()/8)
	for i := 0; i < p.Bits(); i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

// anonAddrSet adds an anonymous interval set holding the prefixes (already
// normalized: sorted, none inside another). As nft, it starts with an
// interval end at the zero address when the first range starts above it,
// and merges adjacent ranges.
func (cp *compiler) anonAddrSet(ps []netip.Prefix) (*nft.Set, error) {
	s := &nft.Set{Table: cp.table, Anonymous: true, Constant: true, Interval: true, Name: "__set%d", ID: cp.id(),
		KeyType: datatypes[addrKey(cp.family)]}
	type rng struct {
		lo, end netip.Addr // end: first address after the range; invalid past the top
	}
	var rs []rng
	for _, p := range backends.NormalizePrefixes(ps) {
		lo := p.Masked().Addr()
		end := lastAddr(p).Next()
		if n := len(rs); n > 0 && rs[n-1].end == lo {
			rs[n-1].end = end
			continue
		}
		rs = append(rs, rng{lo, end})
	}
	var elems []nft.SetElement
	if len(rs) > 0 && !rs[0].lo.IsUnspecified() {
		zero := netip.IPv4Unspecified()
		if cp.family == backends.IPv6 {
			zero = netip.IPv6Unspecified()
		}
		elems = append(elems, nft.SetElement{Key: zero.AsSlice(), IntervalEnd: true})
	}
	for _, r := range rs {
		elems = append(elems, nft.SetElement{Key: r.lo.AsSlice()})
		if r.end.IsValid() {
			elems = append(elems, nft.SetElement{Key: r.end.AsSlice(), IntervalEnd: true})
		}
	}
	if err := cp.c.AddSet(s, elems); err != nil {
		return nil, err
	}
	return s, nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// anonNumgenMap adds the anonymous verdict map of a numgen statement:
// host-endian single values, or big-endian intervals (after the rule's
// byteorder conversion) when a target spans several values.
func (cp *compiler) anonNumgenMap(n Numgen) (*nft.Set, error) {
	s := &nft.Set{Table: cp.table, Anonymous: true, Constant: true, IsMap: true, Name: "__map%d", ID: cp.id(),
		KeyType: nft.TypeInteger, DataType: nft.TypeVerdict, Interval: n.intervals()}
	var elems []nft.SetElement
	for _, t := range n.Targets {
		v := verdict(Verdict{Goto, t.Chain})
		if !s.Interval {
			elems = append(elems, nft.SetElement{Key: ne32(t.Lo), VerdictData: v})
			continue
		}
		// Adjacent intervals need no end element but the last (as nft).
		elems = append(elems, nft.SetElement{Key: be32(t.Lo), VerdictData: v})
	}
	if s.Interval {
		elems = append(elems, nft.SetElement{Key: be32(n.Mod), IntervalEnd: true})
	}
	if s.Interval {
		s.KeyByteOrder = binaryutil.BigEndian
	}
	if err := cp.c.AddSet(s, elems); err != nil {
		return nil, err
	}
	return s, nil
}
