//! The registry of tables the runner can reproduce.
//!
//! # Adding a table
//!
//! 1. Write `src/tables/NAME.rs` with a unit struct implementing [`Table`]:
//!    `run` builds its competitors as [`Case`](crate::measure::Case)s (one
//!    per row; give each its section, and the seed's figure where the seed
//!    quotes one) and returns `cx.report(NAME, TITLE, cases)`, which measures
//!    them interleaved and files the medians into a
//!    [`Report`](crate::measure::Report). `Case::op(name, || op())` loops a
//!    closure; `Case::raw` takes the loop (and the thread index) itself;
//!    `Case::custom` times itself with `Stopwatch`es when part of each batch
//!    must stay untimed (freeing what was allocated). `.threads(2)` runs a
//!    case on two pinned CPUs, with the two-CPU check printed beside it.
//! 2. Add `pub mod NAME;` below and `&NAME::TheStruct` to [`TABLES`].
//!
//! The runner then lists it (`--list`), runs it (`--table NAME`, or with all
//! others by default), prints it and writes `target/mm-bench/NAME.{csv,jsonl}`.
//! A table must honour the run's mode only through the shared
//! [`Config`](crate::measure::Config) (batch length, rounds, and
//! [`Config::sweep`](crate::measure::Config::sweep) for its sizes and N
//! values: quick, default, `--full`), so that `--quick` stays a few seconds
//! and the default run about three minutes for the whole runner. Its
//! targets go into [`Report::verdicts`](crate::measure::Report::verdicts)
//! ([`Verdict`](crate::measure::Verdict)), which the run's summary,
//! `index.html` and `history.jsonl` collect; a floor row is marked with
//! [`Case::floor`](crate::measure::Case::floor).

use crate::measure::{Ctx, Report};

pub mod malloc_programs;
pub mod memory_return;
pub mod pages;
pub mod percpu;
pub mod primitives;
pub mod slub;
pub mod slub_debug;
pub mod zeroed;

/// One reproducible table.
pub trait Table: Sync {
    /// Registry name, used by `--table` and for the output files
    /// (lowercase, no spaces).
    fn name(&self) -> &'static str;

    /// One line for `--list`: what it measures and which seed it reproduces.
    fn about(&self) -> &'static str;

    /// Whether a run without `--table` includes it (`--full` and
    /// `--quick` run every table): false for tables that take minutes.
    fn in_default_run(&self) -> bool {
        true
    }

    /// Measures the table.
    fn run(&self, cx: &Ctx<'_>) -> Report;
}

/// Every table, in the order the runner runs them.
pub static TABLES: &[&dyn Table] = &[
    &primitives::Primitives,
    &pages::Pages,
    &pages::Pages2t,
    &pages::Orders,
    &zeroed::Zeroed,
    &percpu::Percpu,
    &percpu::PercpuHalfFull,
    &percpu::PercpuAlign,
    &slub::SlubPairs,
    &slub::SlubBatch,
    &slub::Slub2t,
    &slub::SlubProdCons,
    &slub::SlubLarson,
    &slub::SlubThreads,
    &slub_debug::SlubDebug,
    &memory_return::MemoryReturn,
    &malloc_programs::MallocPrograms,
];

/// The runner's hidden child modes (the tables that run each allocator in
/// a child process: `slub-larson`, `slub-threads`, `memory-return`);
/// `None` when the arguments are not a child's.
pub fn child_main() -> Option<std::process::ExitCode> {
    slub::child_main().or_else(memory_return::memory_return_child_main)
}

/// The table called `name`.
pub fn find(name: &str) -> Option<&'static dyn Table> {
    TABLES.iter().copied().find(|t| t.name() == name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_unique_and_findable() {
        let mut names: Vec<_> = super::TABLES.iter().map(|t| t.name()).collect();
        for n in &names {
            assert_eq!(super::find(n).map(|t| t.name()), Some(*n));
            assert!(!n.contains(char::is_whitespace));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), super::TABLES.len());
    }
}
