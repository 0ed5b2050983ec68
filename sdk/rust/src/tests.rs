//! Tests against the golden vectors of abi/testdata (docs/abi.md §7), the
//! same bytes the Go SDK and the host are tested with.

use std::net::IpAddr;

use crate::input::{order, same, utf8};
use crate::metadata::validators;
use crate::output::Writer;
use crate::*;

const TOPOLOGY_INPUT: &str = include_str!("../../../abi/testdata/topology.input.hex");
const TOPOLOGY_OUTPUT: &str = include_str!("../../../abi/testdata/topology.output.hex");
const POLICY_INPUT: &str = include_str!("../../../abi/testdata/traffic-policy.input.hex");
const POLICY_OUTPUT: &str = include_str!("../../../abi/testdata/traffic-policy.output.hex");
const SELECTION_INPUT: &str = include_str!("../../../abi/testdata/endpoint-selection.input.hex");
const SELECTION_OUTPUT: &str = include_str!("../../../abi/testdata/endpoint-selection.output.hex");

/// Decodes a golden file: lowercase hex, 16 bytes a line.
fn hex(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in s.lines() {
        assert!(line.len() <= 32 && line.len() % 2 == 0, "bad golden line {:?}", line);
        for k in (0..line.len()).step_by(2) {
            out.push(u8::from_str_radix(&line[k..k + 2], 16).expect("hex"));
        }
    }
    out
}

/// The golden inputs, by stage, with the sizes docs/abi.md §7 gives.
fn golden_inputs() -> Vec<(Stage, Vec<u8>, Vec<u8>)> {
    let v = vec![
        (Stage::Topology, hex(TOPOLOGY_INPUT), hex(TOPOLOGY_OUTPUT)),
        (Stage::TrafficPolicy, hex(POLICY_INPUT), hex(POLICY_OUTPUT)),
        (Stage::EndpointSelection, hex(SELECTION_INPUT), hex(SELECTION_OUTPUT)),
    ];
    let sizes = [(628, 48), (636, 68), (648, 60)];
    for ((stage, i, o), (ni, no)) in v.iter().zip(sizes) {
        assert_eq!((i.len(), o.len()), (ni, no), "{} golden sizes", stage);
    }
    v
}

fn set(ix: Indices) -> Option<Vec<usize>> {
    if ix.is_nil() {
        None
    } else {
        Some(ix.iter().collect())
    }
}

/// Every stage's input carries the same node, ports and endpoints
/// (docs/abi.md §7.1).
#[test]
fn golden_input_node_ports_endpoints() {
    for (stage, b, _) in golden_inputs() {
        let x = Input::parse(&b).unwrap_or_else(|| panic!("{}: parse failed", stage));
        assert_eq!(x.stage(), stage);
        assert_eq!(x.len(), 2);

        let node = x.node();
        assert_eq!(node.name(), "node-a");
        assert_eq!(node.label(LABEL_TOPOLOGY_REGION), Some("region-1"));
        assert_eq!(node.label(LABEL_TOPOLOGY_ZONE), Some("zone-a"));
        assert_eq!(node.zone(), "zone-a");
        assert_eq!(node.label("topology.kubernetes.io/hostname"), None);
        assert_eq!(node.label(""), None);

        let web = x.port(0);
        assert_eq!((web.namespace(), web.name(), web.port_name()), ("default", "web", "http"));
        assert_eq!(web.protocol(), Protocol::Tcp);
        assert_eq!((web.port(), web.node_port()), (80, 30080));
        assert!(!web.ipv6() && !web.internal_policy_local());
        assert!(web.external_policy_local() && web.externally_accessible());
        assert!(web.uses_cluster_endpoints() && web.uses_local_endpoints());
        assert_eq!(web.annotation("example.com/drain-zone"), Some("zone-b"));
        assert_eq!(web.annotation("example.com/other"), None);
        assert_eq!(web.len(), 2);

        let e0 = web.endpoint(0);
        assert_eq!(e0.addr(), "10.244.1.10".parse::<IpAddr>().unwrap());
        assert_eq!(e0.port(), 8080);
        assert!(e0.ready() && e0.serving() && e0.local() && !e0.terminating());
        assert_eq!((e0.node_name(), e0.zone()), ("node-a", "zone-a"));
        assert_eq!(e0.zone_hints().iter().collect::<Vec<_>>(), ["zone-a"]);
        assert!(e0.node_hints().is_empty());
        assert!(e0.zone_hints().contains("zone-a") && !e0.zone_hints().contains("zone-b"));

        let e1 = web.endpoint(1);
        assert_eq!(e1.addr(), "10.244.2.10".parse::<IpAddr>().unwrap());
        assert!(!e1.ready() && e1.serving() && e1.terminating() && !e1.local());
        assert_eq!((e1.node_name(), e1.zone()), ("node-b", "zone-b"));
        assert_eq!(e1.zone_hints().iter().collect::<Vec<_>>(), ["zone-b"]);
        assert_eq!(e1.node_hints().iter().collect::<Vec<_>>(), ["node-b"]);
        assert_eq!(e1.node_hints().get(0), "node-b");

        let dns = x.port(1);
        assert_eq!((dns.namespace(), dns.name(), dns.port_name()), ("default", "dns", "dns"));
        assert_eq!(dns.protocol(), Protocol::Udp);
        assert_eq!((dns.port(), dns.node_port()), (53, 0));
        assert!(dns.ipv6() && dns.internal_policy_local() && dns.uses_local_endpoints());
        assert!(!dns.uses_cluster_endpoints() && !dns.externally_accessible());
        assert_eq!(dns.annotation("example.com/drain-zone"), None);
        assert_eq!(dns.len(), 1);
        let d0 = dns.endpoint(0);
        assert_eq!(d0.addr(), "fd00::1".parse::<IpAddr>().unwrap());
        assert_eq!(d0.port(), 53);
        assert!(d0.ready() && d0.serving() && !d0.local() && !d0.terminating());
        assert_eq!((d0.node_name(), d0.zone()), ("node-b", ""));
        assert!(d0.zone_hints().is_empty() && d0.node_hints().is_empty());

        assert_eq!(x.ports().map(|p| p.name()).collect::<Vec<_>>(), ["web", "dns"]);
        assert_eq!(web.endpoints().map(|e| e.port()).collect::<Vec<_>>(), [8080, 8080]);
    }
}

/// The decisions each stage receives (docs/abi.md §7.1).
#[test]
fn golden_input_decisions() {
    type Want = (TopologyMode, bool, [Option<Vec<usize>>; 4]);
    let none = || [None, None, None, None];
    let cases: Vec<(Stage, Want, Want)> = vec![
        (
            Stage::Topology,
            (TopologyMode::None, false, none()),
            (TopologyMode::None, false, none()),
        ),
        (
            Stage::TrafficPolicy,
            (TopologyMode::PreferSameZone, false, [Some(vec![0]), None, None, None]),
            (TopologyMode::None, false, [Some(vec![0]), None, None, None]),
        ),
        (
            Stage::EndpointSelection,
            (
                TopologyMode::PreferSameZone,
                true,
                [Some(vec![0]), Some(vec![0]), Some(vec![0]), Some(vec![0])],
            ),
            (TopologyMode::None, true, [Some(vec![0]), None, Some(vec![]), Some(vec![])]),
        ),
    ];
    let inputs = golden_inputs();
    for (stage, web, dns) in cases {
        let b = &inputs.iter().find(|(s, _, _)| *s == stage).unwrap().1;
        let x = Input::parse(b).unwrap();
        for (i, want) in [web, dns].into_iter().enumerate() {
            let d = x.port(i).decision();
            let got = (
                d.mode(),
                d.has_any_endpoints(),
                [set(d.eligible()), set(d.cluster()), set(d.local()), set(d.all())],
            );
            assert_eq!(got, want, "{} port {}", stage, i);
        }
    }
    // Nil and empty are different; contains works on both.
    let b = hex(SELECTION_INPUT);
    let x = Input::parse(&b).unwrap();
    let d = x.port(1).decision();
    assert!(d.cluster().is_nil() && d.cluster().is_empty());
    assert!(!d.local().is_nil() && d.local().is_empty() && !d.local().contains(0));
    assert!(x.port(0).decision().cluster().contains(0));
    assert!(!x.port(0).decision().cluster().contains(1));
}

#[path = "../testdata/golden/src/handlers.rs"]
mod golden;

const GOLDEN: Handlers = Handlers {
    topology: Some(golden::topology),
    traffic_policy: Some(golden::traffic_policy),
    endpoint_selection: Some(golden::endpoint_selection),
    configure: None,
};

/// Handlers that give the golden results, run over the golden inputs,
/// produce the golden outputs byte for byte, call after call.
#[test]
fn golden_output_through_module() {
    let mut m = Module::new(GOLDEN);
    for round in 0..3 {
        for (stage, input, want) in golden_inputs() {
            let got = m.run(stage, &input).unwrap_or_else(|| panic!("{}: no output", stage));
            assert_eq!(got, &want[..], "{} round {}", stage, round);
        }
    }
}

/// The writer alone, as abi_test.go's goldenOutput calls the host's writer.
#[test]
fn golden_output_through_writer() {
    let mut w = Writer::new();
    let mut got = Vec::new();
    w.reset(Stage::Topology);
    w.topology(TopologyMode::PreferSameZone, &[0]);
    w.topology(TopologyMode::None, &[0]);
    got.push(w.bytes().to_vec());
    w.reset(Stage::TrafficPolicy);
    w.traffic_policy(true, Some(&[0]), Some(&[0]), Some(&[0]));
    w.traffic_policy(true, None, Some(&[]), Some(&[]));
    got.push(w.bytes().to_vec());
    w.reset(Stage::EndpointSelection);
    w.selection(&[Weight { index: 0, weight: 1 }]);
    w.error("no local endpoint");
    got.push(w.bytes().to_vec());
    let want: Vec<Vec<u8>> = golden_inputs().into_iter().map(|(_, _, o)| o).collect();
    assert_eq!(got, want);
}

#[test]
fn malformed_input_gives_no_output() {
    let mut m = Module::new(GOLDEN);
    let good = hex(TOPOLOGY_INPUT);
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for n in [0, 4, 79, 80, 400, good.len() - 4] {
        cases.push((format!("truncated to {}", n), good[..n].to_vec()));
    }
    let mut bad = |name: &str, o: usize, v: u8| {
        let mut b = good.clone();
        b[o] = v;
        cases.push((name.to_string(), b));
    };
    bad("magic", 0, b'X');
    bad("version", 4, 2);
    bad("stage", 6, 9);
    bad("total length", 8, 0x70);
    bad("port table outside", 18, 0xff);
    bad("string area not UTF-8", 472, 0xff);
    let mut longer = good.clone();
    longer.extend_from_slice(&[0; 4]);
    cases.push(("longer than totalLen".into(), longer));
    for (name, b) in cases {
        assert!(m.run(Stage::Topology, &b).is_none(), "{}: got output", name);
    }
    // A batch for another stage than the one called.
    assert!(m.run(Stage::TrafficPolicy, &good).is_none());
    // The good batch still works after all that.
    assert!(m.run(Stage::Topology, &good).is_some());
}

#[test]
fn byte_comparisons_agree_with_the_standard_library() {
    // Lengths around the eight-byte words, differences at every position.
    let mut cases: Vec<Vec<u8>> = vec![Vec::new()];
    for n in [1, 7, 8, 9, 15, 16, 17, 27, 40] {
        let base: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
        for k in 0..n {
            let mut v = base.clone();
            v[k] = b'z';
            cases.push(v);
            let mut v = base.clone();
            v[k] = 0x80 | v[k];
            cases.push(v);
        }
        cases.push(base[..n - 1].to_vec());
        cases.push(base);
    }
    for a in &cases {
        for b in &cases {
            assert_eq!(order(a, b), a.cmp(b), "order({:?}, {:?})", a, b);
            assert_eq!(same(a, b), a == b, "same({:?}, {:?})", a, b);
        }
    }
}

#[test]
fn string_area_validation_agrees_with_the_standard_library() {
    let ascii: Vec<u8> = (0..100).map(|i| b' ' + (i % 90) as u8).collect();
    let mut cases = vec![Vec::new(), ascii.clone()];
    for k in [0, 7, 31, 32, 33, 63, 64, 99] {
        let mut v = ascii.clone();
        v[k] = 0xff; // never UTF-8
        cases.push(v);
        let mut v = ascii.clone();
        v.splice(k..k + 1, "é".bytes()); // two bytes of UTF-8
        cases.push(v);
        cases.push(prefix(&"é".repeat(60), k));
    }
    for c in &cases {
        assert_eq!(utf8(c), std::str::from_utf8(c).ok(), "{:?}", c);
    }
}

/// The first n bytes of s, which may split a character.
fn prefix(s: &str, n: usize) -> Vec<u8> {
    s.as_bytes()[..n.min(s.len())].to_vec()
}

#[test]
fn unregistered_stage_gives_no_output() {
    let mut m = Module::new(Handlers { endpoint_selection: Some(golden::endpoint_selection), ..Handlers::default() });
    assert!(m.run(Stage::Topology, &hex(TOPOLOGY_INPUT)).is_none());
    assert!(m.run(Stage::TrafficPolicy, &hex(POLICY_INPUT)).is_none());
    assert!(m.run(Stage::EndpointSelection, &hex(SELECTION_INPUT)).is_some());
}

#[test]
fn sets_are_sorted_and_deduplicated() {
    let cases: Vec<(&str, Vec<usize>, bool, Option<Vec<u32>>)> = vec![
        ("unused is nil", vec![], false, None),
        ("used and empty", vec![], true, Some(vec![])),
        ("sorted", vec![0, 2, 5], false, Some(vec![0, 2, 5])),
        ("unsorted with duplicates", vec![3, 1, 3, 0, 1], false, Some(vec![0, 1, 3])),
    ];
    for (name, add, mark, want) in cases {
        let mut s = Set::new();
        assert!(s.is_nil());
        if mark {
            s.mark_used();
        }
        for i in add {
            s.add(i);
        }
        assert_eq!(s.normalized().map(|v| v.to_vec()), want, "{}", name);
        s.reset();
        assert!(s.is_nil() && s.is_empty(), "{}: reset", name);
    }
}

#[test]
fn selection_weights_sorted_last_wins() {
    let mut r = SelectionResult::default();
    r.set(2, 5);
    r.set(0, 1);
    r.set(2, 7);
    r.set(1, 3);
    r.set(0, 9);
    let w = |index, weight| Weight { index, weight };
    assert_eq!(r.sorted(), [w(0, 9), w(1, 3), w(2, 7)]);
}

#[test]
fn error_messages_are_truncated_at_a_character_boundary() {
    let cases = [
        ("short".to_string(), 5),
        ("x".repeat(MAX_ERROR_LEN), MAX_ERROR_LEN),
        ("x".repeat(2000), MAX_ERROR_LEN),
        ("x".repeat(MAX_ERROR_LEN - 1) + "é", MAX_ERROR_LEN - 1),
    ];
    for (msg, want) in cases {
        let mut w = Writer::new();
        w.reset(Stage::Topology);
        w.error(&msg);
        let b = w.bytes();
        let n = u32::from_le_bytes([b[20], b[21], b[22], b[23]]) as usize;
        assert_eq!(n, want);
        assert_eq!(b.len(), 24 + (n + 3) / 4 * 4);
        assert_eq!(&b[24..24 + n], &msg.as_bytes()[..n]);
    }
}

#[test]
fn metadata_json() {
    const M: Metadata = Metadata {
        name: "prefer-local",
        version: "0.1.0",
        stages: &[Stage::TrafficPolicy, Stage::EndpointSelection],
        min_host_version: "0.1.0",
        description: "say \"hi\"\\\n",
    };
    const _: () = M.check();
    const J: [u8; M.json_len()] = M.json();
    assert_eq!(
        std::str::from_utf8(&J).unwrap(),
        r#"{"name":"prefer-local","version":"0.1.0","abi":1,"stages":["traffic-policy","endpoint-selection"],"minHostVersion":"0.1.0","description":"say \"hi\"\\\u000a"}"#
    );
    assert!(M.implements(Stage::TrafficPolicy) && !M.implements(Stage::Topology));

    const BARE: Metadata = Metadata {
        name: "t",
        version: "v1.0.0",
        stages: &[Stage::Topology],
        min_host_version: "",
        description: "",
    };
    const B: [u8; BARE.json_len()] = BARE.json();
    assert_eq!(
        std::str::from_utf8(&B).unwrap(),
        r#"{"name":"t","version":"v1.0.0","abi":1,"stages":["topology"]}"#
    );
}

/// The compile-time checks accept and reject what abi/metadata does.
#[test]
fn metadata_validators() {
    let (label, semver) = validators();
    let long = "a".repeat(63);
    let too_long = "a".repeat(64);
    for (s, want) in [
        ("topology", true),
        ("a", true),
        ("a-1", true),
        ("0", true),
        (long.as_str(), true),
        (too_long.as_str(), false),
        ("", false),
        ("-a", false),
        ("a-", false),
        ("A", false),
        ("a_b", false),
        ("a.b", false),
    ] {
        assert_eq!(label(s), want, "label {:?}", s);
    }
    for (s, want) in [
        ("1.0.0", true),
        ("v0.1.0", true),
        ("10.20.30", true),
        ("1.0.0-rc.1", true),
        ("1.0.0+build.5", true),
        ("1.0.0-alpha-1+x.y", true),
        ("", false),
        ("1", false),
        ("1.0", false),
        ("01.0.0", false),
        ("1.00.0", false),
        ("1.0.0-", false),
        ("1.0.0+", false),
        ("1.0.0 ", false),
        ("V1.0.0", false),
        ("1.0.0-a_b", false),
    ] {
        assert_eq!(semver(s), want, "semver {:?}", s);
    }
}

#[test]
fn stage_names() {
    let got: Vec<_> = Stage::ALL.iter().map(|s| (s.name(), s.export(), *s as u8)).collect();
    assert_eq!(
        got,
        [
            ("topology", "wasp_topology", 1),
            ("traffic-policy", "wasp_traffic_policy", 2),
            ("endpoint-selection", "wasp_endpoint_selection", 3)
        ]
    );
    for s in Stage::ALL {
        assert_eq!(Stage::from_u8(s as u8), Some(s));
    }
    assert_eq!(Stage::from_u8(0), None);
}

#[test]
fn configure_without_handler_accepts_only_no_configuration() {
    let m = Module::new(Handlers { endpoint_selection: Some(golden::endpoint_selection), ..Handlers::default() });
    for ok in [&b""[..], b" null ", b"{}", b"{ \n }"] {
        assert_eq!(m.configure(ok), Ok(()), "{:?}", std::str::from_utf8(ok));
    }
    for bad in [&b"{\"zones\":[]}"[..], b"[]", b"nullx", b"{}}"] {
        let err = m.configure(bad).expect_err(std::str::from_utf8(bad).unwrap());
        assert!(err.message().contains("takes no configuration"), "{}", err);
    }
}

#[test]
fn configure_runs_the_handler() {
    let m = Module::new(GOLDEN_CONFIGURED);
    assert_eq!(m.configure(b"{\"zones\":[]}"), Ok(()));
    assert_eq!(m.configure(b"{\"reject\":1}").unwrap_err().message(), "rejected on purpose (12 bytes)");
}

const GOLDEN_CONFIGURED: Handlers = Handlers { configure: Some(golden::configure), ..GOLDEN };
