//! The hardened sheaf free right after the program wrote the object, in a
//! tight loop (`cargo run --release -p mm-bench --example free_after_write`):
//! GlobalSlub without options against the default (`HARDENED`), 64 B
//! pairs, the object written between the allocation and the free in four
//! ways (not at all, one byte at offset 0, one word at 0, one word at 56).
//! The free reads the object's free-marker word: a word load right after a
//! narrower store to it cannot be forwarded from the store buffer, which is
//! why the marker's first byte is checked first (see `marked_free` in
//! `crates/slub/src/cache/sheaf.rs`). Medians of 31 interleaved rounds of
//! 2M pairs; pin it (`taskset -c 1`) on a quiet machine.

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::time::Instant;

use slub::{GlobalSlub, SlabFlags};

static DEFAULT: GlobalSlub = GlobalSlub::new();
static PLAIN: GlobalSlub = GlobalSlub::with_flags(SlabFlags::NONE);
/// `n` pairs on `h`, the object written as `mode` says; ns per pair.
fn run(h: &GlobalSlub, l: Layout, mode: u32, n: usize) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        // SAFETY: a non-zero layout; each object written within its 64
        // bytes and freed once with the same layout.
        unsafe {
            let p = black_box(h.alloc(l));
            match mode {
                1 => black_box(p).write(1),
                2 => (black_box(p) as *mut u64).write(1),
                3 => (black_box(p).add(56) as *mut u64).write(1),
                _ => {}
            }
            h.dealloc(p, l);
        }
    }
    t.elapsed().as_secs_f64() * 1e9 / n as f64
}
/// What the program writes between the allocation and the free.
const WRITES: [&str; 4] = [
    "nothing",
    "one byte at offset 0",
    "one word at offset 0",
    "one word at offset 56",
];

/// The median of `v`.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let l = Layout::from_size_align(64, 8).expect("layout");
    let n = 2_000_000;
    let mut plain: Vec<Vec<f64>> = vec![vec![]; WRITES.len()];
    let mut hardened: Vec<Vec<f64>> = vec![vec![]; WRITES.len()];
    for _ in 0..31 {
        for mode in 0..WRITES.len() {
            plain[mode].push(run(&PLAIN, l, mode as u32, n));
            hardened[mode].push(run(&DEFAULT, l, mode as u32, n));
        }
    }
    println!("64 B alloc + free, the object written before the free (medians of 31 rounds)");
    for (mode, w) in WRITES.iter().enumerate() {
        let (a, b) = (median(plain[mode].clone()), median(hardened[mode].clone()));
        println!(
            "  {w:<22} no options {a:6.2} ns   HARDENED {b:6.2} ns   {:+6.1}%",
            (b / a - 1.0) * 100.0
        );
    }
}
