//! The cargo-fuzz target's input (feature `arbitrary`): [`Input`] and
//! [`FuzzOp`], which `arbitrary` derives from the fuzzer's bytes, mapped to
//! this module's parent [`Op`]s. Here, next to `Op`, so the two cannot drift;
//! `fuzz/fuzz_targets/pcp.rs` only runs them.

use std::vec::Vec;

use arbitrary::Arbitrary;

use super::{Op, CPUS};

/// One fuzz input: the setup and the operations.
///
/// ```
/// use arbitrary::{Arbitrary, Unstructured};
/// use pcp::testing::fuzz::Input;
/// use pcp::testing::{run_machine, Op};
/// use pcp::Policy;
/// // What `fuzz/fuzz_targets/pcp.rs` does with the fuzzer's bytes.
/// // Odd bytes: each "one more op?" byte says yes until the data runs out.
/// let bytes: Vec<u8> = (0..600u32).map(|i| (i * 37 % 251) as u8 | 1).collect();
/// // (`fuzz_target!` builds its input with `arbitrary_take_rest`.)
/// let input = Input::arbitrary_take_rest(Unstructured::new(&bytes)).unwrap();
/// assert!(!input.ops.is_empty());
/// let policy = [Policy::IrqSafe, Policy::TaskOnly, Policy::Trylock][input.policy as usize % 3];
/// let ops: Vec<Op> = input.ops.iter().take(300).map(|&o| o.into()).collect();
/// run_machine(policy, input.locked, &ops);
/// ```
#[allow(missing_docs)]
#[derive(Arbitrary, Debug)]
pub struct Input {
    pub policy: u8,
    pub locked: bool,
    pub ops: Vec<FuzzOp>,
}

/// An operation as the fuzzer draws it: the [`Op`] variant of the same
/// name with narrow fields; `From` maps it into range.
///
/// ```
/// use pcp::testing::fuzz::FuzzOp;
/// use pcp::testing::{Op, CPUS};
/// // Fields are brought into range: CPUs modulo the harness's CPUS.
/// let op = Op::from(FuzzOp::DrainLocal { cpu: 200 });
/// assert!(matches!(op, Op::DrainLocal { cpu } if cpu < CPUS));
/// ```
#[allow(missing_docs)]
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum FuzzOp {
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
    Purge,
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
    Decay {
        cpu: u8,
        from: u8,
    },
    SetHigh {
        auto: bool,
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
            FuzzOp::Purge => Op::Purge,
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
            FuzzOp::Decay { cpu: c, from } => Op::Decay {
                cpu: cpu(c),
                from: cpu(from),
            },
            FuzzOp::SetHigh { auto } => Op::SetHigh { auto },
        }
    }
}
