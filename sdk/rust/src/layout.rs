//! Byte offsets and sizes of ABI v1, mirrored from docs/abi.md §3.

pub const INPUT_MAGIC: u32 = 0x3150_5357; // "WSP1"
pub const OUTPUT_MAGIC: u32 = 0x314F_5357; // "WSO1"
pub const VERSION: u16 = 1;

pub const HEADER_SIZE: usize = 80;
pub const PORT_SIZE: usize = 48;
pub const ENDPOINT_SIZE: usize = 48;
pub const PAIR_SIZE: usize = 16;
pub const STRREF_SIZE: usize = 8;
pub const DECISION_SIZE: usize = 40;
pub const INDEX_SIZE: usize = 4;
pub const OUTPUT_HEADER_SIZE: usize = 16;

/// A set reference's count that marks a nil set (not used), as opposed to
/// an empty one.
pub const NIL_COUNT: u32 = 0xFFFF_FFFF;

pub const STATUS_OK: u32 = 0;
pub const STATUS_ERROR: u32 = 1;

// Input header.
pub const HDR_VERSION: usize = 4;
pub const HDR_STAGE: usize = 6;
pub const HDR_TOTAL_LEN: usize = 8;
pub const HDR_PORT_COUNT: usize = 12;
pub const HDR_PORTS_OFF: usize = 16;
pub const HDR_ENDPOINT_COUNT: usize = 20;
pub const HDR_ENDPOINTS_OFF: usize = 24;
pub const HDR_PAIR_COUNT: usize = 28;
pub const HDR_PAIRS_OFF: usize = 32;
pub const HDR_HINT_COUNT: usize = 36;
pub const HDR_HINTS_OFF: usize = 40;
pub const HDR_DECISIONS_OFF: usize = 44;
pub const HDR_INDEX_COUNT: usize = 48;
pub const HDR_INDICES_OFF: usize = 52;
pub const HDR_STRINGS_OFF: usize = 56;
pub const HDR_STRINGS_LEN: usize = 60;
pub const HDR_NODE_NAME: usize = 64;
pub const HDR_NODE_LABEL_FIRST: usize = 72;
pub const HDR_NODE_LABEL_COUNT: usize = 76;

// Port record.
pub const PORT_NAMESPACE: usize = 0;
pub const PORT_NAME: usize = 8;
pub const PORT_PORT_NAME: usize = 16;
pub const PORT_PROTOCOL: usize = 24;
pub const PORT_FLAGS: usize = 25;
pub const PORT_PORT: usize = 26;
pub const PORT_NODE_PORT: usize = 28;
pub const PORT_ENDPOINT_FIRST: usize = 32;
pub const PORT_ENDPOINT_COUNT: usize = 36;
pub const PORT_ANNOTATION_FIRST: usize = 40;
pub const PORT_ANNOTATION_COUNT: usize = 44;

pub const PORT_FLAG_INTERNAL_POLICY_LOCAL: u8 = 1 << 0;
pub const PORT_FLAG_EXTERNAL_POLICY_LOCAL: u8 = 1 << 1;
pub const PORT_FLAG_EXTERNALLY_ACCESSIBLE: u8 = 1 << 2;
pub const PORT_FLAG_USES_CLUSTER: u8 = 1 << 3;
pub const PORT_FLAG_USES_LOCAL: u8 = 1 << 4;
pub const PORT_FLAG_IPV6: u8 = 1 << 5;

// Endpoint record.
pub const EP_ADDR: usize = 0;
pub const EP_PORT: usize = 16;
pub const EP_FLAGS: usize = 18;
pub const EP_NODE_NAME: usize = 20;
pub const EP_ZONE: usize = 28;
pub const EP_HINT_FIRST: usize = 36;
pub const EP_ZONE_HINT_COUNT: usize = 40;
pub const EP_NODE_HINT_COUNT: usize = 42;

pub const EP_FLAG_READY: u8 = 1 << 0;
pub const EP_FLAG_SERVING: u8 = 1 << 1;
pub const EP_FLAG_TERMINATING: u8 = 1 << 2;
pub const EP_FLAG_LOCAL: u8 = 1 << 3;

// Decision record.
pub const DEC_MODE: usize = 0;
pub const DEC_FLAGS: usize = 1;
pub const DEC_ELIGIBLE: usize = 4;
pub const DEC_CLUSTER: usize = 12;
pub const DEC_LOCAL: usize = 20;
pub const DEC_ALL: usize = 28;

pub const DEC_FLAG_HAS_ANY_ENDPOINTS: u8 = 1 << 0;

// Output header.
pub const OUT_VERSION: usize = 4;
pub const OUT_STAGE: usize = 6;
pub const OUT_COUNT: usize = 8;
pub const OUT_TOTAL_LEN: usize = 12;

/// Reads the little-endian u16 at offset o.
#[inline]
pub fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

/// Reads the little-endian u32 at offset o.
#[inline]
pub fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
