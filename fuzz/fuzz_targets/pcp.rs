//! Differential fuzzing of the per-CPU page lists against the model in
//! `pcp::testing` (feature `invariants`): allocations (plain, zeroed,
//! only-zero, cold; orders 0..=4), frees (still-zero, cold), drains,
//! background zeroing and bulk allocation across simulated CPUs and
//! interrupt contexts, under each policy and both local-lock strategies.
//! Bad input (the harness's bad-input mode): double and ABA frees to the
//! pcp and straight to the buddy of a page on a per-CPU list, interior,
//! wrong-order, huge-order and foreign frees, nonsense `set_batch_high`:
//! each must be refused (`Err`), the state intact.
//! After every operation: no overlap, alignment, contents preserved, zeroed
//! reads as zero, every page accounted for, each CPU's list invariants; at
//! the end everything merges back in the buddy.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use pcp::testing::{run_machine, Op, CPUS};
use pcp::Policy;

#[derive(Arbitrary, Debug)]
struct Input {
    policy: u8,
    locked: bool,
    ops: Vec<FuzzOp>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum FuzzOp {
    Alloc {
        cpu: u8,
        order: u8,
        flags: u8,
        irq: bool,
    },
    Free {
        idx: u16,
        zero: bool,
        cold: bool,
        irq: bool,
    },
    DrainLocal {
        cpu: u8,
    },
    DrainAll,
    Prezero {
        cpu: u8,
        budget: u8,
    },
    Bulk {
        cpu: u8,
        n: u8,
    },
    Bad {
        cpu: u8,
        kind: u8,
        idx: u16,
    },
}

impl From<FuzzOp> for Op {
    fn from(op: FuzzOp) -> Op {
        let cpu = |c: u8| c as usize % CPUS;
        match op {
            FuzzOp::Alloc {
                cpu: c,
                order,
                flags,
                irq,
            } => Op::Alloc {
                cpu: cpu(c),
                order: order % 5,
                flags: flags % 8,
                irq,
            },
            FuzzOp::Free {
                idx,
                zero,
                cold,
                irq,
            } => Op::Free {
                idx: idx as usize,
                zero,
                cold,
                irq,
            },
            FuzzOp::DrainLocal { cpu: c } => Op::DrainLocal { cpu: cpu(c) },
            FuzzOp::DrainAll => Op::DrainAll,
            FuzzOp::Prezero { cpu: c, budget } => Op::Prezero {
                cpu: cpu(c),
                budget: budget as usize % 8,
            },
            FuzzOp::Bulk { cpu: c, n } => Op::Bulk {
                cpu: cpu(c),
                n: 1 + n as usize % 16,
            },
            FuzzOp::Bad { cpu: c, kind, idx } => Op::Bad {
                cpu: cpu(c),
                kind,
                idx: idx as usize,
            },
        }
    }
}

fuzz_target!(|input: Input| {
    let policy = match input.policy % 3 {
        0 => Policy::IrqSafe,
        1 => Policy::TaskOnly,
        _ => Policy::Trylock,
    };
    let ops: Vec<Op> = input.ops.iter().take(300).map(|&o| o.into()).collect();
    run_machine(policy, input.locked, &ops);
});
