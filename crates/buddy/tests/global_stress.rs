//! `GlobalBuddy` installed as this test binary's `#[global_allocator]`
//! (so the test harness, threads, channels and formatting all run on it),
//! under multi-threaded stress with content checks: blocks of every size
//! class (sub-page to direct mappings), `alloc_zeroed` reading as zero,
//! `realloc` keeping contents, and blocks freed by other threads.
#![cfg(not(any(miri, loom)))]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::mpsc;
use std::thread;

use buddy::{GlobalBuddy, Stat};

#[global_allocator]
static GLOBAL: GlobalBuddy = GlobalBuddy::new();

const THREADS: usize = 4;
const ROUNDS: usize = 20_000;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A buffer whose every word encodes its seed and index.
struct Tagged {
    v: Vec<u64>,
    seed: u64,
}

impl Tagged {
    fn new(len: usize, seed: u64) -> Tagged {
        Tagged {
            v: (0..len as u64)
                .map(|i| seed ^ i.wrapping_mul(0x9e37))
                .collect(),
            seed,
        }
    }
    fn check(&self) {
        for (i, &w) in self.v.iter().enumerate() {
            assert_eq!(
                w,
                self.seed ^ (i as u64).wrapping_mul(0x9e37),
                "word {i} of {:p}",
                self.v.as_ptr()
            );
        }
    }
}

fn size_class(r: u64) -> usize {
    match r % 100 {
        0..=59 => (r >> 8) as usize % 64 + 1,        // sub-page
        60..=89 => (r >> 8) as usize % 4096 + 64,    // one or a few pages
        90..=98 => (r >> 8) as usize % 65536 + 4096, // up to 64 KiB
        _ => (5 << 17) + (r >> 8) as usize % 4096,   // ~5 MiB: direct mapping
    }
}

#[test]
fn threads_with_content_checks() {
    let (tx, rx) = mpsc::channel::<Tagged>();
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let tx = tx.clone();
            let rx = rx.clone();
            thread::spawn(move || {
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ ((t as u64 + 1) * 0x1000_0001));
                let mut live: Vec<Tagged> = Vec::new();
                for round in 0..ROUNDS {
                    let r = rng.next();
                    match r % 7 {
                        0..=2 => live.push(Tagged::new(size_class(r) / 8 + 1, r)),
                        3 => {
                            // Zeroed allocation (calloc path).
                            let n = size_class(r);
                            let z = vec![0u8; n];
                            assert!(z.iter().all(|&b| b == 0), "vec![0; {n}] not zero");
                            live.push(Tagged::new(n / 8 + 1, r));
                        }
                        4 => {
                            // Growth through realloc keeps the prefix.
                            if let Some(x) = live.last_mut() {
                                let old = x.v.len();
                                let seed = x.seed;
                                x.v.extend(
                                    (old as u64..old as u64 * 2 + 1)
                                        .map(|i| seed ^ i.wrapping_mul(0x9e37)),
                                );
                                x.check();
                            }
                        }
                        5 => {
                            // Hand a block to another thread (remote free).
                            if !live.is_empty() {
                                let x = live.swap_remove((r >> 20) as usize % live.len());
                                tx.send(x).unwrap();
                            }
                        }
                        _ => {
                            if !live.is_empty() {
                                let x = live.swap_remove((r >> 20) as usize % live.len());
                                x.check();
                            }
                        }
                    }
                    if round % 64 == 0 {
                        while let Ok(x) = rx.lock().unwrap().try_recv() {
                            x.check();
                        }
                    }
                    if live.len() > 200 {
                        for x in live.drain(..100) {
                            x.check();
                        }
                    }
                }
                for x in &live {
                    x.check();
                }
            })
        })
        .collect();
    drop(tx);
    for h in handles {
        h.join().unwrap();
    }
    while let Ok(x) = rx.lock().unwrap().try_recv() {
        x.check();
    }
    let b = GLOBAL.buddy();
    #[cfg(feature = "stats")]
    assert!(b.stat(Stat::ALLOC) > (THREADS * ROUNDS) as u64 / 2);
    assert!(b.stat(Stat::ZEROED_REQUEST) > 0);
    assert!(
        b.stat(Stat::ZEROED_NO_CLEAR) > 0,
        "fresh memory served zeroed requests without clearing"
    );
    assert_eq!(GLOBAL.direct_mappings(), 0, "every direct mapping unmapped");
    assert!(
        GLOBAL.heap_bytes() < 1 << 30,
        "heap stayed bounded: {}",
        GLOBAL.heap_bytes()
    );
    println!("{}", b);
}

#[test]
fn layouts_through_the_global_allocator() {
    for &(size, align) in &[
        (1usize, 1usize),
        (24, 8),
        (4096, 4096),
        (3 << 20, 1 << 20),
        (9 << 20, 8),
        (100, 8 << 20),
    ] {
        let l = Layout::from_size_align(size, align).unwrap();
        // SAFETY: valid layout; freed with it.
        unsafe {
            let p = std::alloc::alloc_zeroed(l);
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0);
            assert!(std::slice::from_raw_parts(p, size).iter().all(|&b| b == 0));
            p.write_bytes(0xee, size);
            std::alloc::dealloc(p, l);
        }
    }
    // The allocator object itself answers too.
    let l = Layout::from_size_align(64, 64).unwrap();
    // SAFETY: valid layout.
    unsafe {
        let p = GLOBAL.alloc(l);
        assert!(!p.is_null() && GLOBAL.buddy().owns(p));
        GLOBAL.dealloc(p, l);
    }
}
