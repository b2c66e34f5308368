//! Alloc-N-then-free-N rounds timed per phase: the loop of seed 000's
//! `pagealloc-micro` that the `pages`, `pages-2t`, `zeroed` and
//! `slub-batch` tables run (on pages, zeroed pages and objects), its clock
//! and its record of the two phases.
//!
//! A table describes its items through [`AllocFree`] (one adapter per
//! table: which allocation, which free, what happens untimed in between)
//! and gets a [`Case`] from [`alloc_free_case`]. The runner's figure is
//! per round of N items; [`per_item`] turns it into per item, and
//! [`phase_note`] prints the alloc and free phases apart.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use super::{fmt_num, tsc, Case, Elapsed, Spread, Stats};

/// The phase clock: the TSC where there is one (one `rdtsc` per phase
/// boundary, as the seed's `read_clockcycles`), else the monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// TSC ticks per ns (`None`: ticks are ns).
    ghz: Option<f64>,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Clock {
    /// From the machine's calibrated TSC rate.
    pub fn new(tsc_ghz: Option<f64>) -> Clock {
        Clock {
            ghz: tsc().and(tsc_ghz),
        }
    }

    /// A time stamp.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        match self.ghz {
            Some(_) => tsc().unwrap_or(0),
            None => epoch().elapsed().as_nanos() as u64,
        }
    }

    /// `ticks` stamps' worth of time divided by `per`.
    pub fn elapsed(&self, ticks: u64, per: f64) -> Elapsed {
        let t = ticks as f64 / per;
        match self.ghz {
            Some(g) => Elapsed {
                ns: t / g,
                cycles: Some(t),
            },
            None => Elapsed {
                ns: t,
                cycles: None,
            },
        }
    }
}

/// The alloc and free time per item of every sample of one case, in sample
/// order (the runner's last `rounds` samples are the measured rounds).
#[derive(Default)]
pub struct Phases(Mutex<Vec<[Elapsed; 2]>>);

impl Phases {
    /// Records one sample's per-item alloc and free times.
    pub fn push(&self, alloc: Elapsed, free: Elapsed) {
        self.0.lock().unwrap().push([alloc, free]);
    }

    /// Median and spread of the alloc (`0`) or free (`1`) phase over the
    /// last `rounds` samples: ns, and cycles if measured.
    pub fn spread(&self, rounds: usize, phase: usize) -> Option<(Spread, Option<Spread>)> {
        let v = self.0.lock().unwrap();
        let last = &v[v.len().saturating_sub(rounds)..];
        let ns: Vec<f64> = last.iter().map(|s| s[phase].ns).collect();
        let cyc: Option<Vec<f64>> = last.iter().map(|s| s[phase].cycles).collect();
        Some((Spread::of(&ns)?, cyc.and_then(|c| Spread::of(&c))))
    }
}

/// A case whose body records its phases, with the record.
pub fn with_phases(f: impl FnOnce(Arc<Phases>) -> Case) -> (Case, Arc<Phases>) {
    let ph = Arc::new(Phases::default());
    (f(ph.clone()), ph)
}

/// "alloc A + free F ns (a + f cyc)" from a case's phase record.
pub fn phase_note(ph: &Phases, rounds: usize) -> Option<String> {
    let (a, ac) = ph.spread(rounds, 0)?;
    let (f, fc) = ph.spread(rounds, 1)?;
    Some(match (ac, fc) {
        (Some(ac), Some(fc)) => format!(
            "alloc {} + free {} ns ({} + {} cyc)",
            fmt_num(a.median),
            fmt_num(f.median),
            fmt_num(ac.median),
            fmt_num(fc.median)
        ),
        _ => format!(
            "alloc {} + free {} ns",
            fmt_num(a.median),
            fmt_num(f.median)
        ),
    })
}

/// Turns the runner's figures per round of N items into figures per item.
pub fn per_item(st: &mut Stats, n: usize) {
    let k = n as f64;
    let scale = |s: &mut Spread| {
        s.median /= k;
        s.min /= k;
        s.max /= k;
    };
    scale(&mut st.ns);
    if let Some(c) = st.cycles.as_mut() {
        scale(c);
    }
}

/// The items of an alloc-N-then-free-N round: what is allocated and how it
/// goes back (the `pages` tables' order-0 pages, the `zeroed` table's
/// zeroed pages, `slub-batch`'s objects).
pub trait AllocFree {
    /// Whether [`between`](Self::between) has work: only then does the
    /// round read the clock again after it (the free phase starts at the
    /// alloc phase's end stamp otherwise).
    const BETWEEN: bool = false;

    /// One item (never null: exhaustion panics).
    fn alloc(&self) -> NonNull<u8>;

    /// Untimed work on the round's items between the two phases (with
    /// [`BETWEEN`](Self::BETWEEN)).
    #[inline(always)]
    fn between(&self, items: &[*mut u8]) {
        let _ = items;
    }

    /// Frees one item.
    ///
    /// # Safety
    ///
    /// `p` came from [`alloc`](Self::alloc) of this value and is not used
    /// afterwards.
    unsafe fn free(&self, p: NonNull<u8>);

    /// Called first on worker thread `t` of a multi-thread case.
    fn enter_thread(&self, t: usize) {
        let _ = t;
    }
}

/// One round: allocate `slots.len()` items, then free them in allocation
/// order; returns the time stamps' differences of the two phases (the
/// allocator's [`between`](AllocFree::between) work untimed).
#[inline(always)]
pub fn alloc_free_round<A: AllocFree>(a: &A, slots: &mut [*mut u8], clock: &Clock) -> (u64, u64) {
    let t0 = clock.now();
    for s in slots.iter_mut() {
        *s = a.alloc().as_ptr();
    }
    let t1 = clock.now();
    let t2 = if A::BETWEEN {
        a.between(slots);
        clock.now()
    } else {
        t1
    };
    for &p in slots.iter() {
        // SAFETY: allocated just above by `a`, freed once.
        unsafe { a.free(NonNull::new_unchecked(p)) };
    }
    let t3 = clock.now();
    (t1.wrapping_sub(t0), t3.wrapping_sub(t2))
}

/// A case running `iters` rounds of alloc-N-then-free-N (`n` items of `a`)
/// on `threads` threads, timing itself per round (alloc + free); with
/// `phases`, each sample's alloc and free times per item are kept apart
/// too. With `threads > 1` each worker calls [`AllocFree::enter_thread`]
/// first.
pub fn alloc_free_case<A: AllocFree + Send + Sync + 'static>(
    name: impl Into<String>,
    a: A,
    n: usize,
    clock: Clock,
    threads: usize,
    phases: Option<Arc<Phases>>,
) -> Case {
    Case::custom(name, move |t, iters| {
        if threads > 1 {
            a.enter_thread(t);
        }
        let mut slots = vec![core::ptr::null_mut::<u8>(); n];
        let (mut ta, mut tf) = (0u64, 0u64);
        for _ in 0..iters {
            let (x, y) = alloc_free_round(&a, &mut slots, &clock);
            ta += x;
            tf += y;
        }
        if let Some(ph) = &phases {
            let per = n as f64 * iters as f64;
            ph.push(clock.elapsed(ta, per), clock.elapsed(tf, per));
        }
        // The whole round, so the runner's calibration sizes batches right;
        // the tables divide by N ([`per_item`]).
        clock.elapsed(ta + tf, 1.0)
    })
    .threads(threads)
}

/// The rounds of [`alloc_free_case`] (one thread, no work between the
/// phases) timed as a whole by the runner: no clock read inside a batch.
/// The per-phase stamps of the seed's method cost two TSC reads per round,
/// in every figure: `page_count` (issue #22, this VM) at N = 1 took the
/// buddy from 31.7 to 86.0 ns per page and buddy_system_allocator from
/// 50.6 to 100.7, and the reads do not cost every allocator alike (at N =
/// 8 +5 ns per page for the buddy, whose work is bound by its instruction
/// stream, about nothing for buddy_system_allocator, stalled on the links
/// in its pages). The figure here is what the allocator costs per item;
/// the per-phase case keeps the seed's alloc/free split.
pub fn alloc_free_rounds_case<A: AllocFree + Send + Sync + 'static>(
    name: impl Into<String>,
    a: A,
    n: usize,
) -> Case {
    assert!(
        !A::BETWEEN,
        "whole rounds time the work between the phases too"
    );
    Case::raw(name, move |_, iters| {
        let mut slots = vec![core::ptr::null_mut::<u8>(); n];
        for _ in 0..iters {
            for s in slots.iter_mut() {
                *s = a.alloc().as_ptr();
            }
            for &p in slots.iter() {
                // SAFETY: allocated just above by `a`, freed once.
                unsafe { a.free(NonNull::new_unchecked(p)) };
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, System};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn per_item_divides_every_figure() {
        let s = Spread::of(&[64.0, 128.0, 640.0]).unwrap();
        let mut st = Stats {
            ns: s,
            cycles: Some(s),
            iters: 1,
            rounds: 3,
            two_cpu: None,
            remeasured: false,
            flags: Vec::new(),
        };
        per_item(&mut st, 64);
        assert_eq!((st.ns.min, st.ns.median, st.ns.max), (1.0, 2.0, 10.0));
        assert_eq!(st.cycles.unwrap().median, 2.0);
    }

    /// 64 B blocks from `System`, counting what the round does with them.
    #[derive(Default)]
    struct Counted {
        live: AtomicUsize,
        seen_between: AtomicUsize,
    }

    const L: std::alloc::Layout = std::alloc::Layout::new::<[u64; 8]>();

    /// Runs `case` through the runner with tiny batches, unpinned.
    fn measure_quickly(case: Case) -> Vec<Stats> {
        let cfg = crate::measure::Config {
            batch: std::time::Duration::from_micros(50),
            warmup: std::time::Duration::ZERO,
            rounds: 3,
            pin: false,
            ..crate::measure::Config::quick()
        };
        let machine = crate::measure::Machine::probe(&cfg);
        let cx = crate::measure::Ctx {
            cfg: &cfg,
            machine: &machine,
        };
        cx.measure(&[case])
    }

    impl AllocFree for Counted {
        const BETWEEN: bool = true;
        fn alloc(&self) -> NonNull<u8> {
            self.live.fetch_add(1, Ordering::Relaxed);
            // SAFETY: a non-zero size.
            NonNull::new(unsafe { System.alloc(L) }).expect("System: out of memory")
        }
        fn between(&self, items: &[*mut u8]) {
            assert_eq!(items.len(), self.live.load(Ordering::Relaxed));
            self.seen_between.fetch_add(items.len(), Ordering::Relaxed);
        }
        unsafe fn free(&self, p: NonNull<u8>) {
            self.live.fetch_sub(1, Ordering::Relaxed);
            // SAFETY: the caller's contract: allocated above with `L`.
            unsafe { System.dealloc(p.as_ptr(), L) }
        }
    }

    #[test]
    fn rounds_free_every_item_and_record_both_phases() {
        let a = Counted::default();
        let clock = Clock::new(None);
        let mut slots = vec![core::ptr::null_mut(); 5];
        for _ in 0..3 {
            alloc_free_round(&a, &mut slots, &clock);
            assert_eq!(a.live.load(Ordering::Relaxed), 0);
        }
        assert_eq!(a.seen_between.load(Ordering::Relaxed), 15);

        let (case, ph) =
            with_phases(|ph| alloc_free_case("c", Counted::default(), 7, clock, 1, Some(ph)));
        assert_eq!((case.name.as_str(), case.threads), ("c", 1));
        let stats = measure_quickly(case);
        let note = phase_note(&ph, stats[0].rounds).expect("phases recorded");
        assert!(
            note.starts_with("alloc ") && note.contains(" + free "),
            "{note}"
        );
    }

    /// [`Counted`] without work between the phases (whole rounds time
    /// everything in a batch).
    #[derive(Default)]
    struct Plain(Counted, AtomicUsize);

    impl AllocFree for Plain {
        fn alloc(&self) -> NonNull<u8> {
            self.1.fetch_add(1, Ordering::Relaxed);
            self.0.alloc()
        }
        unsafe fn free(&self, p: NonNull<u8>) {
            // SAFETY: forwarded contract.
            unsafe { self.0.free(p) }
        }
    }

    /// The whole-round case runs `iters` rounds of N allocations then N
    /// frees in each batch (the runner's clock around it), leaving nothing
    /// live.
    #[test]
    fn whole_rounds_allocate_and_free_n_per_round() {
        let a = std::sync::Arc::new(Plain::default());
        struct Shared(std::sync::Arc<Plain>);
        impl AllocFree for Shared {
            fn alloc(&self) -> NonNull<u8> {
                self.0.alloc()
            }
            unsafe fn free(&self, p: NonNull<u8>) {
                // SAFETY: forwarded contract.
                unsafe { self.0.free(p) }
            }
        }
        let case = alloc_free_rounds_case("w", Shared(a.clone()), 6);
        let stats = measure_quickly(case);
        assert!(stats[0].ns.median > 0.0);
        let allocs = a.1.load(Ordering::Relaxed);
        assert!(
            allocs > 0 && allocs.is_multiple_of(6),
            "{allocs} allocations"
        );
        assert_eq!(a.0.live.load(Ordering::Relaxed), 0, "every item freed");
    }
}
