//! Differential fuzzing of SLUB against the model in `slub::testing`
//! (feature `testing`): three caches (24, 200, 3000 B) and a kmalloc over a
//! buddy, allocations and frees (single and bulk: `alloc_bulk`,
//! `free_bulk` with detached freelists per slab; frees on other CPUs than
//! the allocation: remote frees; kfree without the size; some in interrupt
//! handlers),
//! flushes of the local CPU and of remote CPUs, and shrinks, across
//! simulated CPUs, on the pinned platform (lockless fast paths) and the
//! locked one (PREEMPT_RT). After every operation: no overlap, alignment,
//! contents preserved, ksize covers the request, every cache's invariants
//! (lists, counts, the frozen rule); at the end every cache is destroyed
//! cleanly and every page is back in the buddy.
//!
//! Bad input is mixed in (`Bad`: double, ABA, foreign, interior,
//! wrong-cache and bad bulk frees, see `slub::testing::Op::Bad`): each
//! must be refused with an error and leave the model and every cache's
//! invariants intact.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use local_lock::test_platform::TestPlatform;
use slub::testing::{run_machine, Op, CPUS};

#[derive(Arbitrary, Debug)]
struct Input {
    locked: bool,
    ops: Vec<FuzzOp>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum FuzzOp {
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
            FuzzOp::KmallocBad { which, zero, cpu: k } => Op::KmallocBad {
                which: which as usize,
                zero,
                cpu: cpu(k),
            },
        }
    }
}

fuzz_target!(|input: Input| {
    if input.ops.len() > 2000 {
        return;
    }
    let ops: Vec<Op> = input.ops.iter().map(|&o| o.into()).collect();
    let p = if input.locked {
        TestPlatform::locked(CPUS)
    } else {
        TestPlatform::pinned(CPUS)
    };
    run_machine(&ops, p);
});
