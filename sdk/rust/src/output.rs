//! What the stages write (docs/abi.md §3.11), and the loop that runs a
//! module's handlers over a batch.

use crate::input::{Input, Node, ServicePort};
use crate::layout::*;
use crate::types::{Error, Stage, TopologyMode, Weight, MAX_ERROR_LEN};

/// An index set a stage writes. A new `Set` is nil (not used);
/// [`mark_used`](Set::mark_used) or [`add`](Set::add) makes it used.
/// Indices may be added in any order and more than once: the set is written
/// sorted and without duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set {
    idx: Vec<u32>,
    used: bool,
}

impl Set {
    /// A nil set.
    pub const fn new() -> Set {
        Set { idx: Vec::new(), used: false }
    }

    /// Marks the set as used, so that it is written as empty rather than
    /// nil when nothing is added.
    pub fn mark_used(&mut self) {
        self.used = true;
    }

    /// Adds endpoint index `i` and marks the set used.
    pub fn add(&mut self, i: usize) {
        self.used = true;
        self.idx.push(i as u32);
    }

    /// The number of indices added (duplicates included).
    pub fn len(&self) -> usize {
        self.idx.len()
    }

    /// Whether no index was added.
    pub fn is_empty(&self) -> bool {
        self.idx.is_empty()
    }

    /// The indices added so far, in the order added.
    pub fn indices(&self) -> &[u32] {
        &self.idx
    }

    /// Whether the set is unused (written as nil).
    pub fn is_nil(&self) -> bool {
        !self.used
    }

    pub(crate) fn reset(&mut self) {
        self.idx.clear();
        self.used = false;
    }

    /// The set sorted and without duplicates, `None` if unused.
    pub(crate) fn normalized(&mut self) -> Option<&[u32]> {
        if !self.used {
            return None;
        }
        if self.idx.windows(2).any(|w| w[1] <= w[0]) {
            self.idx.sort_unstable();
            self.idx.dedup();
        }
        Some(&self.idx)
    }
}

/// The topology stage's output for one service port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopologyResult {
    /// The topology mode in effect (informational for later stages).
    pub mode: TopologyMode,
    /// The endpoints available for cluster traffic on this node. It starts
    /// used and empty: it is never nil.
    pub eligible: Set,
}

impl TopologyResult {
    /// Marks endpoint `i` eligible.
    pub fn add(&mut self, i: usize) {
        self.eligible.add(i);
    }
}

/// The traffic-policy stage's output for one service port. Every set
/// starts nil.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyResult {
    /// The endpoints for cluster-policy traffic.
    pub cluster: Set,
    /// The endpoints for local-policy traffic.
    pub local: Set,
    /// Every endpoint reachable through the port.
    pub all: Set,
    /// Whether the port has any usable endpoint anywhere.
    pub has_any_endpoints: bool,
}

/// The endpoint-selection stage's output for one service port: a weight
/// in [1, [`MAX_WEIGHT`](crate::MAX_WEIGHT)] for each chosen endpoint.
/// Endpoints given no weight receive no traffic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SelectionResult {
    weights: Vec<Weight>,
}

impl SelectionResult {
    /// Gives endpoint `i` the weight `w`. Setting the same endpoint again
    /// replaces its weight.
    pub fn set(&mut self, i: usize, w: u32) {
        self.weights.push(Weight { index: i as u32, weight: w });
    }

    /// The weights set so far, in the order set.
    pub fn weights(&self) -> &[Weight] {
        &self.weights
    }

    /// The weights by ascending index, the last one set winning for an
    /// index set more than once.
    pub(crate) fn sorted(&mut self) -> &[Weight] {
        let w = &mut self.weights;
        if w.windows(2).any(|p| p[1].index <= p[0].index) {
            w.sort_by_key(|x| x.index); // stable: the last one set stays last
            let mut k = 0;
            for j in 0..w.len() {
                if j + 1 < w.len() && w[j + 1].index == w[j].index {
                    continue;
                }
                w[k] = w[j];
                k += 1;
            }
            w.truncate(k);
        }
        &self.weights
    }
}

/// Implements the topology stage for one service port.
pub type TopologyFn = fn(Node<'_>, ServicePort<'_>, &mut TopologyResult) -> Result<(), Error>;

/// Implements the traffic-policy stage for one service port.
pub type TrafficPolicyFn = fn(Node<'_>, ServicePort<'_>, &mut PolicyResult) -> Result<(), Error>;

/// Implements the endpoint-selection stage for one service port.
pub type EndpointSelectionFn =
    fn(Node<'_>, ServicePort<'_>, &mut SelectionResult) -> Result<(), Error>;

/// Receives the module's own configuration: the JSON of the module's
/// `config` in wasp's configuration file or its ServiceProxyModule, as
/// given; empty when there is none. It returns an error to reject the
/// configuration: the host then refuses to load the module and reports the
/// error's message. The host calls it on every new instance, before the
/// first stage call, always with the same bytes; the slice is valid during
/// the call only (copy what you keep).
pub type ConfigureFn = fn(&[u8]) -> Result<(), Error>;

/// A module's stage handlers; `None` for a stage it does not implement.
#[derive(Clone, Copy, Default)]
pub struct Handlers {
    /// The topology stage.
    pub topology: Option<TopologyFn>,
    /// The traffic-policy stage.
    pub traffic_policy: Option<TrafficPolicyFn>,
    /// The endpoint-selection stage.
    pub endpoint_selection: Option<EndpointSelectionFn>,
    /// The configuration handler; without one the module accepts only no
    /// configuration (empty, `null` or `{}`).
    pub configure: Option<ConfigureFn>,
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handlers")
            .field("topology", &self.topology.is_some())
            .field("traffic_policy", &self.traffic_policy.is_some())
            .field("endpoint_selection", &self.endpoint_selection.is_some())
            .field("configure", &self.configure.is_some())
            .finish()
    }
}

/// The output buffer of a call.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    buf: Vec<u8>,
    count: u32,
}

impl Writer {
    pub(crate) const fn new() -> Writer {
        Writer { buf: Vec::new(), count: 0 }
    }

    /// Starts an output for stage.
    pub(crate) fn reset(&mut self, stage: Stage) {
        self.buf.clear();
        self.buf.resize(OUTPUT_HEADER_SIZE, 0); // count, totalLen: see bytes
        self.buf[..4].copy_from_slice(&OUTPUT_MAGIC.to_le_bytes());
        self.buf[OUT_VERSION..OUT_VERSION + 2].copy_from_slice(&VERSION.to_le_bytes());
        self.buf[OUT_STAGE] = stage as u8;
        self.count = 0;
    }

    fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// Appends the values of s, in one copy where the target's byte
    /// order is the layout's.
    fn u32s(&mut self, s: &[u32]) {
        #[cfg(target_endian = "little")]
        {
            // SAFETY: a u32 has no padding and every byte pattern is a
            // u8; on a little-endian target its bytes are its encoding.
            let b = unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, s.len() * 4) };
            self.buf.extend_from_slice(b);
        }
        #[cfg(not(target_endian = "little"))]
        for &v in s {
            self.u32(v);
        }
    }

    fn set(&mut self, s: Option<&[u32]>) {
        match s {
            None => self.u32(NIL_COUNT),
            Some(s) => {
                self.u32(s.len() as u32);
                self.u32s(s);
            }
        }
    }

    /// Appends an error record; msg is truncated to MAX_ERROR_LEN bytes, at
    /// a character boundary.
    pub(crate) fn error(&mut self, msg: &str) {
        let mut n = msg.len().min(MAX_ERROR_LEN);
        while !msg.is_char_boundary(n) {
            n -= 1;
        }
        self.u32(STATUS_ERROR);
        self.u32(n as u32);
        self.buf.extend_from_slice(&msg.as_bytes()[..n]);
        while self.buf.len() % 4 != 0 {
            self.buf.push(0);
        }
        self.count += 1;
    }

    /// Appends a topology record.
    pub(crate) fn topology(&mut self, mode: TopologyMode, eligible: &[u32]) {
        self.u32(STATUS_OK);
        self.u32(mode as u32);
        self.set(Some(eligible));
        self.count += 1;
    }

    /// Appends a traffic-policy record.
    pub(crate) fn traffic_policy(
        &mut self,
        has_any: bool,
        cluster: Option<&[u32]>,
        local: Option<&[u32]>,
        all: Option<&[u32]>,
    ) {
        self.u32(STATUS_OK);
        self.u32(if has_any { DEC_FLAG_HAS_ANY_ENDPOINTS as u32 } else { 0 });
        self.set(cluster);
        self.set(local);
        self.set(all);
        self.count += 1;
    }

    /// Appends an endpoint-selection record.
    pub(crate) fn selection(&mut self, weights: &[Weight]) {
        self.u32(STATUS_OK);
        self.u32(weights.len() as u32);
        // SAFETY: Weight is repr(C), two u32s: index, then weight, as the
        // record lays them out.
        let pairs = unsafe { std::slice::from_raw_parts(weights.as_ptr() as *const u32, weights.len() * 2) };
        self.u32s(pairs);
        self.count += 1;
    }

    /// Finishes the output and returns it.
    pub(crate) fn bytes(&mut self) -> &[u8] {
        let (count, total) = (self.count.to_le_bytes(), (self.buf.len() as u32).to_le_bytes());
        self.buf[OUT_COUNT..OUT_COUNT + 4].copy_from_slice(&count);
        self.buf[OUT_TOTAL_LEN..OUT_TOTAL_LEN + 4].copy_from_slice(&total);
        &self.buf
    }
}

/// A module: its handlers and the buffers it reuses from call to call, so
/// that linear memory stays flat once it has seen the largest batch.
///
/// The [`module!`](crate::module) macro keeps one in a static and exports
/// it to the host; tests build their own and call [`run`](Module::run).
#[derive(Debug)]
pub struct Module {
    handlers: Handlers,
    inbuf: Vec<u64>, // u64: the input buffer is 8-aligned
    out: Writer,
    topo: TopologyResult,
    policy: PolicyResult,
    sel: SelectionResult,
    rejection: String, // the message of the last rejected configuration
}

impl Module {
    /// A module with the given handlers.
    pub const fn new(handlers: Handlers) -> Module {
        Module {
            handlers,
            inbuf: Vec::new(),
            out: Writer::new(),
            topo: TopologyResult { mode: TopologyMode::None, eligible: Set::new() },
            policy: PolicyResult {
                cluster: Set::new(),
                local: Set::new(),
                all: Set::new(),
                has_any_endpoints: false,
            },
            sel: SelectionResult { weights: Vec::new() },
            rejection: String::new(),
        }
    }

    /// The module's handlers.
    pub fn handlers(&self) -> &Handlers {
        &self.handlers
    }

    /// Runs the handler of `stage` over an encoded input batch and returns
    /// the encoded output, or `None` when the batch is malformed, is for
    /// another stage, or the stage has no handler (the host then fails the
    /// call with `no-output`). The output is valid until the next call.
    ///
    /// A handler's error fails only its service port: the output carries an
    /// error record for it. A panic is not caught: in Wasm it traps, and the
    /// host retries the batch in halves until the port that panics is
    /// isolated and failed alone.
    pub fn run(&mut self, stage: Stage, input: &[u8]) -> Option<&[u8]> {
        let Module { handlers, out, topo, policy, sel, .. } = self;
        run(handlers, out, topo, policy, sel, stage, input)
    }

    /// Implements the `wasp_buffer` export: returns the address of a buffer
    /// of at least `size` bytes, reused from call to call and grown with a
    /// quarter of headroom when too small.
    pub fn buffer(&mut self, size: u32) -> *mut u8 {
        let size = size as usize;
        if self.inbuf.len() * 8 < size || self.inbuf.is_empty() {
            let bytes = (size + size / 4).max(64 << 10);
            self.inbuf = Vec::new(); // free the old buffer before allocating
            self.inbuf = vec![0u64; (bytes + 7) / 8];
        }
        self.inbuf.as_mut_ptr() as *mut u8
    }

    /// Implements a stage export: runs `stage` over the `len` bytes at `ptr`,
    /// which must be the buffer [`buffer`](Module::buffer) returned, and
    /// returns the output's address and length packed as
    /// `address << 32 | length` (0 for no output).
    ///
    /// Meaningful in a 32-bit Wasm guest only, where addresses fit in 32 bits.
    pub fn call(&mut self, stage: Stage, ptr: u32, len: u32) -> u64 {
        let Module { handlers, inbuf, out, topo, policy, sel, .. } = self;
        let input = match in_buffer(inbuf, ptr, len) {
            Some(input) => input,
            None => return 0,
        };
        packed(run(handlers, out, topo, policy, sel, stage, input))
    }

    /// Hands `config` to the configuration handler, as the host does
    /// before an instance's first call, and returns its rejection. Without
    /// a handler, only no configuration (empty, `null` or `{}`) is
    /// accepted.
    pub fn configure(&self, config: &[u8]) -> Result<(), Error> {
        configure(self.handlers.configure, config)
    }

    /// Implements the `wasp_configure` export: configures the module with
    /// the `len` bytes at `ptr`, which must be the buffer
    /// [`buffer`](Module::buffer) returned, and returns 0 when the
    /// configuration is accepted, else the rejection message's address and
    /// length packed as `address << 32 | length`.
    ///
    /// Meaningful in a 32-bit Wasm guest only, where addresses fit in 32 bits.
    pub fn call_configure(&mut self, ptr: u32, len: u32) -> u64 {
        let Module { handlers, inbuf, rejection, .. } = self;
        let result = match in_buffer(inbuf, ptr, len) {
            Some(config) => configure(handlers.configure, config),
            None => Err(Error::new("wasp: configuration not in the buffer of wasp_buffer")),
        };
        match result {
            Ok(()) => 0,
            Err(e) => {
                rejection.clear();
                rejection.push_str(if e.message().is_empty() { "configuration rejected" } else { e.message() });
                (rejection.as_ptr() as usize as u64) << 32 | rejection.len() as u64
            }
        }
    }
}

/// The `len` bytes at `ptr`, if they lie in the input buffer.
fn in_buffer(inbuf: &[u64], ptr: u32, len: u32) -> Option<&[u8]> {
    if inbuf.is_empty() || ptr as usize != inbuf.as_ptr() as usize || len as usize > inbuf.len() * 8 {
        return None;
    }
    // SAFETY: [ptr, ptr+len) lies inside inbuf, borrowed for the result's
    // lifetime.
    Some(unsafe { std::slice::from_raw_parts(inbuf.as_ptr() as *const u8, len as usize) })
}

/// Runs the configuration handler f, or, without one, accepts only no
/// configuration.
fn configure(f: Option<ConfigureFn>, config: &[u8]) -> Result<(), Error> {
    if let Some(f) = f {
        return f(config);
    }
    let mut compact = config.iter().filter(|b| !b.is_ascii_whitespace());
    let none = match compact.next() {
        None => true,
        Some(b'n') => config.iter().filter(|b| !b.is_ascii_whitespace()).eq(b"null".iter()),
        Some(b'{') => compact.next() == Some(&b'}') && compact.next().is_none(),
        Some(_) => false,
    };
    if none {
        Ok(())
    } else {
        Err(Error::new("this module takes no configuration (its module! has no configure handler)"))
    }
}

fn run<'o>(
    h: &Handlers,
    out: &'o mut Writer,
    topo: &mut TopologyResult,
    policy: &mut PolicyResult,
    sel: &mut SelectionResult,
    stage: Stage,
    input: &[u8],
) -> Option<&'o [u8]> {
    match stage {
        Stage::Topology => {
            let f = h.topology?;
            each(out, stage, input, |out, node, sp| topology(f, topo, out, node, sp))
        }
        Stage::TrafficPolicy => {
            let f = h.traffic_policy?;
            each(out, stage, input, |out, node, sp| traffic_policy(f, policy, out, node, sp))
        }
        Stage::EndpointSelection => {
            let f = h.endpoint_selection?;
            each(out, stage, input, |out, node, sp| selection(f, sel, out, node, sp))
        }
    }
}

/// Runs port over every service port of the batch input for stage, and
/// returns the output, or `None` when the batch is malformed or for
/// another stage.
#[inline(always)]
fn each<'o>(
    out: &'o mut Writer,
    stage: Stage,
    input: &[u8],
    mut port: impl FnMut(&mut Writer, Node<'_>, ServicePort<'_>),
) -> Option<&'o [u8]> {
    let x = Input::parse(input)?;
    if x.stage() != stage {
        return None;
    }
    out.reset(stage);
    let node = x.node();
    for sp in x.ports() {
        port(out, node, sp);
    }
    Some(out.bytes())
}

// The handlers of one service port: generic, so that a module!'s stage
// export calls its handler directly (and may inline it) rather than
// through a function pointer, which cost an indirect call, and the
// budget checks the host puts around one, per port.

#[inline(always)]
fn topology<F>(f: F, topo: &mut TopologyResult, out: &mut Writer, node: Node<'_>, sp: ServicePort<'_>)
where
    F: Fn(Node<'_>, ServicePort<'_>, &mut TopologyResult) -> Result<(), Error>,
{
    topo.mode = TopologyMode::None;
    topo.eligible.reset();
    topo.eligible.mark_used();
    let res = f(node, sp, topo).map(|()| {
        let eligible = topo.eligible.normalized().unwrap_or(&[]);
        out.topology(topo.mode, eligible)
    });
    if let Err(e) = res {
        out.error(e.message());
    }
}

#[inline(always)]
fn traffic_policy<F>(f: F, policy: &mut PolicyResult, out: &mut Writer, node: Node<'_>, sp: ServicePort<'_>)
where
    F: Fn(Node<'_>, ServicePort<'_>, &mut PolicyResult) -> Result<(), Error>,
{
    policy.cluster.reset();
    policy.local.reset();
    policy.all.reset();
    policy.has_any_endpoints = false;
    let res = f(node, sp, policy).map(|()| {
        let PolicyResult { cluster, local, all, has_any_endpoints } = policy;
        out.traffic_policy(*has_any_endpoints, cluster.normalized(), local.normalized(), all.normalized())
    });
    if let Err(e) = res {
        out.error(e.message());
    }
}

#[inline(always)]
fn selection<F>(f: F, sel: &mut SelectionResult, out: &mut Writer, node: Node<'_>, sp: ServicePort<'_>)
where
    F: Fn(Node<'_>, ServicePort<'_>, &mut SelectionResult) -> Result<(), Error>,
{
    sel.weights.clear();
    let res = f(node, sp, sel).map(|()| out.selection(sel.sorted()));
    if let Err(e) = res {
        out.error(e.message());
    }
}

impl Module {
    /// Implements the `wasp_topology` export of [`module!`](crate::module)
    /// with its handler f: [`call`](Module::call) with a direct call of f.
    #[doc(hidden)]
    pub fn call_topology<F>(&mut self, ptr: u32, len: u32, f: F) -> u64
    where
        F: Fn(Node<'_>, ServicePort<'_>, &mut TopologyResult) -> Result<(), Error>,
    {
        self.call_each(Stage::Topology, ptr, len, |out, r, node, sp| topology(&f, &mut r.0, out, node, sp))
    }

    /// Implements the `wasp_traffic_policy` export of
    /// [`module!`](crate::module) with its handler f.
    #[doc(hidden)]
    pub fn call_traffic_policy<F>(&mut self, ptr: u32, len: u32, f: F) -> u64
    where
        F: Fn(Node<'_>, ServicePort<'_>, &mut PolicyResult) -> Result<(), Error>,
    {
        self.call_each(Stage::TrafficPolicy, ptr, len, |out, r, node, sp| traffic_policy(&f, &mut r.1, out, node, sp))
    }

    /// Implements the `wasp_endpoint_selection` export of
    /// [`module!`](crate::module) with its handler f.
    #[doc(hidden)]
    pub fn call_endpoint_selection<F>(&mut self, ptr: u32, len: u32, f: F) -> u64
    where
        F: Fn(Node<'_>, ServicePort<'_>, &mut SelectionResult) -> Result<(), Error>,
    {
        self.call_each(Stage::EndpointSelection, ptr, len, |out, r, node, sp| selection(&f, &mut r.2, out, node, sp))
    }

    /// Runs port, given the module's result of each stage, over every
    /// service port of the input buffer's len bytes at ptr, for stage.
    #[inline(always)]
    fn call_each(
        &mut self,
        stage: Stage,
        ptr: u32,
        len: u32,
        mut port: impl FnMut(
            &mut Writer,
            &mut (&mut TopologyResult, &mut PolicyResult, &mut SelectionResult),
            Node<'_>,
            ServicePort<'_>,
        ),
    ) -> u64 {
        let Module { inbuf, out, topo, policy, sel, .. } = self;
        let input = match in_buffer(inbuf, ptr, len) {
            Some(input) => input,
            None => return 0,
        };
        let mut results = (topo, policy, sel);
        packed(each(out, stage, input, |out, node, sp| port(out, &mut results, node, sp)))
    }
}

/// An output's address and length packed as `address << 32 | length`, 0
/// for none.
fn packed(o: Option<&[u8]>) -> u64 {
    match o {
        Some(o) if !o.is_empty() => (o.as_ptr() as usize as u64) << 32 | o.len() as u64,
        _ => 0,
    }
}
