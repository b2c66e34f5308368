//! Differential fuzzing of the buddy allocator against the reference model
//! in `buddy::testing` (feature `invariants`): every operation is applied to
//! both, then the free lists are compared block by block with the model's
//! canonical decomposition, allocation outcomes (zone, failure) with the
//! model's prediction, contents and owner words with what was written, and
//! the invariant checker runs. Bad input (the bad-input mode of the
//! harness: foreign, misaligned, interior, wrong-order, huge-order, double,
//! ABA and duplicate-in-bulk frees, frees of blocks tagged as on a per-CPU
//! list, regions added twice or overlapping) goes through the `try_`
//! variants (the fuzzer aborts on panics) and must be rejected with the
//! predicted error and no change the model does not predict.
#![no_main]

use arbitrary::Arbitrary;
use buddy::testing::{Harness, Op, Setup};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    page_shift: u8,
    max_order: u8,
    two_zones: bool,
    min_free_pct: u8,
    reserve_ratio: u8,
    ops: Vec<FuzzOp>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum FuzzOp {
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
        }
    }
}

fuzz_target!(|input: Input| {
    let mut h = Harness::new(Setup {
        page_shift: input.page_shift,
        max_order: input.max_order,
        two_zones: input.two_zones,
        min_free_pct: input.min_free_pct % 21,
        reserve_ratio: input.reserve_ratio,
    });
    for &op in input.ops.iter().take(512) {
        h.apply(&op.into());
    }
    h.finish();
});
