//! Many threads churning small objects through `GlobalSlub` as the
//! `#[global_allocator]`: the shape of issue #16's "200 threads allocating/
//! freeing 16..1024 B" row and of its cause 3 (about a quarter of the
//! objects freed by another thread), for probing the std platform and the
//! locks of SLUB (node `list_lock`, barn lock) outside the tables.
//!
//! ```sh
//! cargo run --release -p mm-bench --example threads_churn -- 200 2 remote
//! cargo run --release -p mm-bench --example threads_churn -- 200 2 batch512
//! ```
//!
//! Arguments: threads (default 200), seconds (default 2), and the shape:
//!
//! * `remote` (default, = `remote8`), `remoteN`, `local`: each thread owns
//!   64 slots of one shared array, each holding a live object of a random
//!   size 16..=1024 B; it allocates a new object (writing its size into the
//!   first word) and swaps it into a slot, freeing the object it took out:
//!   one of its own slots, or in 1 of N replacements a random slot of any
//!   thread (the Larson shape of `slub-larson`: with N = 8 about a quarter
//!   of the frees are of objects another thread allocated; `local`: never).
//!   The per-CPU caches absorb nearly all of it.
//! * `batchN`: each thread allocates N objects of random sizes 16..=1024 B,
//!   then frees them; every 4th batch is handed to the next thread, which
//!   frees it (a quarter of the frees remote). Whole sheaves go to and come
//!   from the barn and slabs change lists: the barn lock and the node
//!   `list_lock` are contended.
//!
//! Prints the allocations per second of all threads together, the peak RSS
//! (`VmHWM` of `/proc/self/status`) and the allocations per CPU-second of
//! the process (less sensitive than the wall clock to other processes
//! sharing the CPUs).
use std::alloc::{alloc, dealloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

#[global_allocator]
static A: slub::GlobalSlub = slub::GlobalSlub::new();

/// Live objects per thread.
const LIVE: usize = 64;
/// Smallest and largest object size.
const MIN: usize = 16;
const MAX: usize = 1024;

/// xorshift64: a cheap per-thread generator.
fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).expect("a valid layout")
}

/// A new object of a random size, its size in its first word.
fn new(rng: &mut u64) -> *mut u8 {
    let size = MIN + (next(rng) as usize) % (MAX - MIN + 1);
    // SAFETY: a non-zero size.
    let p = unsafe { alloc(layout(size)) };
    assert!(!p.is_null(), "out of memory");
    // SAFETY: `p` points to `size` >= 16 fresh bytes aligned to 8.
    unsafe {
        p.cast::<u64>().write(size as u64);
        p.add(size - 1).write(size as u8);
    }
    p
}

/// Frees an object of `new`.
///
/// # Safety
///
/// `p` is a live object of `new`, not used afterwards.
unsafe fn free(p: *mut u8) {
    // SAFETY: the caller's contract: the first word holds the size.
    unsafe { dealloc(p, layout(p.cast::<u64>().read() as usize)) }
}

/// One thread's slot churn until `stop`; returns its allocation count.
fn churn_slots(
    t: usize,
    slots: &[AtomicPtr<u8>],
    remote: u64,
    start: &Barrier,
    stop: &AtomicBool,
) -> u64 {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(t as u64 + 1) | 1;
    let own = t * LIVE;
    for s in &slots[own..own + LIVE] {
        s.store(new(&mut rng), Ordering::Relaxed);
    }
    let mut allocs = LIVE as u64;
    start.wait();
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..64 {
            let r = next(&mut rng);
            let i = if remote != 0 && (r >> 40).is_multiple_of(remote) {
                ((r >> 3) % slots.len() as u64) as usize
            } else {
                own + ((r >> 3) % LIVE as u64) as usize
            };
            let old = slots[i].swap(new(&mut rng), Ordering::AcqRel);
            // SAFETY: taken out of its slot by the swap: ours alone.
            unsafe { free(old) };
        }
        allocs += 64;
    }
    allocs
}

/// One thread's batch churn until `stop`; returns its allocation count.
/// Every 4th batch goes into the next thread's mailbox (`mail[next]`),
/// replacing and freeing the batch that was waiting there.
fn churn_batch(
    t: usize,
    batch: usize,
    mail: &[AtomicPtr<Vec<*mut u8>>],
    start: &Barrier,
    stop: &AtomicBool,
) -> u64 {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(t as u64 + 1) | 1;
    let mut v: Vec<*mut u8> = Vec::with_capacity(batch);
    let mut allocs = 0u64;
    start.wait();
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..batch {
            v.push(new(&mut rng));
        }
        allocs += batch as u64;
        round += 1;
        if round.is_multiple_of(4) {
            let full = std::mem::replace(&mut v, Vec::with_capacity(batch));
            let old =
                mail[(t + 1) % mail.len()].swap(Box::into_raw(Box::new(full)), Ordering::AcqRel);
            if !old.is_null() {
                // SAFETY: a `Box<Vec>` put there by `into_raw`, taken out by
                // the swap: ours alone, its objects live.
                for p in *unsafe { Box::from_raw(old) } {
                    // SAFETY: a live object of `new`, freed once.
                    unsafe { free(p) };
                }
            }
        } else {
            for p in v.drain(..) {
                // SAFETY: as above.
                unsafe { free(p) };
            }
        }
    }
    allocs
}

/// CPU time (user + system) of this process so far, in seconds: `utime`
/// and `stime` of `/proc/self/stat`, in clock ticks (100 per second on
/// Linux). Divided into the allocations, it is less sensitive than the wall
/// clock to other processes sharing the CPUs.
fn cpu_secs() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which is in parentheses).
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15; `rest` starts at field 3.
    f.get(11)
        .zip(f.get(12))
        .map_or(0.0, |(u, s)| (u + s) as f64 / 100.0)
}

/// `VmHWM` of this process, in KiB.
fn peak_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The churn shape (see the module docs).
#[derive(Clone, Copy)]
enum Shape {
    /// Slots; 1 in `remote` replacements in any thread's slot (0: never).
    Slots { remote: u64 },
    /// Batches of this many objects.
    Batch(usize),
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let threads: usize = a.get(1).map_or(200, |s| s.parse().expect("threads"));
    let secs: f64 = a.get(2).map_or(2.0, |s| s.parse().expect("seconds"));
    let shape = match a.get(3).map_or("remote", |s| s.as_str()) {
        "remote" => Shape::Slots { remote: 8 },
        "local" => Shape::Slots { remote: 0 },
        m => {
            let num = |p: &str| m.strip_prefix(p)?.parse().ok().filter(|&n| n > 0);
            if let Some(n) = num("remote") {
                Shape::Slots { remote: n }
            } else if let Some(n) = num("batch") {
                Shape::Batch(n as usize)
            } else {
                panic!("shape {m}: remote, remoteN, local or batchN")
            }
        }
    };
    let slots: Vec<AtomicPtr<u8>> = match shape {
        Shape::Slots { .. } => (0..threads * LIVE)
            .map(|_| AtomicPtr::new(std::ptr::null_mut()))
            .collect(),
        Shape::Batch(_) => Vec::new(),
    };
    let mail: Vec<AtomicPtr<Vec<*mut u8>>> = (0..threads)
        .map(|_| AtomicPtr::new(std::ptr::null_mut()))
        .collect();
    let start = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let (elapsed, cpu) = std::thread::scope(|s| {
        for t in 0..threads {
            let (slots, mail, start, stop, total) = (&slots, &mail, &start, &stop, &total);
            s.spawn(move || {
                let n = match shape {
                    Shape::Slots { remote } => churn_slots(t, slots, remote, start, stop),
                    Shape::Batch(n) => churn_batch(t, n, mail, start, stop),
                };
                total.fetch_add(n, Ordering::Relaxed);
            });
        }
        start.wait();
        let t0 = Instant::now();
        let c0 = cpu_secs();
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
        (t0.elapsed(), cpu_secs() - c0)
    });
    let n = total.load(Ordering::Relaxed);
    let hwm = peak_rss_kib();
    for s in &slots {
        // SAFETY: every thread stopped: each slot holds a live object.
        unsafe { free(s.load(Ordering::Acquire)) };
    }
    for m in &mail {
        let b = m.load(Ordering::Acquire);
        if !b.is_null() {
            // SAFETY: as in `churn_batch`; every thread stopped.
            for p in *unsafe { Box::from_raw(b) } {
                // SAFETY: a live object of `new`, freed once.
                unsafe { free(p) };
            }
        }
    }
    println!(
        "threads {threads} {}: {:.2} Mallocs/s, peak RSS {:.0} MiB, {:.2} Mallocs per CPU-second \
         ({n} allocations in {:.2} s, {cpu:.2} CPU-s)",
        match shape {
            Shape::Slots { remote: 0 } => "local".to_string(),
            Shape::Slots { remote } => format!("remote 1/{remote}"),
            Shape::Batch(n) => format!("batch {n}"),
        },
        n as f64 / elapsed.as_secs_f64() / 1e6,
        hwm as f64 / 1024.0,
        n as f64 / cpu.max(0.01) / 1e6,
        elapsed.as_secs_f64()
    );
}
