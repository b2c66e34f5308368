//! `mm-bench`: the seed-table runner of the allocator family and the
//! measurement machinery shared with its criterion benches.
//!
//! * [`measure`]: warm-up, interleaved rounds, medians and spread, ns and TSC
//!   cycles per operation, CPU pinning, the two-CPU check, the report printer
//!   (text, CSV, JSON lines), the verdicts and the noise checks.
//! * [`summary`]: the run's verdict summary, `history.jsonl` and
//!   `--compare`.
//! * [`charts`]: every table as an SVG chart and `index.html`.
//! * [`tables`]: the registry of tables ([`tables::Table`]) and the tables
//!   themselves (`primitives`: seed 000's `time_bench` list).
//! * [`area_map`]: the pre-4.14 percpu area-map allocator, the baseline of
//!   the `percpu` tables (seed 002).
//! * [`user_kernel`]: a user-space `KernelHooks` so the kernel (pinned) code
//!   paths run and can be measured here.
//!
//! The binary (`cargo run --release -p mm-bench -- --help`) parses the
//! command line and runs the tables.

pub mod area_map;
pub mod charts;
pub mod measure;
pub mod summary;
pub mod tables;
pub mod user_kernel;

/// The README's Rust code blocks, compiled and run as doctests of this
/// crate (it depends on every library crate with `std`), so the examples a
/// new user copies cannot drift from the code: `cargo test --workspace`
/// (ci/test.sh) runs them.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
