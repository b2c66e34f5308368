//! Instruction counts of the page path (issue #22), for callgrind: rounds
//! of "allocate N order-0 pages, then free them", as the `pages` table
//! does, on one allocator:
//!
//! ```sh
//! cargo build --release -p mm-bench --example page_count
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/page_count buddy 1024 20
//! ```
//!
//! Run it twice with different round counts: the difference of the totals
//! over the difference of the pages (`N * rounds`) is the cost of one page
//! (alloc + free), without the start-up; `callgrind_annotate --inclusive=yes`
//! on a kept output file gives `alloc_phase` and `free_phase` apart. Allocators: `buddy`
//! (`Buddy<Kernel<UserHooks>>` directly), `buddy-shared` (the same, over
//! an arena a pcp has churned N pages on first and still holds pages of,
//! as in the `pages` table, whose buddy row shares its arena with the pcp
//! rows: the buddy's small blocks are fragments, so a small N splits and
//! merges little), `pcp-irqsafe`, `pcp-taskonly`,
//! `pcp-trylock`, `pcp-perthread` (pcp over that buddy), `bsa` (`buddy_system_allocator`),
//! `rpmalloc`. With `PAGE_COUNT_TIME=1` it prints the run's ns per page
//! (wall clock over all rounds, no clock read per phase); adding
//! `PAGE_COUNT_RDTSC=1` reads the TSC around each phase as the `pages`
//! table does, to see what the per-phase clock reads cost an allocator.
//! The first round is not timed apart: it warms the
//! allocator up (run both lengths with at least one round more than the
//! shorter one's).

use std::hint::black_box;
use std::ptr::NonNull;

use mm_bench::tables::pages::{
    kernel_pcp, per_thread_pcp, Arena, BsaPages, BuddyPages, Global, PageAlloc, ARENA_BYTES,
};
use pcp::Policy;

/// The alloc phase of a round, out of line so callgrind's inclusive cost
/// of `alloc_phase` and `free_phase` gives the two sides apart
/// (`callgrind_annotate --inclusive=yes`).
#[inline(never)]
fn alloc_phase<A: PageAlloc>(a: &A, n: usize, v: &mut Vec<NonNull<u8>>) {
    for _ in 0..n {
        v.push(black_box(a.alloc(0)));
    }
}

/// The free phase of a round (see [`alloc_phase`]).
#[inline(never)]
fn free_phase<A: PageAlloc>(a: &A, v: &mut Vec<NonNull<u8>>) {
    for p in v.drain(..) {
        // SAFETY: allocated by `alloc_phase` with order 0, freed once.
        unsafe { a.free(p, 0) };
    }
}

fn churn<A: PageAlloc>(a: &A, n: usize, rounds: usize) {
    let mut v: Vec<NonNull<u8>> = Vec::with_capacity(n);
    let t0 = std::time::Instant::now();
    let stamps = std::env::var_os("PAGE_COUNT_RDTSC").is_some();
    let mut ticks = 0u64;
    for _ in 0..rounds {
        if stamps {
            let t0 = mm_bench::measure::tsc().unwrap_or(0);
            alloc_phase(a, n, &mut v);
            let t1 = mm_bench::measure::tsc().unwrap_or(0);
            free_phase(a, &mut v);
            let t2 = mm_bench::measure::tsc().unwrap_or(0);
            ticks = ticks.wrapping_add(t2.wrapping_sub(t1) + t1.wrapping_sub(t0));
        } else {
            alloc_phase(a, n, &mut v);
            free_phase(a, &mut v);
        }
    }
    black_box(ticks);
    if std::env::var_os("PAGE_COUNT_TIME").is_some() {
        let ns = t0.elapsed().as_nanos() as f64 / (n * rounds) as f64;
        println!("{ns:.2} ns/page");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: page_count ALLOCATOR N ROUNDS");
        std::process::exit(2);
    }
    let n: usize = args[2].parse().expect("N");
    let rounds: usize = args[3].parse().expect("ROUNDS");
    match args[1].as_str() {
        "buddy" => churn(&BuddyPages(Arena::new(ARENA_BYTES, true)), n, rounds),
        "buddy-shared" => {
            let arena = Arena::new(ARENA_BYTES, true);
            let pcp = kernel_pcp(&arena, Policy::IrqSafe);
            // PAGE_COUNT_PRECHURN=M: the pcp churns M pages first instead
            // of N (the table's pcp rows reach N = 16384).
            let pre = std::env::var("PAGE_COUNT_PRECHURN")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(n);
            churn(&pcp, pre, 2);
            churn(&BuddyPages(arena.clone()), n, rounds);
            drop(pcp);
        }
        "pcp-irqsafe" => churn(
            &kernel_pcp(&Arena::new(ARENA_BYTES, true), Policy::IrqSafe),
            n,
            rounds,
        ),
        "pcp-taskonly" => churn(
            &kernel_pcp(&Arena::new(ARENA_BYTES, true), Policy::TaskOnly),
            n,
            rounds,
        ),
        "pcp-trylock" => churn(
            &kernel_pcp(&Arena::new(ARENA_BYTES, true), Policy::Trylock),
            n,
            rounds,
        ),
        "pcp-perthread" => churn(
            &per_thread_pcp(&Arena::new(ARENA_BYTES, true), Policy::IrqSafe),
            n,
            rounds,
        ),
        "bsa" => churn(&BsaPages::new(ARENA_BYTES), n, rounds),
        "rpmalloc" => churn(&Global(rpmalloc::RpMalloc), n, rounds),
        other => {
            eprintln!("page_count: unknown allocator {other}");
            std::process::exit(2);
        }
    }
}
