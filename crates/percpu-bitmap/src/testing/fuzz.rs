//! The cargo-fuzz target's input (feature `arbitrary`): [`Input`] and
//! [`FuzzOp`], which `arbitrary` derives from the fuzzer's bytes, mapped to
//! this module's parent [`Setup`] and [`Op`]s. Here, next to `Op`, so the
//! two cannot drift; `fuzz/fuzz_targets/percpu.rs` only runs them.

use std::vec::Vec;

use arbitrary::Arbitrary;

use super::{Op, Setup};
use crate::types::{MAX_ALLOC_SIZE, PAGE_SIZE};

/// One fuzz input: the geometry (units, unit size, first chunk with
/// static/reserved/dynamic regions or none), the page budget and the
/// operations.
#[allow(missing_docs)]
#[derive(Arbitrary, Debug)]
pub struct Input {
    pub units: u8,
    pub big_units: bool,
    pub first: Option<(u16, u16, u16)>,
    pub page_budget: u16,
    pub ops: Vec<FuzzOp>,
}

impl Input {
    /// The setup: 1 to 4 units of 32 or 64 KiB, a first chunk (static
    /// below 4 KiB, reserved below 8 KiB, dynamic 4 B to 8 KiB) or none, a
    /// budget of 64 to 575 pages.
    pub fn setup(&self) -> Setup {
        Setup {
            units: 1 + (self.units % 4) as usize,
            unit_size: if self.big_units { 64 << 10 } else { 32 << 10 },
            first_chunk: self
                .first
                .map(|(s, r, d)| (s as usize % 4096, r as usize % 8192, 4 + d as usize % 8192)),
            page_limit: Some(64 + self.page_budget as usize % 512),
        }
    }
}

/// An operation as the fuzzer draws it: the [`Op`] of the same meaning
/// with narrow fields; `From` maps it into range.
#[allow(missing_docs)]
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum FuzzOp {
    Alloc {
        size: u16,
        align_shift: u8,
        atomic: bool,
        reserved: bool,
    },
    Free {
        idx: u16,
    },
    FreeInside {
        idx: u16,
        delta: u16,
    },
    FreeAgain,
    FreeStale {
        idx: u16,
    },
    FreeForeign {
        kind: u8,
    },
    FreeStatic,
    AllocBad {
        size: u64,
        align: u64,
        huge: bool,
    },
    Balance,
    Interrupt {
        size: u8,
    },
}

impl From<FuzzOp> for Op {
    fn from(op: FuzzOp) -> Op {
        match op {
            FuzzOp::Alloc {
                size,
                align_shift,
                atomic,
                reserved,
            } => Op::Alloc {
                size: size as usize,
                align_shift: (align_shift % 16) as u32,
                atomic,
                reserved,
            },
            FuzzOp::Free { idx } => Op::Free(idx as usize),
            FuzzOp::FreeInside { idx, delta } => Op::FreeInterior(idx as usize, delta as usize),
            FuzzOp::FreeAgain => Op::DoubleFree,
            FuzzOp::FreeStale { idx } => Op::FreeStale(idx as usize),
            FuzzOp::FreeForeign { kind } => Op::FreeForeign(kind),
            FuzzOp::FreeStatic => Op::FreeStatic,
            FuzzOp::AllocBad { size, align, huge } => {
                // Huge sizes (beyond the largest request) or alignments no
                // area can have (0, not a power of two, above a page).
                let (size, align) = if huge {
                    (
                        MAX_ALLOC_SIZE + 1 + (size as usize % (usize::MAX - MAX_ALLOC_SIZE)),
                        1usize << (align % 13),
                    )
                } else {
                    let a = align as usize;
                    let a = if a.is_power_of_two() && a <= PAGE_SIZE {
                        a.wrapping_mul(3)
                    } else {
                        a
                    };
                    (1 + size as usize % MAX_ALLOC_SIZE, a)
                };
                Op::AllocBad { size, align }
            }
            FuzzOp::Balance => Op::Balance,
            FuzzOp::Interrupt { size } => Op::Interrupt {
                size: 1 + size as usize,
            },
        }
    }
}
