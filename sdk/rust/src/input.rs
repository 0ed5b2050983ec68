//! Views over an input batch (docs/abi.md §3.2–§3.10). They read the bytes
//! the host wrote in place: nothing is copied or allocated, and strings
//! borrow the batch.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::layout::*;
use crate::types::{Protocol, Stage, TopologyMode, LABEL_TOPOLOGY_ZONE};

/// A parsed input batch: the header was checked and every table lies inside
/// the buffer. Element access beyond that is bounds-checked and panics on a
/// malformed reference, which a batch of the host never has.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    b: &'a [u8],
    stage: Stage,
    ports: usize,
    endpoints: usize,
    pairs: usize,
    hints: usize,
    decisions: usize,
    indices: usize,
    port_count: u32,
    index_count: u32,
    strings: &'a str,
    // zone is the node's zone label, looked up once per batch rather
    // than per port (None: the node's labels are malformed, and zone()
    // panics as label() does).
    zone: Option<&'a str>,
}

impl<'a> Input<'a> {
    /// Parses the header of an encoded batch. It returns `None` when the
    /// magic, version, stage or length is wrong, when a table lies outside
    /// the buffer, or when the string area is not UTF-8.
    pub fn parse(b: &'a [u8]) -> Option<Input<'a>> {
        if b.len() < HEADER_SIZE
            || u32_at(b, 0) != INPUT_MAGIC
            || u16_at(b, HDR_VERSION) != VERSION
            || u32_at(b, HDR_TOTAL_LEN) as usize != b.len()
        {
            return None;
        }
        let stage = Stage::from_u8(b[HDR_STAGE])?;
        let u = |o: usize| u32_at(b, o);
        let within = |off: u32, count: u32, size: usize| {
            off as u64 + count as u64 * size as u64 <= b.len() as u64
        };
        let port_count = u(HDR_PORT_COUNT);
        let index_count = u(HDR_INDEX_COUNT);
        if !within(u(HDR_PORTS_OFF), port_count, PORT_SIZE)
            || !within(u(HDR_ENDPOINTS_OFF), u(HDR_ENDPOINT_COUNT), ENDPOINT_SIZE)
            || !within(u(HDR_PAIRS_OFF), u(HDR_PAIR_COUNT), PAIR_SIZE)
            || !within(u(HDR_HINTS_OFF), u(HDR_HINT_COUNT), STRREF_SIZE)
            || !within(u(HDR_DECISIONS_OFF), port_count, DECISION_SIZE)
            || !within(u(HDR_INDICES_OFF), index_count, INDEX_SIZE)
            || !within(u(HDR_STRINGS_OFF), u(HDR_STRINGS_LEN), 1)
        {
            return None;
        }
        let so = u(HDR_STRINGS_OFF) as usize;
        let strings = utf8(&b[so..so + u(HDR_STRINGS_LEN) as usize])?;
        let mut x = Input {
            b,
            stage,
            ports: u(HDR_PORTS_OFF) as usize,
            endpoints: u(HDR_ENDPOINTS_OFF) as usize,
            pairs: u(HDR_PAIRS_OFF) as usize,
            hints: u(HDR_HINTS_OFF) as usize,
            decisions: u(HDR_DECISIONS_OFF) as usize,
            indices: u(HDR_INDICES_OFF) as usize,
            port_count,
            index_count,
            strings,
            zone: None,
        };
        x.zone = x.try_label(u(HDR_NODE_LABEL_FIRST), u(HDR_NODE_LABEL_COUNT), LABEL_TOPOLOGY_ZONE.as_bytes())
            .map(|v| v.unwrap_or(""));
        Some(x)
    }

    /// The stage the batch is for.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// The node the batch is evaluated for.
    pub fn node(&self) -> Node<'_> {
        Node { x: self }
    }

    /// The number of service ports.
    pub fn len(&self) -> usize {
        self.port_count as usize
    }

    /// Whether the batch has no service port.
    pub fn is_empty(&self) -> bool {
        self.port_count == 0
    }

    /// Service port `i`, `0 <= i < len()`.
    ///
    /// # Panics
    ///
    /// If `i` is out of range.
    pub fn port(&self, i: usize) -> ServicePort<'_> {
        assert!(i < self.len(), "wasp: port index out of range");
        let o = self.ports + i * PORT_SIZE;
        ServicePort {
            x: self,
            o,
            i,
            first: u32_at(self.b, o + PORT_ENDPOINT_FIRST) as usize,
            n: u32_at(self.b, o + PORT_ENDPOINT_COUNT) as usize,
        }
    }

    /// The service ports, in batch order.
    pub fn ports(&self) -> impl ExactSizeIterator<Item = ServicePort<'_>> + '_ {
        (0..self.len()).map(move |i| self.port(i))
    }

    /// The string referenced by the strref at offset o.
    fn str_at(&self, o: usize) -> &'a str {
        self.try_str_at(o).expect("wasp: string reference outside the string area")
    }

    /// The string referenced by the strref at offset o, `None` if it lies
    /// outside the string area or splits a character.
    fn try_str_at(&self, o: usize) -> Option<&'a str> {
        let (off, n) = (u32_at(self.b, o) as usize, u32_at(self.b, o + 4) as usize);
        if n == 0 {
            return Some("");
        }
        self.strings.get(off..off.checked_add(n)?)
    }

    /// The bytes of the string referenced by the strref at offset o, for
    /// comparisons, which need no character boundaries.
    ///
    /// # Panics
    ///
    /// If the reference lies outside the string area, as str_at.
    fn bytes_at(&self, o: usize) -> &'a [u8] {
        let (off, n) = (u32_at(self.b, o) as usize, u32_at(self.b, o + 4) as usize);
        self.strings
            .as_bytes()
            .get(off..off.saturating_add(n))
            .expect("wasp: string reference outside the string area")
    }

    /// Looks key up in count pairs starting at pair index first; each list
    /// is sorted by key, so this is a binary search.
    fn label(&self, first: u32, count: u32, key: &str) -> Option<&'a str> {
        self.try_label(first, count, key.as_bytes())
            .expect("wasp: string reference outside the string area")
    }

    /// label, `None` if a string reference it reads is malformed.
    fn try_label(&self, first: u32, count: u32, key: &[u8]) -> Option<Option<&'a str>> {
        let (mut lo, mut hi) = (0usize, count as usize);
        while lo < hi {
            let m = lo + (hi - lo) / 2;
            let o = self.pairs.checked_add((first as usize).checked_add(m)?.checked_mul(PAIR_SIZE)?)?;
            if o.checked_add(PAIR_SIZE)? > self.b.len() {
                return None;
            }
            let k = self.try_str_at(o)?;
            match order(k.as_bytes(), key) {
                std::cmp::Ordering::Equal => return Some(Some(self.try_str_at(o + STRREF_SIZE)?)),
                std::cmp::Ordering::Less => lo = m + 1,
                std::cmp::Ordering::Greater => hi = m,
            }
        }
        Some(None)
    }
}

/// The lexicographic order of a and b, compared eight bytes at a time, as
/// same does.
pub(crate) fn order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let (mut x, mut y) = (a.chunks_exact(8), b.chunks_exact(8));
    for (p, q) in (&mut x).zip(&mut y) {
        let (p, q) = (u64::from_be_bytes(p.try_into().unwrap()), u64::from_be_bytes(q.try_into().unwrap()));
        if p != q {
            return p.cmp(&q);
        }
    }
    // The rest of the shorter, and as much of the longer.
    let n = a.len().min(b.len()) / 8 * 8;
    for (p, q) in a[n..].iter().zip(&b[n..]) {
        if p != q {
            return p.cmp(q);
        }
    }
    a.len().cmp(&b.len())
}

/// Whether a and b hold the same bytes, compared eight at a time: the
/// standard library's comparison calls a byte-at-a-time memcmp on this
/// target, and hints are compared for every endpoint.
#[inline]
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut x, mut y) = (a.chunks_exact(8), b.chunks_exact(8));
    for (p, q) in (&mut x).zip(&mut y) {
        if u64::from_le_bytes(p.try_into().unwrap()) != u64::from_le_bytes(q.try_into().unwrap()) {
            return false;
        }
    }
    x.remainder().iter().zip(y.remainder()).all(|(p, q)| p == q)
}

/// b as a str, if it is UTF-8. A batch's string area is usually ASCII
/// (Kubernetes names), which this checks eight bytes at a time before
/// leaving anything else to the standard library's validation: that
/// validation alone was a third of a small stage's work.
pub(crate) fn utf8(b: &[u8]) -> Option<&str> {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut words = b.chunks_exact(32);
    let mut acc = 0u64;
    for w in &mut words {
        let word = |k: usize| u64::from_le_bytes(w[k..k + 8].try_into().unwrap());
        acc |= word(0) | word(8) | word(16) | word(24);
    }
    let ascii = acc & HIGH == 0 && words.remainder().iter().all(|c| c.is_ascii());
    if ascii {
        // SAFETY: ASCII is UTF-8.
        return Some(unsafe { std::str::from_utf8_unchecked(b) });
    }
    std::str::from_utf8(b).ok()
}

/// The node a batch is evaluated for.
#[derive(Clone, Copy, Debug)]
pub struct Node<'a> {
    x: &'a Input<'a>,
}

impl<'a> Node<'a> {
    /// The node's name.
    pub fn name(&self) -> &'a str {
        self.x.str_at(HDR_NODE_NAME)
    }

    /// The value of the node label `key`, `None` if it is not set.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        let b = self.x.b;
        self.x
            .label(u32_at(b, HDR_NODE_LABEL_FIRST), u32_at(b, HDR_NODE_LABEL_COUNT), key)
    }

    /// The node's `topology.kubernetes.io/zone` label (`""` if unset).
    pub fn zone(&self) -> &'a str {
        match self.x.zone {
            Some(z) => z,
            None => self.label(LABEL_TOPOLOGY_ZONE).unwrap_or(""),
        }
    }
}

/// One service port of a batch: one port of one Service, for one IP family.
#[derive(Clone, Copy, Debug)]
pub struct ServicePort<'a> {
    x: &'a Input<'a>,
    o: usize,     // offset of the port record
    i: usize,     // index of the port in the batch
    first: usize, // the port's first endpoint in the endpoint table
    n: usize,     // its endpoint count
}

impl<'a> ServicePort<'a> {
    fn flag(&self, f: u8) -> bool {
        self.x.b[self.o + PORT_FLAGS] & f != 0
    }

    /// The Service's namespace.
    pub fn namespace(&self) -> &'a str {
        self.x.str_at(self.o + PORT_NAMESPACE)
    }

    /// The Service's name.
    pub fn name(&self) -> &'a str {
        self.x.str_at(self.o + PORT_NAME)
    }

    /// The port's name (`""` for an unnamed port).
    pub fn port_name(&self) -> &'a str {
        self.x.str_at(self.o + PORT_PORT_NAME)
    }

    /// The port's protocol.
    ///
    /// # Panics
    ///
    /// If the record holds an unknown protocol, which the host never sends.
    pub fn protocol(&self) -> Protocol {
        Protocol::from_u8(self.x.b[self.o + PORT_PROTOCOL]).expect("wasp: unknown protocol")
    }

    /// The service port number.
    pub fn port(&self) -> u16 {
        u16_at(self.x.b, self.o + PORT_PORT)
    }

    /// The node port, 0 if none.
    pub fn node_port(&self) -> u16 {
        u16_at(self.x.b, self.o + PORT_NODE_PORT)
    }

    /// Whether the port is evaluated for the IPv6 family (else IPv4).
    pub fn ipv6(&self) -> bool {
        self.flag(PORT_FLAG_IPV6)
    }

    /// `spec.internalTrafficPolicy: Local`.
    pub fn internal_policy_local(&self) -> bool {
        self.flag(PORT_FLAG_INTERNAL_POLICY_LOCAL)
    }

    /// `externalTrafficPolicy: Local` on a NodePort or LoadBalancer Service.
    pub fn external_policy_local(&self) -> bool {
        self.flag(PORT_FLAG_EXTERNAL_POLICY_LOCAL)
    }

    /// Whether the port has a node port, load-balancer VIPs or external IPs.
    pub fn externally_accessible(&self) -> bool {
        self.flag(PORT_FLAG_EXTERNALLY_ACCESSIBLE)
    }

    /// Whether the port needs cluster-policy endpoints.
    pub fn uses_cluster_endpoints(&self) -> bool {
        self.flag(PORT_FLAG_USES_CLUSTER)
    }

    /// Whether the port needs local-policy endpoints.
    pub fn uses_local_endpoints(&self) -> bool {
        self.flag(PORT_FLAG_USES_LOCAL)
    }

    /// The value of the Service annotation `key`, `None` if it is not set.
    pub fn annotation(&self, key: &str) -> Option<&'a str> {
        let b = self.x.b;
        self.x.label(
            u32_at(b, self.o + PORT_ANNOTATION_FIRST),
            u32_at(b, self.o + PORT_ANNOTATION_COUNT),
            key,
        )
    }

    /// The number of endpoints. Results name endpoints by their index in
    /// `0..len()`.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the port has no endpoint.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Endpoint `i`, `0 <= i < len()`.
    ///
    /// # Panics
    ///
    /// If `i` is out of range.
    pub fn endpoint(&self, i: usize) -> Endpoint<'a> {
        assert!(i < self.n, "wasp: endpoint index out of range");
        let o = self.x.endpoints + (self.first + i) * ENDPOINT_SIZE;
        Endpoint::at(self.x, o, self.ipv6())
    }

    /// The endpoints, in index order.
    pub fn endpoints(&self) -> impl ExactSizeIterator<Item = Endpoint<'a>> {
        let (x, v6) = (self.x, self.ipv6());
        // The port's records, sliced once: each endpoint's fields are
        // then read without further bounds checks.
        let start = x.endpoints + self.first * ENDPOINT_SIZE;
        let table = &x.b[start..start + self.n * ENDPOINT_SIZE];
        table.chunks_exact(ENDPOINT_SIZE).enumerate().map(move |(i, rec)| Endpoint {
            x,
            o: start + i * ENDPOINT_SIZE,
            v6,
            rec: rec.try_into().unwrap(),
        })
    }

    /// What the earlier stages decided for this port.
    pub fn decision(&self) -> Decision<'a> {
        Decision {
            x: self.x,
            o: self.x.decisions + self.i * DECISION_SIZE,
        }
    }
}

/// One endpoint of a service port.
#[derive(Clone, Copy, Debug)]
pub struct Endpoint<'a> {
    x: &'a Input<'a>,
    o: usize, // offset of the record in the batch
    v6: bool,
    rec: &'a [u8; ENDPOINT_SIZE],
}

impl<'a> Endpoint<'a> {
    /// The endpoint whose record is at offset o of x.
    fn at(x: &'a Input<'a>, o: usize, v6: bool) -> Endpoint<'a> {
        let rec = x.b[o..o + ENDPOINT_SIZE].try_into().unwrap();
        Endpoint { x, o, v6, rec }
    }

    fn flag(&self, f: u8) -> bool {
        self.rec[EP_FLAGS] & f != 0
    }

    /// The endpoint's IP address: IPv4 for an IPv4 service port, else IPv6.
    pub fn addr(&self) -> IpAddr {
        let a = &self.rec[EP_ADDR..EP_ADDR + 16];
        if self.v6 {
            let mut o = [0u8; 16];
            o.copy_from_slice(a);
            IpAddr::V6(Ipv6Addr::from(o))
        } else {
            IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))
        }
    }

    /// The endpoint's (target) port.
    pub fn port(&self) -> u16 {
        u16_at(self.rec, EP_PORT)
    }

    /// `conditions.ready` (nil counts as true).
    pub fn ready(&self) -> bool {
        self.flag(EP_FLAG_READY)
    }

    /// `conditions.serving` (nil counts as true).
    pub fn serving(&self) -> bool {
        self.flag(EP_FLAG_SERVING)
    }

    /// `conditions.terminating` (nil counts as false).
    pub fn terminating(&self) -> bool {
        self.flag(EP_FLAG_TERMINATING)
    }

    /// Whether the endpoint runs on this node.
    pub fn local(&self) -> bool {
        self.flag(EP_FLAG_LOCAL)
    }

    /// The endpoint's `nodeName` (`""` if unset).
    pub fn node_name(&self) -> &'a str {
        self.x.str_at(self.o + EP_NODE_NAME)
    }

    /// The endpoint's `zone` (`""` if unset).
    pub fn zone(&self) -> &'a str {
        self.x.str_at(self.o + EP_ZONE)
    }

    /// The names of `hints.forZones`, sorted.
    pub fn zone_hints(&self) -> Strings<'a> {
        Strings {
            x: self.x,
            first: u32_at(self.rec, EP_HINT_FIRST) as usize,
            n: u16_at(self.rec, EP_ZONE_HINT_COUNT) as usize,
        }
    }

    /// The names of `hints.forNodes`, sorted.
    pub fn node_hints(&self) -> Strings<'a> {
        let r = self.rec;
        Strings {
            x: self.x,
            first: u32_at(r, EP_HINT_FIRST) as usize + u16_at(r, EP_ZONE_HINT_COUNT) as usize,
            n: u16_at(r, EP_NODE_HINT_COUNT) as usize,
        }
    }
}

/// A list of strings of the batch (an endpoint's zone or node hints).
#[derive(Clone, Copy, Debug)]
pub struct Strings<'a> {
    x: &'a Input<'a>,
    first: usize,
    n: usize,
}

impl<'a> Strings<'a> {
    /// The number of strings.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// String `i`, `0 <= i < len()`.
    ///
    /// # Panics
    ///
    /// If `i` is out of range.
    pub fn get(&self, i: usize) -> &'a str {
        assert!(i < self.n, "wasp: string index out of range");
        self.x.str_at(self.x.hints + (self.first + i) * STRREF_SIZE)
    }

    /// Whether `v` is one of the strings.
    pub fn contains(&self, v: &str) -> bool {
        let v = v.as_bytes();
        (0..self.n).any(|i| same(self.x.bytes_at(self.x.hints + (self.first + i) * STRREF_SIZE), v))
    }

    /// The strings, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a str> {
        let s = *self;
        (0..self.n).map(move |i| s.get(i))
    }
}

/// What the earlier stages decided for a service port (docs/abi.md §3.8).
#[derive(Clone, Copy, Debug)]
pub struct Decision<'a> {
    x: &'a Input<'a>,
    o: usize,
}

impl<'a> Decision<'a> {
    /// The topology stage's mode.
    ///
    /// # Panics
    ///
    /// If the record holds an unknown mode, which the host never sends.
    pub fn mode(&self) -> TopologyMode {
        TopologyMode::from_u8(self.x.b[self.o + DEC_MODE]).expect("wasp: unknown topology mode")
    }

    /// The traffic-policy stage's `hasAnyEndpoints`.
    pub fn has_any_endpoints(&self) -> bool {
        self.x.b[self.o + DEC_FLAGS] & DEC_FLAG_HAS_ANY_ENDPOINTS != 0
    }

    fn set(&self, o: usize) -> Indices<'a> {
        let b = self.x.b;
        let (first, n) = (u32_at(b, self.o + o), u32_at(b, self.o + o + 4));
        if n == NIL_COUNT {
            return Indices { x: self.x, first: 0, n: 0, nil: true };
        }
        assert!(
            first as u64 + n as u64 <= self.x.index_count as u64,
            "wasp: index set outside the batch"
        );
        Indices { x: self.x, first: first as usize, n: n as usize, nil: false }
    }

    /// The topology stage's eligible endpoints.
    pub fn eligible(&self) -> Indices<'a> {
        self.set(DEC_ELIGIBLE)
    }

    /// The traffic-policy stage's cluster endpoints.
    pub fn cluster(&self) -> Indices<'a> {
        self.set(DEC_CLUSTER)
    }

    /// The traffic-policy stage's local endpoints.
    pub fn local(&self) -> Indices<'a> {
        self.set(DEC_LOCAL)
    }

    /// The traffic-policy stage's all-reachable endpoints.
    pub fn all(&self) -> Indices<'a> {
        self.set(DEC_ALL)
    }
}

/// An ascending set of endpoint indices of a decision, possibly nil: not
/// used by the traffic policy, as opposed to used and empty.
#[derive(Clone, Copy, Debug)]
pub struct Indices<'a> {
    x: &'a Input<'a>,
    first: usize,
    n: usize,
    nil: bool,
}

impl<'a> Indices<'a> {
    /// Whether the set is nil (not used), as opposed to used and empty.
    pub fn is_nil(&self) -> bool {
        self.nil
    }

    /// The number of indices (0 for a nil set).
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the set has no index (nil or empty).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Index `i` of the set, `0 <= i < len()`: an endpoint index.
    ///
    /// # Panics
    ///
    /// If `i` is out of range.
    pub fn get(&self, i: usize) -> usize {
        assert!(i < self.n, "wasp: set index out of range");
        u32_at(self.x.b, self.x.indices + (self.first + i) * INDEX_SIZE) as usize
    }

    /// Whether endpoint index `v` is in the set (a binary search).
    pub fn contains(&self, v: usize) -> bool {
        let (mut lo, mut hi) = (0usize, self.n);
        while lo < hi {
            let m = lo + (hi - lo) / 2;
            let x = self.get(m);
            if x == v {
                return true;
            } else if x < v {
                lo = m + 1;
            } else {
                hi = m;
            }
        }
        false
    }

    /// The endpoint indices, ascending.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = usize> + 'a {
        // Sliced once, as ServicePort::endpoints.
        let start = self.x.indices + self.first * INDEX_SIZE;
        self.x.b[start..start + self.n * INDEX_SIZE]
            .chunks_exact(INDEX_SIZE)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()) as usize)
    }
}
