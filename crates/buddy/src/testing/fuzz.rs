//! The cargo-fuzz target's input (feature `arbitrary`): [`Input`] and
//! [`FuzzOp`], which `arbitrary` derives from the fuzzer's bytes, mapped to
//! this module's parent [`Op`]s. Here, next to `Op`, so the two cannot drift;
//! `fuzz/fuzz_targets/buddy.rs` only runs them.

use std::vec::Vec;

use arbitrary::Arbitrary;

use super::Op;

/// One fuzz input: the setup and the operations.
///
/// ```
/// use arbitrary::{Arbitrary, Unstructured};
/// use buddy::testing::fuzz::Input;
/// use buddy::testing::{Harness, Setup};
/// // What `fuzz/fuzz_targets/buddy.rs` does with the fuzzer's bytes.
/// // Odd bytes: each "one more op?" byte says yes until the data runs out.
/// let bytes: Vec<u8> = (0..600u32).map(|i| (i * 37 % 251) as u8 | 1).collect();
/// // (`fuzz_target!` builds its input with `arbitrary_take_rest`.)
/// let input = Input::arbitrary_take_rest(Unstructured::new(&bytes)).unwrap();
/// assert!(!input.ops.is_empty());
/// let mut h = Harness::new(Setup {
///     page_shift: input.page_shift,
///     max_order: input.max_order,
///     two_zones: input.two_zones,
///     min_free_pct: input.min_free_pct % 21,
///     reserve_ratio: input.reserve_ratio,
/// });
/// for &op in input.ops.iter().take(512) {
///     h.apply(&op.into());
/// }
/// assert_eq!(h.ops as usize, input.ops.len().min(512));
/// h.finish();
/// ```
#[allow(missing_docs)]
#[derive(Arbitrary, Debug)]
pub struct Input {
    pub page_shift: u8,
    pub max_order: u8,
    pub two_zones: bool,
    pub min_free_pct: u8,
    pub reserve_ratio: u8,
    pub ops: Vec<FuzzOp>,
}

/// An operation as the fuzzer draws it: the [`Op`] variant of the same
/// name with narrow fields; `From` maps it into range.
///
/// ```
/// use buddy::testing::fuzz::FuzzOp;
/// use buddy::testing::Op;
/// // Fields are brought into range: at most a constraint to zone 1.
/// let op = Op::from(FuzzOp::Alloc { order: 1, flags: 0, zone: 5 });
/// assert!(matches!(op, Op::Alloc { order: 1, flags: 0, zone: 2 }));
/// ```
#[allow(missing_docs)]
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum FuzzOp {
    Alloc {
        order: u8,
        flags: u8,
        zone: u8,
    },
    AllocBulk {
        zone: u8,
        order: u8,
        count: u8,
        flags: u8,
    },
    Free {
        idx: u16,
        zero: bool,
        cold: bool,
    },
    FreeBulk {
        zone: u8,
        count: u8,
        zero: bool,
    },
    OwnerOf {
        idx: u16,
        offset: u32,
    },
    BadFree {
        kind: u8,
        idx: u16,
    },
    AddRegion,
    SetMinFree {
        pct: u8,
    },
    BadAddRegion {
        kind: u8,
        at: u16,
    },
    Purge {
        decay: bool,
        advance: u8,
    },
    FreeRelease {
        idx: u16,
    },
}

impl From<FuzzOp> for Op {
    fn from(op: FuzzOp) -> Op {
        match op {
            FuzzOp::Alloc { order, flags, zone } => Op::Alloc {
                order,
                flags,
                zone: zone % 3,
            },
            FuzzOp::AllocBulk {
                zone,
                order,
                count,
                flags,
            } => Op::AllocBulk {
                zone,
                order,
                count,
                flags,
            },
            FuzzOp::Free { idx, zero, cold } => Op::Free { idx, zero, cold },
            FuzzOp::FreeBulk { zone, count, zero } => Op::FreeBulk {
                zone,
                count: count % 8,
                zero,
            },
            FuzzOp::OwnerOf { idx, offset } => Op::OwnerOf { idx, offset },
            FuzzOp::BadFree { kind, idx } => Op::BadFree { kind, idx },
            FuzzOp::AddRegion => Op::AddRegion,
            FuzzOp::SetMinFree { pct } => Op::SetMinFree { pct },
            FuzzOp::BadAddRegion { kind, at } => Op::BadAddRegion { kind, at },
            FuzzOp::Purge { decay, advance } => Op::Purge { decay, advance },
            FuzzOp::FreeRelease { idx } => Op::FreeRelease { idx },
        }
    }
}
