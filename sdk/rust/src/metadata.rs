//! Module metadata (docs/abi.md §2.5), built and checked at compile time.

use crate::types::{Stage, ABI_VERSION};

/// What a module declares about itself. The [`module!`](crate::module)
/// macro writes it as JSON into the module's `wasp.metadata` custom section,
/// where the host reads it before compiling the module.
///
/// Every method is a `const fn`, so a module with invalid metadata does not
/// compile: [`check`](Metadata::check) panics at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// Identifies the module: a DNS-1123 label such as `"prefer-local"`.
    pub name: &'static str,
    /// The module's semantic version, such as `"0.1.0"` (an optional
    /// leading `v` is allowed).
    pub version: &'static str,
    /// The stages the module implements, each at most once, at least one.
    pub stages: &'static [Stage],
    /// The oldest wasp version the module works with; `""` for none.
    pub min_host_version: &'static str,
    /// What the module does, for `wasp module inspect`; `""` for none.
    pub description: &'static str,
}

impl Metadata {
    /// Panics (at compile time, when evaluated in a constant) with the
    /// first problem of the metadata, naming its field as the host would.
    pub const fn check(&self) {
        if !is_dns1123_label(self.name) {
            panic!("metadata.name: not a DNS-1123 label");
        }
        if !is_semver(self.version) {
            panic!("metadata.version: not a semantic version");
        }
        if self.stages.is_empty() {
            panic!("metadata.stages: at least one stage is required");
        }
        let mut i = 0;
        while i < self.stages.len() {
            let mut j = 0;
            while j < i {
                if self.stages[j] as u8 == self.stages[i] as u8 {
                    panic!("metadata.stages: duplicate stage");
                }
                j += 1;
            }
            i += 1;
        }
        if !self.min_host_version.is_empty() && !is_semver(self.min_host_version) {
            panic!("metadata.minHostVersion: not a semantic version");
        }
    }

    /// Whether the module declares `stage`.
    pub const fn implements(&self, stage: Stage) -> bool {
        let mut i = 0;
        while i < self.stages.len() {
            if self.stages[i] as u8 == stage as u8 {
                return true;
            }
            i += 1;
        }
        false
    }

    /// The length of [`json`](Metadata::json).
    pub const fn json_len(&self) -> usize {
        Json { buf: [0; 0], n: 0, write: false }.metadata(self).n
    }

    /// The section payload: compact JSON, fields in the order of the
    /// specification, the optional ones left out when empty. `N` must be
    /// [`json_len`](Metadata::json_len).
    pub const fn json<const N: usize>(&self) -> [u8; N] {
        let w = Json { buf: [0; N], n: 0, write: true }.metadata(self);
        if w.n != N {
            panic!("wasp: Metadata::json: N is not json_len()");
        }
        w.buf
    }
}

/// A JSON writer usable in constants: with write false it only counts.
/// Its methods take and return it by value, as constant functions cannot
/// take mutable references.
struct Json<const N: usize> {
    buf: [u8; N],
    n: usize,
    write: bool,
}

impl<const N: usize> Json<N> {
    const fn byte(mut self, c: u8) -> Self {
        if self.write {
            self.buf[self.n] = c;
        }
        self.n += 1;
        self
    }

    const fn raw(mut self, s: &str) -> Self {
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            self = self.byte(b[i]);
            i += 1;
        }
        self
    }

    /// Writes s as a JSON string: quotes, backslashes and control
    /// characters escaped, everything else (UTF-8 included) as is.
    const fn string(mut self, s: &str) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        self = self.byte(b'"');
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if c == b'"' || c == b'\\' {
                self = self.byte(b'\\').byte(c);
            } else if c < 0x20 {
                self = self.raw("\\u00").byte(HEX[(c >> 4) as usize]).byte(HEX[(c & 15) as usize]);
            } else {
                self = self.byte(c);
            }
            i += 1;
        }
        self.byte(b'"')
    }

    const fn metadata(mut self, m: &Metadata) -> Self {
        self = self.raw("{\"name\":").string(m.name);
        self = self.raw(",\"version\":").string(m.version);
        self = self.raw(",\"abi\":").byte(b'0' + ABI_VERSION as u8);
        self = self.raw(",\"stages\":[");
        let mut i = 0;
        while i < m.stages.len() {
            if i > 0 {
                self = self.byte(b',');
            }
            self = self.string(m.stages[i].name());
            i += 1;
        }
        self = self.byte(b']');
        if !m.min_host_version.is_empty() {
            self = self.raw(",\"minHostVersion\":").string(m.min_host_version);
        }
        if !m.description.is_empty() {
            self = self.raw(",\"description\":").string(m.description);
        }
        self.byte(b'}')
    }
}

/// `^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`
const fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 63 || b[0] == b'-' || b[b.len() - 1] == b'-' {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-') {
            return false;
        }
        i += 1;
    }
    true
}

/// `^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`
const fn is_semver(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && b[i] == b'v' {
        i += 1;
    }
    let mut part = 0;
    while part < 3 {
        if part > 0 {
            if i >= b.len() || b[i] != b'.' {
                return false;
            }
            i += 1;
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start || (b[start] == b'0' && i - start > 1) {
            return false;
        }
        part += 1;
    }
    if i < b.len() && b[i] == b'-' {
        i = ident_run(b, i + 1);
        if i == 0 {
            return false;
        }
    }
    if i < b.len() && b[i] == b'+' {
        i = ident_run(b, i + 1);
        if i == 0 {
            return false;
        }
    }
    i == b.len()
}

/// The end of a non-empty run of `[0-9A-Za-z.-]` starting at i, 0 if empty.
const fn ident_run(b: &[u8], start: usize) -> usize {
    let mut i = start;
    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'-') {
        i += 1;
    }
    if i == start {
        0
    } else {
        i
    }
}

#[cfg(test)]
pub(crate) fn validators() -> (fn(&str) -> bool, fn(&str) -> bool) {
    (is_dns1123_label, is_semver)
}
