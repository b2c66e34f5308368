//! Instruction counts of the `orders` table's pair (issue #22): one
//! allocation and one free of an order-`o` block from an otherwise free
//! arena, for callgrind:
//!
//! ```sh
//! cargo build --release -p mm-bench --example order_count
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/order_count buddy 10 2001
//! ```
//!
//! Run it twice with different counts: the difference of the totals over
//! the difference of the counts is the cost of one pair, without the
//! start-up. Allocators: `buddy` (`Buddy<Kernel<UserHooks>>` directly, as
//! the table's `buddy` row), `bsa` (`buddy_system_allocator`). ORDER: 0..=10.
//! A separate example from `page_count`: more instances of the buddy's
//! paths there changed what LLVM inlined into its counted loops.

use std::hint::black_box;

use mm_bench::tables::pages::{Arena, BsaPages, BuddyPages, PageAlloc, ARENA_BYTES};

/// `n` pairs of order `o`, out of line (its inclusive cost in
/// `callgrind_annotate --inclusive=yes`). The order is not a constant, as
/// in the table's cases (a closure capturing it).
#[inline(never)]
fn pairs<A: PageAlloc>(a: &A, o: u8, n: usize) {
    for _ in 0..n {
        let p = black_box(a.alloc(o));
        // SAFETY: allocated just above with order `o`, freed once.
        unsafe { a.free(p, o) };
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: order_count ALLOCATOR ORDER COUNT");
        std::process::exit(2);
    }
    let o: u8 = args[2].parse().expect("ORDER");
    let n: usize = args[3].parse().expect("COUNT");
    match args[1].as_str() {
        "buddy" => pairs(&BuddyPages(Arena::new(ARENA_BYTES, true)), black_box(o), n),
        "bsa" => pairs(&BsaPages::new(ARENA_BYTES), black_box(o), n),
        other => {
            eprintln!("order_count: unknown allocator {other}");
            std::process::exit(2);
        }
    }
}
