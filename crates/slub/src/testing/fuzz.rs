//! The cargo-fuzz target's input (feature `arbitrary`): [`Input`] and
//! [`FuzzOp`], which `arbitrary` derives from the fuzzer's bytes, mapped to
//! this module's parent [`Op`]s. Here, next to `Op`, so the two cannot drift;
//! `fuzz/fuzz_targets/slub.rs` only runs them.

use std::vec::Vec;

use arbitrary::Arbitrary;

use super::{Op, CPUS};

/// One fuzz input: the setup and the operations.
#[allow(missing_docs)]
#[derive(Arbitrary, Debug)]
pub struct Input {
    pub locked: bool,
    pub ops: Vec<FuzzOp>,
}

/// An operation as the fuzzer draws it: the [`Op`] variant of the same
/// name with narrow fields; `From` maps it into range.
#[allow(missing_docs)]
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum FuzzOp {
    Alloc { c: u8, cpu: u8, irq: bool },
    Kmalloc { size: u16, cpu: u8, irq: bool },
    Free { i: u16, cpu: u8, irq: bool },
    Flush { cpu: u8 },
    FlushRemote { cpu: u8, from: u8 },
    Shrink { c: u8 },
    AllocBulk { c: u8, n: u8, cpu: u8 },
    FreeBulk { c: u8, n: u8, cpu: u8 },
    Bad { kind: u8, i: u16, cpu: u8 },
    KmallocBad { which: u8, zero: bool, cpu: u8 },
}

impl From<FuzzOp> for Op {
    fn from(o: FuzzOp) -> Op {
        let cpu = |c: u8| c as usize % CPUS;
        match o {
            FuzzOp::Alloc { c, cpu: k, irq } => Op::Alloc {
                c: c as usize,
                cpu: cpu(k),
                irq,
            },
            FuzzOp::Kmalloc { size, cpu: k, irq } => Op::Kmalloc {
                size: size as usize,
                cpu: cpu(k),
                irq,
            },
            FuzzOp::Free { i, cpu: k, irq } => Op::Free {
                i: i as usize,
                cpu: cpu(k),
                irq,
            },
            FuzzOp::Flush { cpu: k } => Op::Flush { cpu: cpu(k) },
            FuzzOp::FlushRemote { cpu: k, from } => Op::FlushRemote {
                cpu: cpu(k),
                from: cpu(from),
            },
            FuzzOp::Shrink { c } => Op::Shrink { c: c as usize },
            FuzzOp::AllocBulk { c, n, cpu: k } => Op::AllocBulk {
                c: c as usize,
                n: n as usize,
                cpu: cpu(k),
            },
            FuzzOp::FreeBulk { c, n, cpu: k } => Op::FreeBulk {
                c: c as usize,
                n: n as usize,
                cpu: cpu(k),
            },
            FuzzOp::Bad { kind, i, cpu: k } => Op::Bad {
                kind: kind as usize,
                i: i as usize,
                cpu: cpu(k),
            },
            FuzzOp::KmallocBad {
                which,
                zero,
                cpu: k,
            } => Op::KmallocBad {
                which: which as usize,
                zero,
                cpu: cpu(k),
            },
        }
    }
}
