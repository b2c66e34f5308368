//! `slub-prodcons`: seed 004's producer/consumer (allocated on one CPU,
//! freed on the other), through a bounded single-producer single-consumer
//! [`Ring`]; the ring-only floor; the statistics runs after the table
//! (printed by [`stats`](super::stats)).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

use local_lock::sync::CachePadded;
use local_lock::Platform;
use slub::{KmemCache, SlubStats};

use super::heaps::GLOBAL_SLUB_ROW;
use super::heaps::{
    exhausted, kernel_kmem_cache, layout, measure_rows, ratio_notes, Caches, Competitors, FastPath,
    Kind, ObjHeap, SlubHeap, Visit, ALIGN, GLOBAL_SLUB, GLOBAL_SLUB_NO_SHEAVES,
};
use super::pairs::{pairs, WARM_PAIRS};
use super::stats::{bulk_sheaves_note, stats_notes, NamedRun, StatsRun};
use crate::measure::Verdict;
use crate::measure::{black_box, fmt_num, pin_current_thread, Case, Ctx, Report, Stopwatch};
use crate::tables::pages::{median_of, verdict};
use crate::tables::Table;

// ---------------------------------------------------------------------------
// The producer/consumer ring
// ---------------------------------------------------------------------------

/// A bounded single-producer single-consumer ring of object pointers
/// (Lamport's queue with cached indices, each side re-reading the other's
/// index only when the ring looks full or empty, and lazy index updates:
/// each side publishes its own index every [`PUBLISH_EVERY`] entries or
/// before it waits, so the two CPUs share the index lines once per lap or
/// per 16 entries, not once per object).
pub struct Ring {
    slots: Box<[AtomicPtr<u8>]>,
    mask: usize,
    /// Next slot to pop (written by the consumer).
    head: CachePadded<AtomicUsize>,
    /// Next slot to push (written by the producer).
    tail: CachePadded<AtomicUsize>,
}

/// The producer's end (one at a time). Its tail is published every
/// [`PUBLISH_EVERY`] pushes, before it waits, and when it is dropped.
pub struct Producer<'a> {
    ring: &'a Ring,
    tail: usize,
    head_seen: usize,
    published: usize,
}

/// The consumer's end (one at a time). Its head is published every
/// [`PUBLISH_EVERY`] pops, before it waits, and when it is dropped.
pub struct Consumer<'a> {
    ring: &'a Ring,
    head: usize,
    tail_seen: usize,
    published: usize,
}

/// Entries a side hands over before it publishes its index (two lines of
/// slots), unless it is about to wait or done. Publishing after every
/// entry made the faster side, polling that index while it waited, take
/// the line back after every store of the slower side: one cross-CPU
/// transfer per object on the slower side alone, which is why the
/// ring-only floor, whose producer always waits for the consumer, came out
/// slower than GlobalSlub and snmalloc (issue #21). Lazy index updates are
/// what FastForward and B-Queue do for the same reason.
pub const PUBLISH_EVERY: usize = 16;

/// Spins before a waiting side gives its CPU away (`yield_now`).
const SPINS_BEFORE_YIELD: u32 = 256;

/// Free slots the producer waits for once the ring is full (and entries
/// the consumer waits for once it is empty, when that many are still to
/// come): the two sides then work `SLACK` entries (8 cache lines of
/// slots) apart instead of on the same line of slots at every hand-off.
/// Without it the ring-only floor, whose producer always fills the ring,
/// paid two cross-CPU line transfers per object and came out slower than
/// GlobalSlub (issue #21: 64 ns against 9.9 ns at 64 B).
pub const SLACK: usize = 64;

#[inline(always)]
fn wait(spins: &mut u32) {
    if *spins < SPINS_BEFORE_YIELD {
        core::hint::spin_loop();
        *spins += 1;
    } else {
        // The other side has had no CPU for a while: give it ours (with one
        // CPU, the two sides time-share it).
        std::thread::yield_now();
    }
}

impl Ring {
    /// A ring of `cap` entries (a power of two).
    pub fn new(cap: usize) -> Ring {
        assert!(cap.is_power_of_two());
        Ring {
            slots: (0..cap)
                .map(|_| AtomicPtr::new(core::ptr::null_mut()))
                .collect(),
            mask: cap - 1,
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// The producer's end. The ring is for one producer and one consumer at
    /// a time (more would lose entries, not break memory safety).
    pub fn producer(&self) -> Producer<'_> {
        let tail = self.tail.load(Ordering::Relaxed);
        Producer {
            ring: self,
            tail,
            head_seen: self.head.load(Ordering::Acquire),
            published: tail,
        }
    }

    /// The consumer's end (see [`producer`](Self::producer)).
    pub fn consumer(&self) -> Consumer<'_> {
        let head = self.head.load(Ordering::Relaxed);
        Consumer {
            ring: self,
            head,
            tail_seen: self.tail.load(Ordering::Acquire),
            published: head,
        }
    }
}

impl Producer<'_> {
    /// Appends `p`; when the ring is full, waits until `SLACK` slots
    /// are free.
    #[inline(always)]
    pub fn push(&mut self, p: *mut u8) {
        let r = self.ring;
        let mut spins = 0;
        if self.tail.wrapping_sub(self.head_seen) > r.mask {
            let room = SLACK.min(r.mask + 1);
            self.publish();
            loop {
                self.head_seen = r.head.load(Ordering::Acquire);
                if self.tail.wrapping_sub(self.head_seen) + room <= r.mask + 1 {
                    break;
                }
                wait(&mut spins);
            }
        }
        r.slots[self.tail & r.mask].store(p, Ordering::Relaxed);
        self.tail = self.tail.wrapping_add(1);
        if self.tail.wrapping_sub(self.published) >= PUBLISH_EVERY {
            self.publish();
        }
    }

    /// Makes every entry pushed so far visible to the consumer.
    #[inline(always)]
    pub fn publish(&mut self) {
        self.ring.tail.store(self.tail, Ordering::Release);
        self.published = self.tail;
    }

    /// Appends all of `ps` (at most the ring's size) with one publication
    /// of the tail (a driver's one doorbell per batch), waiting until they
    /// fit.
    #[inline(always)]
    pub fn push_batch(&mut self, ps: &[*mut u8]) {
        let r = self.ring;
        let n = ps.len();
        assert!(n <= r.mask + 1, "mm-bench: batch larger than the ring");
        let mut spins = 0;
        if self.tail.wrapping_sub(self.head_seen) + n > r.mask + 1 {
            self.publish();
        }
        while self.tail.wrapping_sub(self.head_seen) + n > r.mask + 1 {
            self.head_seen = r.head.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.head_seen) + n > r.mask + 1 {
                wait(&mut spins);
            }
        }
        for (k, &p) in ps.iter().enumerate() {
            r.slots[self.tail.wrapping_add(k) & r.mask].store(p, Ordering::Relaxed);
        }
        self.tail = self.tail.wrapping_add(n);
        self.publish();
    }
}

impl Drop for Producer<'_> {
    fn drop(&mut self) {
        self.publish();
    }
}

impl Drop for Consumer<'_> {
    fn drop(&mut self) {
        self.publish();
    }
}

impl Consumer<'_> {
    /// Takes the oldest entry, waiting while the ring is empty.
    #[inline(always)]
    pub fn pop(&mut self) -> *mut u8 {
        self.pop_after(1)
    }

    /// Takes the oldest entry; when the ring is empty, waits until `min`
    /// entries (at least 1, at most the ring's size; no more than are
    /// still to come) are there.
    #[inline(always)]
    pub fn pop_after(&mut self, min: usize) -> *mut u8 {
        let r = self.ring;
        let mut spins = 0;
        if self.head == self.tail_seen {
            let min = min.clamp(1, r.mask + 1);
            self.publish();
            loop {
                self.tail_seen = r.tail.load(Ordering::Acquire);
                if self.tail_seen.wrapping_sub(self.head) >= min {
                    break;
                }
                wait(&mut spins);
            }
        }
        let p = r.slots[self.head & r.mask].load(Ordering::Relaxed);
        self.head = self.head.wrapping_add(1);
        if self.head.wrapping_sub(self.published) >= PUBLISH_EVERY {
            self.publish();
        }
        p
    }

    /// Hands every slot popped so far back to the producer.
    #[inline(always)]
    pub fn publish(&mut self) {
        self.ring.head.store(self.head, Ordering::Release);
        self.published = self.head;
    }

    /// Takes `out.len()` entries (at most the ring's size) with one
    /// publication of the head, waiting until that many are there.
    #[inline(always)]
    pub fn pop_batch(&mut self, out: &mut [*mut u8]) {
        let r = self.ring;
        let n = out.len();
        assert!(n <= r.mask + 1, "mm-bench: batch larger than the ring");
        let mut spins = 0;
        if self.tail_seen.wrapping_sub(self.head) < n {
            self.publish();
        }
        while self.tail_seen.wrapping_sub(self.head) < n {
            self.tail_seen = r.tail.load(Ordering::Acquire);
            if self.tail_seen.wrapping_sub(self.head) < n {
                wait(&mut spins);
            }
        }
        for (k, o) in out.iter_mut().enumerate() {
            *o = r.slots[self.head.wrapping_add(k) & r.mask].load(Ordering::Relaxed);
        }
        self.head = self.head.wrapping_add(n);
        self.publish();
    }
}

/// Entries of the producer/consumer ring (a NIC RX ring's depth: seed 004
/// quotes 256 ... 4096).
pub const RING: usize = 1024;

/// Objects per batch of the batched producer/consumer shape (and the
/// largest `batch` the producer and the consumer halves take).
pub const BATCH: usize = 64;

/// The producer's half: `count` objects of `l` allocated, their first word
/// written (the driver building the skb), pushed; `batch` (1..=[`BATCH`])
/// at a time through [`ObjHeap::alloc_batch`] when above 1, each batch
/// published with one store of the ring's tail (a driver's doorbell per
/// batch; the last batch may be short).
#[inline(always)]
fn produce<A: ObjHeap>(a: &A, l: Layout, ring: &Ring, count: u64, batch: usize) {
    assert!((1..=BATCH).contains(&batch), "mm-bench: batch {batch}");
    let mut tx = ring.producer();
    if batch == 1 {
        for i in 0..count {
            let p = a.alloc(l);
            // SAFETY: a fresh object of at least 8 bytes, aligned to 8 (for
            // the ring-only floor: a pool slot the consumer is done with,
            // see `RingOnly`).
            unsafe { p.as_ptr().cast::<u64>().write(i) };
            tx.push(p.as_ptr());
        }
        return;
    }
    let mut buf = [core::ptr::null_mut::<u8>(); BATCH];
    let mut i = 0u64;
    while i < count {
        let objs = &mut buf[..(count - i).min(batch as u64) as usize];
        a.alloc_batch(l, objs);
        for &p in objs.iter() {
            // SAFETY: as above (`alloc_batch` fills every slot).
            unsafe { p.cast::<u64>().write(i) };
            i += 1;
        }
        tx.push_batch(objs);
    }
}

/// The consumer's half: `count` objects popped, their first word read
/// (the socket reading the skb), freed; `batch` at a time through
/// [`ObjHeap::free_batch`] when above 1 (taken from the ring together, read
/// one by one, then freed together; the last batch may be short).
#[inline(always)]
fn consume<A: ObjHeap>(a: &A, l: Layout, ring: &Ring, count: u64, batch: usize) {
    assert!((1..=BATCH).contains(&batch), "mm-bench: batch {batch}");
    let mut rx = ring.consumer();
    if batch == 1 {
        for i in 0..count {
            let p = rx.pop_after((count - i).min(SLACK as u64) as usize);
            // SAFETY: an object the producer allocated with `l` and wrote,
            // now ours (handed over through the ring's release/acquire);
            // freed once.
            unsafe {
                black_box(p.cast::<u64>().read());
                a.free(NonNull::new_unchecked(p), l);
            }
        }
        return;
    }
    let mut buf = [NonNull::<u8>::dangling(); BATCH];
    let mut raw = [core::ptr::null_mut::<u8>(); BATCH];
    let mut i = 0u64;
    while i < count {
        let n = (count - i).min(batch as u64) as usize;
        rx.pop_batch(&mut raw[..n]);
        for (s, &p) in buf[..n].iter_mut().zip(&raw[..n]) {
            // SAFETY: as above; the pointer is an object, not null.
            unsafe {
                black_box(p.cast::<u64>().read());
                *s = NonNull::new_unchecked(p);
            }
        }
        // SAFETY: `n` distinct objects the producer allocated with `l`, now
        // ours, each freed once here.
        unsafe { a.free_batch(&buf[..n], l) };
        i += n as u64;
    }
}

/// A two-thread case: worker 0 produces `iters` objects, worker 1 consumes
/// them, `batch` at a time (1: one by one); each times itself (the mean is
/// the wall time per object).
pub fn prodcons_case<A: ObjHeap>(name: &str, a: &Arc<A>, l: Layout, batch: usize) -> Case {
    let a = a.clone();
    let ring = Arc::new(Ring::new(RING));
    // Both clocks start once both threads are warm: the consumer's must not
    // run while the producer is still warming up (or not yet scheduled).
    let ready = Arc::new(Barrier::new(2));
    Case::custom(name, move |t, iters| {
        a.enter_thread(t);
        pairs(&*a, l, WARM_PAIRS);
        ready.wait();
        let sw = Stopwatch::start();
        if t == 0 {
            produce(&*a, l, &ring, iters, batch);
        } else {
            consume(&*a, l, &ring, iters, batch);
        }
        sw.stop()
    })
    .threads(2)
}

/// Objects in the pool of the ring-only floor (`RingOnly`): four ring
/// lengths, where the ring lets the producer run at most [`RING`] ahead.
pub const POOL_OBJECTS: usize = 4 * RING;

/// Alignment of the floor's pool (a cache line: a 64 B object owns its
/// line, as in a kmalloc-64 slab).
const POOL_ALIGN: usize = 64;

/// Row name of the floor of `slub-prodcons`.
pub const FLOOR_ROW: &str = "ring only (no allocator)";

thread_local! {
    /// The calling thread's next pool slot (of any [`RingOnly`]).
    static POOL_CURSOR: Cell<usize> = const { Cell::new(0) };
}

/// The floor of `slub-prodcons`: no allocator. `alloc` hands out the slots
/// of a fixed pool of [`POOL_OBJECTS`] objects round-robin (a thread-local
/// cursor: no shared write), `free` does nothing, so the producer/consumer
/// case measures the ring and the transfer of each object's line alone.
///
/// Not a heap: a slot comes back after [`POOL_OBJECTS`] allocations of
/// the same thread, live or not. The producer/consumer case makes that
/// safe: when the producer writes its object `j`, its push of `j - 1` saw
/// the consumer's head at `j - RING` or more (acquire), and the consumer
/// reads each object before popping the next, so every object up to
/// `j - RING - 2` has been read (and nothing later is touched again);
/// `j` reuses the slot of `j - POOL_OBJECTS`, far below. Each sample runs
/// on fresh threads, started after the previous ones were joined, and the
/// consumer's own (warm-up) allocations write nothing.
struct RingOnly {
    base: NonNull<u8>,
    size: usize,
    block: Layout,
}

// SAFETY: the pool is plain memory owned by the struct; the struct itself
// holds no thread-affine state (the cursor is thread-local), and who writes
// which slot when is the producer/consumer protocol's business (see above).
unsafe impl Send for RingOnly {}
// SAFETY: as above.
unsafe impl Sync for RingOnly {}

impl RingOnly {
    /// A pool of [`POOL_OBJECTS`] objects of `size` bytes (a multiple of
    /// [`ALIGN`]), one block from `System`.
    fn new(size: usize) -> RingOnly {
        assert!(
            size >= ALIGN && size.is_multiple_of(ALIGN),
            "mm-bench: pool of {size} B"
        );
        let block = match Layout::from_size_align(POOL_OBJECTS * size, POOL_ALIGN) {
            Ok(b) => b,
            Err(_) => panic!("mm-bench: bad pool of {size} B"),
        };
        // SAFETY: a non-zero size.
        let base = match NonNull::new(unsafe { System.alloc(block) }) {
            Some(p) => p,
            None => exhausted("System (ring-only pool)", block),
        };
        RingOnly { base, size, block }
    }
}

impl Drop for RingOnly {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with `block`, freed once; nothing uses
        // the pool once its owner is dropped.
        unsafe { System.dealloc(self.base.as_ptr(), self.block) }
    }
}

impl ObjHeap for RingOnly {
    #[inline(always)]
    fn alloc(&self, l: Layout) -> NonNull<u8> {
        debug_assert!(l.size() <= self.size && l.align() <= POOL_ALIGN);
        let i = POOL_CURSOR.with(|c| {
            let i = c.get();
            c.set(i.wrapping_add(1));
            i
        }) % POOL_OBJECTS;
        // SAFETY: `i < POOL_OBJECTS`: slot `i` lies inside the block.
        unsafe { self.base.add(i * self.size) }
    }
    #[inline(always)]
    unsafe fn free(&self, _p: NonNull<u8>, _l: Layout) {}
}

// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

/// The producer/consumer target of issue #6: GlobalSlub's throughput at
/// least this multiple of the best peer's (reported, not asserted).
pub const PRODCONS_TARGET: f64 = 1.2;

/// Object sizes of `slub-prodcons`.
pub const PRODCONS_SIZES: [usize; 2] = [64, 256];

struct ProdConsCases {
    l: Layout,
    batch: usize,
    cases: Vec<Case>,
}

impl Visit for ProdConsCases {
    fn visit<A: ObjHeap>(&mut self, name: &'static str, _kind: Kind, a: &Arc<A>) {
        self.cases.push(prodcons_case(name, a, self.l, self.batch));
    }
}

/// Runs `objects` objects of `l` from a producer to a consumer (pinned to
/// the first two allowed CPUs), `batch` at a time (1: one by one, else
/// [`ObjHeap::alloc_batch`] / [`ObjHeap::free_batch`] of up to [`BATCH`]),
/// and returns the statistics delta of `cache` (read per CPU slot
/// `0..slots`).
#[allow(clippy::too_many_arguments)]
pub fn prodcons_stats<A: ObjHeap, S: slub::SlabSource, P: Platform>(
    a: &A,
    l: Layout,
    objects: u64,
    batch: usize,
    cache: &KmemCache<S, P>,
    slots: usize,
    cpus: &[usize],
    pin: bool,
) -> StatsRun {
    let ring = Ring::new(RING);
    let start = Barrier::new(3);
    let done = Barrier::new(3);
    let exit = Barrier::new(3);
    let snap = || -> Vec<SlubStats> { (0..slots).map(|c| cache.cpu_stats(c)).collect() };
    let ids = Mutex::new([0usize; 2]);
    // Each worker's own time: the measuring thread is not pinned and, with
    // the two workers on two CPUs, may run late (its clock would then start
    // after most of the run).
    let times = Mutex::new([0.0f64; 2]);
    let mut before = Vec::new();
    let mut after = Vec::new();
    std::thread::scope(|s| {
        for t in 0..2 {
            let (ring, start, done, exit, ids, times) = (&ring, &start, &done, &exit, &ids, &times);
            s.spawn(move || {
                if pin && !cpus.is_empty() {
                    let _ = pin_current_thread(cpus[t % cpus.len()]);
                }
                a.enter_thread(t);
                ids.lock().unwrap()[t] = cache.platform().current_cpu();
                start.wait();
                let t0 = Instant::now();
                if t == 0 {
                    produce(a, l, ring, objects, batch);
                } else {
                    consume(a, l, ring, objects, batch);
                }
                times.lock().unwrap()[t] = t0.elapsed().as_secs_f64();
                done.wait();
                // Stay alive (and keep the slot) until the snapshot is taken:
                // a per-thread slot is flushed when its thread exits.
                exit.wait();
            });
        }
        before = snap();
        start.wait();
        done.wait();
        after = snap();
        exit.wait();
    });
    let per_cpu: Vec<SlubStats> = before.iter().zip(&after).map(|(b, a)| b.delta(a)).collect();
    let mut total = SlubStats::default();
    for d in &per_cpu {
        total.merge(d);
    }
    let cpus = *ids.lock().unwrap();
    let [tp, tc] = *times.lock().unwrap();
    StatsRun {
        objects,
        secs: tp.max(tc),
        cpus,
        per_cpu,
        total,
    }
}

/// The statistics runs after the table: one fixed run of `objects` objects
/// per SLUB row (both `GlobalSlub`s' kmalloc cache of the size, the lockless
/// kernel-platform `KmemCache`) and size, one by one, then per SLUB row at
/// 256 B in batches of [`BATCH`].
fn stats_runs(cx: &Ctx<'_>, objects: u64) -> Vec<NamedRun> {
    let cpus = &cx.machine.allowed_cpus;
    let pin = cx.cfg.pin;
    let mut runs: Vec<NamedRun> = Vec::new();
    let shapes = PRODCONS_SIZES
        .iter()
        .map(|&size| (size, 1))
        .chain([(256, BATCH)]);
    for (size, batch) in shapes {
        let l = layout(size);
        let (how, tag) = if batch == 1 {
            (String::new(), format!("{size}"))
        } else {
            (format!(", batches of {batch}"), format!("{size}x{batch}"))
        };
        let class = slub::kmalloc_class(size, ALIGN).expect("a kmalloc class");
        for (heap, what, short) in [
            (&GLOBAL_SLUB, "GlobalSlub", "GS"),
            (&GLOBAL_SLUB_NO_SHEAVES, "GlobalSlub, no sheaves", "GS-nosh"),
        ] {
            let kcache = &heap.kmalloc().caches()[class];
            let h = SlubHeap(heap);
            let run = prodcons_stats(&h, l, objects, batch, kcache, 64, cpus, pin);
            runs.push((
                format!("{} ({what}{how})", kcache.name()),
                format!("{tag} {short}"),
                run,
            ));
        }
        let kc = kernel_kmem_cache(size, FastPath::Lockless);
        let run = prodcons_stats(&kc, l, objects, batch, kc.cache, 64, cpus, pin);
        runs.push((
            format!(
                "{} (KmemCache, lockless, Kernel<UserHooks>{how})",
                kc.cache.name()
            ),
            format!("{tag} lockless"),
            run,
        ));
    }
    runs
}

/// The shapes of `slub-prodcons`: objects per batch (1: one by one).
pub const PRODCONS_BATCHES: [usize; 2] = [1, BATCH];

/// The `slub-prodcons` table (see the [SLUB tables](super)).
pub struct SlubProdCons;

impl Table for SlubProdCons {
    fn name(&self) -> &'static str {
        "slub-prodcons"
    }

    fn about(&self) -> &'static str {
        "seed 004: producer thread allocs 64/256 B objects (one by one, and in batches of 64), consumer thread on the other CPU frees them (SPSC ring), ns per object, SLUB statistics: GlobalSlub, KmemCache, peers, ring-only floor"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let comp = Competitors::new();
        let mut rows = Vec::new();
        let mut summary = Vec::new();
        let mut verdicts = Vec::new();
        for batch in PRODCONS_BATCHES {
            for size in PRODCONS_SIZES {
                let (section, label) = if batch == 1 {
                    (
                        format!(
                            "{size} B: producer allocs + writes, {RING}-entry ring, consumer reads + frees (ns per object)"
                        ),
                        format!("{size}"),
                    )
                } else {
                    (
                        format!(
                            "{size} B, batches of {batch}: producer allocs {batch} (bulk) + writes them, {RING}-entry ring, \
                             consumer reads {batch} + frees them as a batch (ns per object)"
                        ),
                        format!("{size} x{batch}"),
                    )
                };
                let l = layout(size);
                let mut v = ProdConsCases {
                    l,
                    batch,
                    cases: Vec::new(),
                };
                comp.visit(size, Caches::Both, &mut v);
                // The floor, in the same interleaved rounds (not a peer: its
                // name is not in PEERS, so the ratios ignore it).
                v.cases.push(
                    prodcons_case(FLOOR_ROW, &Arc::new(RingOnly::new(size)), l, batch).floor(),
                );
                let mut these = measure_rows(cx, v.cases, &section);
                for r in these.iter_mut() {
                    r.case.note = format!("{} Mobj/s", fmt_num(1e3 / r.stats.ns.median));
                }
                if let Some((s, best)) = ratio_notes(&mut these) {
                    let floor = median_of(&these, FLOOR_ROW).unwrap_or(f64::NAN);
                    verdicts.push(
                        Verdict::at_least(
                            format!("{label} B: GlobalSlub >= {PRODCONS_TARGET} x best peer"),
                            1e3 / s,
                            PRODCONS_TARGET * 1e3 / best.1,
                            "Mobj/s",
                        )
                        .vs_peer(best.1 / s)
                        .on(&these, &[GLOBAL_SLUB_ROW, best.0]),
                    );
                    summary.push(format!(
                        "  {label:>8}  {:>9} Mobj/s  {:>8} Mobj/s {:<34}  {:>5.2}x  {:<6}  {:>9} Mobj/s",
                        fmt_num(1e3 / s),
                        fmt_num(1e3 / best.1),
                        best.0,
                        best.1 / s,
                        verdict(best.1 / s >= PRODCONS_TARGET),
                        fmt_num(1e3 / floor),
                    ));
                }
                rows.extend(these);
            }
        }

        // The statistics: one fixed run per SLUB row and size, one by one,
        // then per SLUB row at 256 B in batches.
        let objects: u64 = cx.cfg.sweep(&[1 << 16], &[1 << 19], &[1 << 21])[0];
        let runs = stats_runs(cx, objects);
        let bulk_sheaves = bulk_sheaves_note(&runs);
        let mut notes = vec![
            format!(
                "each object: the producer (worker 0, pinned to the first CPU) allocates it and writes its first word, pushes it \
                 into a {RING}-entry single-producer single-consumer ring (cached indices, spin then yield when full/empty); \
                 the consumer (worker 1, the second CPU) pops it, reads the word and frees it. ns/op is wall time per object \
                 (mean of the two threads' times, each after {WARM_PAIRS} untimed alloc + free pairs of its own); Mobj/s its inverse. Every free is remote: the object was allocated on the \
                 other CPU (seed 004: skbs built in softirq on CPU 0, freed by the socket's reader on another CPU)."
            ),
            format!(
                "batches of {BATCH} (seed 004: 'batch things a bit like SLAB'): the producer allocates {BATCH} objects at once, writes \
                 each and hands the batch over with one publication of the ring index (a driver's doorbell per batch); the \
                 consumer takes {BATCH}, reads each, then frees them together. ns/op stays per object. (Handing over object by \
                 object instead makes the ring, not the allocator, the cost: when the consumer waits on an almost empty ring \
                 it takes the index line from the producer at every push, 15 ns per object measured with rdtsc.) The \
                 SLUB rows use the kernel's bulk API, as a network driver's NAPI skb cache does: kmem_cache_alloc_bulk and \
                 kmem_cache_free_bulk (KmemCache::alloc_bulk / free_bulk; for both GlobalSlub rows on the \
                 kmalloc cache of the size's class, the one their alloc takes objects from). The peers have no bulk API: \
                 their batch is {BATCH} alloc calls, then {BATCH} free calls.{bulk_sheaves}"
            ),
            format!(
                "'{FLOOR_ROW}': the floor, measured in the same interleaved rounds: the same producer, consumer and ring, but \
                 no allocator: the producer takes objects round-robin from a fixed pool of {POOL_OBJECTS} objects of the \
                 size (4 x the ring, one System block aligned to 64 B, allocated before the table; the ring keeps the \
                 producer at most {RING} objects ahead, so a slot is never written while the consumer may still read it) \
                 and writes the first word; the consumer reads it and frees nothing. What it shows is the cost of the queue \
                 and of moving each object's cache line to the other CPU; an allocator row minus it is the allocator's \
                 share. It is not a peer (not in the ratios). Its rounds can spread widely: when \
                 the ring runs full or empty, the two CPUs work on the same line of slots at each hand-off; in \
                 between, they pipeline."
            ),
            "2cpu: the runner's two-CPU check; with one CPU the ring degenerates to time-sharing hand-offs.".into(),
            format!(
                "summary (target, issue #6: GlobalSlub's throughput >= {PRODCONS_TARGET} x the best peer's; x64 = batches \
                 of 64; last column: the ring-only floor):"
            ),
            format!(
                "  {:>8}  {:>16}  {:<50}  {:>6}  {:<6}  {:>16}",
                "size", "GlobalSlub", "best peer", "ratio", "verdict", "ring only"
            ),
        ];
        notes.extend(summary);
        notes.extend(stats_notes(&runs, objects, BATCH));
        Report {
            table: "slub-prodcons",
            title: "SLUB producer/consumer: allocated on one CPU, freed on the other (seed 004)"
                .into(),
            notes,
            rows,
            verdicts,
            ..Report::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::System;

    use super::*;
    use crate::tables::slub::{kmem_cache, Heap, GLOBAL_SLUB_NO_SHEAVES};

    /// Passes `objects` through a producer and a consumer thread, `batch`
    /// at a time, with the consumer checking every object's first word.
    fn pass<A: ObjHeap>(a: &A, l: Layout, objects: u64, batch: usize) {
        let ring = Ring::new(RING);
        std::thread::scope(|s| {
            s.spawn(|| {
                a.enter_thread(0);
                produce(a, l, &ring, objects, batch);
            });
            a.enter_thread(1);
            let mut rx = ring.consumer();
            let mut buf = Vec::new();
            for i in 0..objects {
                let p = rx.pop();
                // SAFETY: an object the producer wrote, ours now.
                assert_eq!(unsafe { p.cast::<u64>().read() }, i);
                buf.push(NonNull::new(p).expect("not null"));
                if buf.len() == batch {
                    // SAFETY: objects of `a` with `l`, each freed once.
                    unsafe { a.free_batch(&buf, l) };
                    buf.clear();
                }
            }
            // SAFETY: as above.
            unsafe { a.free_batch(&buf, l) };
        });
    }

    #[test]
    fn producer_consumer_shapes_pass_every_object_in_order() {
        // Counts that are not multiples of the batch: a short last batch.
        let objects = 10 * RING as u64 + 37;
        for batch in [1, 7, BATCH] {
            for size in PRODCONS_SIZES {
                let l = layout(size);
                pass(&SlubHeap(&GLOBAL_SLUB), l, objects, batch);
                pass(&SlubHeap(&GLOBAL_SLUB_NO_SHEAVES), l, objects, batch);
                pass(&kmem_cache(size), l, objects, batch);
                pass(&Heap(System), l, objects, batch);
                pass(&RingOnly::new(size), l, objects, batch);
            }
        }
        // The timed halves themselves, as the table runs them.
        let ring = Ring::new(RING);
        let pool = RingOnly::new(64);
        for batch in [1, BATCH] {
            std::thread::scope(|s| {
                s.spawn(|| produce(&SlubHeap(&GLOBAL_SLUB), layout(64), &ring, objects, batch));
                s.spawn(|| consume(&SlubHeap(&GLOBAL_SLUB), layout(64), &ring, objects, batch));
            });
            std::thread::scope(|s| {
                s.spawn(|| produce(&pool, layout(64), &ring, objects, batch));
                s.spawn(|| consume(&pool, layout(64), &ring, objects, batch));
            });
        }
    }

    #[test]
    fn ring_only_pool_is_round_robin_per_thread() {
        let pool = RingOnly::new(256);
        let l = layout(256);
        std::thread::scope(|s| {
            s.spawn(|| {
                let first = pool.alloc(l);
                for k in 1..POOL_OBJECTS {
                    let p = pool.alloc(l);
                    assert_eq!(p.as_ptr().addr(), first.as_ptr().addr() + k * 256);
                    assert_eq!(p.as_ptr().addr() % POOL_ALIGN, 0);
                }
                // Back to the first slot after a full lap.
                assert_eq!(pool.alloc(l), first);
            });
        });
    }

    #[test]
    fn ring_passes_everything_in_order() {
        let ring = Ring::new(8);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut tx = ring.producer();
                for i in 1..=10_000usize {
                    tx.push(core::ptr::without_provenance_mut(i));
                }
            });
            let mut rx = ring.consumer();
            for i in 1..=10_000usize {
                assert_eq!(rx.pop().addr(), i);
            }
        });
    }
}
