//! rust-prefer-local is an example endpoint-selection module written in
//! Rust: it sends a service port's cluster traffic to the closest endpoints
//! there are, those on this node, else those in this node's zone, else all
//! of them.
//!
//! The Service annotation `wasp.dev/prefer-local` sets how close: `node`
//! (the default) tries this node then the zone, `zone` only the zone, `off`
//! keeps every endpoint. Any other value fails the port, and the host keeps
//! its last good result. Every endpoint of the local set (externalTraffic-
//! or internalTrafficPolicy Local) keeps its weight: that traffic is already
//! local. The module's configuration, `{"default": "zone"}`, sets the
//! preference of the Services without the annotation. See README.md.

use std::cell::Cell;

use wasp::{Error, Indices, Node, SelectionResult, ServicePort};

/// The Service annotation that sets the preference.
pub const ANNOTATION: &str = "wasp.dev/prefer-local";

/// How far the cluster set is narrowed.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tier {
    Node,
    Zone,
    All,
}

thread_local! {
    /// The tier of a Service without the annotation: the configuration's
    /// `default`. A Wasm instance has one thread.
    static DEFAULT: Cell<Tier> = Cell::new(Tier::Node);
}

/// The tier a preference names.
fn tier(v: &str) -> Option<Tier> {
    match v {
        "node" => Some(Tier::Node),
        "zone" => Some(Tier::Zone),
        "off" => Some(Tier::All),
        _ => None,
    }
}

/// The closest tier the annotation allows.
fn preference(sp: &ServicePort) -> Result<Tier, Error> {
    match sp.annotation(ANNOTATION) {
        None => Ok(DEFAULT.with(|d| d.get())),
        Some(v) => tier(v).ok_or_else(|| {
            Error::new(format!("annotation {}: {:?} is not one of node, zone, off", ANNOTATION, v))
        }),
    }
}

/// Reads the configuration, `{"default": "node" | "zone" | "off"}` (all
/// optional), and rejects anything else.
fn configure(config: &[u8]) -> Result<(), Error> {
    let text = std::str::from_utf8(config).map_err(|_| Error::new("config: not UTF-8"))?;
    let mut default = Tier::Node;
    for (key, value) in string_fields(text)? {
        match key {
            "default" => {
                default = tier(value).ok_or_else(|| {
                    Error::new(format!("default: {:?} is not one of node, zone, off", value))
                })?
            }
            _ => {
                return Err(Error::new(format!(
                    "config: unknown field {:?} (want {{\"default\": \"node\" | \"zone\" | \"off\"}})",
                    key
                )))
            }
        }
    }
    DEFAULT.with(|d| d.set(default));
    Ok(())
}

/// The fields of a flat JSON object whose values are strings without
/// escapes, which is all this module's configuration can be (the SDK has no
/// JSON parser). Empty text is no field.
fn string_fields(text: &str) -> Result<Vec<(&str, &str)>, Error> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let mut rest = text
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .ok_or_else(|| Error::new("config: want a JSON object"))?
        .trim_start();
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (key, r) = string(rest).ok_or_else(|| Error::new("config: want a field name in quotes"))?;
        let r = r.trim_start().strip_prefix(':').ok_or_else(|| Error::new(format!("config: want ':' after {:?}", key)))?;
        let (value, r) = string(r.trim_start())
            .ok_or_else(|| Error::new(format!("{}: want a string", key)))?;
        out.push((key, value));
        rest = r.trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r.trim_start();
            if rest.is_empty() {
                return Err(Error::new("config: want a field name in quotes"));
            }
        } else if !rest.is_empty() {
            return Err(Error::new(format!("config: want ',' or '}}' after {:?}", key)));
        }
    }
    Ok(out)
}

/// A string in quotes at the start of s, without escapes, and what follows.
fn string(s: &str) -> Option<(&str, &str)> {
    let s = s.strip_prefix('"')?;
    let end = s.find('"')?;
    let v = &s[..end];
    if v.contains('\\') {
        return None;
    }
    Some((v, &s[end + 1..]))
}

/// Whether endpoint i is in tier. An endpoint without a zone, or a node
/// without one, is never in the zone tier.
fn within(sp: &ServicePort, zone: &str, i: usize, tier: Tier) -> bool {
    let ep = sp.endpoint(i);
    match tier {
        Tier::Node => ep.local(),
        Tier::Zone => !zone.is_empty() && ep.zone() == zone,
        Tier::All => true,
    }
}

/// The closest tier, from `closest` on, with an endpoint of set.
fn closest_tier(sp: &ServicePort, zone: &str, set: &Indices, closest: Tier) -> Tier {
    for tier in [Tier::Node, Tier::Zone] {
        if tier >= closest && set.iter().any(|i| within(sp, zone, i, tier)) {
            return tier;
        }
    }
    Tier::All
}

fn selection(node: Node, sp: ServicePort, out: &mut SelectionResult) -> Result<(), Error> {
    let closest = preference(&sp)?;
    let d = sp.decision();
    let (cluster, local) = (d.cluster(), d.local());
    let zone = node.zone();
    let tier = closest_tier(&sp, zone, &cluster, closest);
    for i in cluster.iter().filter(|&i| within(&sp, zone, i, tier)) {
        out.set(i, 1);
    }
    for i in local.iter() {
        out.set(i, 1);
    }
    Ok(())
}

wasp::module! {
    name: "rust-prefer-local",
    version: "0.1.0",
    min_host_version: "0.1.0",
    description: "Cluster traffic to the endpoints on this node, else in its zone, else anywhere; the wasp.dev/prefer-local Service annotation (node, zone, off) sets how close.",
    configure: configure,
    endpoint_selection: selection,
}
