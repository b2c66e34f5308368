//! The self-test every hart runs at once, and the timer interrupt's share.
//!
//! Task side, per round ([`task_round`]):
//!
//! * **pages** through each pcp ([`pages_round`]): batches of orders 0..=3
//!   (some cold), filled and checked, freed in shuffled order (some cold);
//!   `ZEROED` requests (must read as zero; counted as served from
//!   known-zero pages or cleared), `ONLY_ZERO` requests, pages cleared and
//!   freed "still zero" (`FreeFlags::ZERO`) so later zeroed requests hit the
//!   zero list; `alloc_bulk`/`free_bulk`, some bulk requests `ZEROED`
//!   (they clear under the per-CPU hold: a long hold for the timer
//!   interrupt to land in); DMA-zone requests checked to lie below
//!   `DMA_END`; `prezero` as an idle loop would; the trylock pcp's
//!   auto-tuned `high` ([`high_round`]): raised by bursts of frees,
//!   decayed by this hart's vmstat refresh, while other harts decay and
//!   drain its lists remotely.
//! * **objects** ([`objects_round`]): kmalloc of every size class and of
//!   large sizes, `kzalloc`, `ksize`, the `kernel_obj` cache, the
//!   `kernel_sheaf` cache (per-CPU sheaves); `alloc_bulk`/`free_bulk` on
//!   both dedicated caches; each object is stamped and mailed to the next
//!   hart, which checks the stamp and frees it (sheaf objects with
//!   `free_bulk`): remote frees onto slabs other CPUs own.
//! * **percpu** ([`percpu_round`]): areas of assorted sizes and alignments,
//!   every unit checked zero, written, re-read, freed; the task counter
//!   incremented.
//!
//! Interrupt side ([`timer_tick`], every ~1 ms on every hart): a page from
//! each pcp (order 0 or 1, `ATOMIC`), a kmalloc object (freed at once or
//! mailed to another hart), a `kernel_obj` and a `kernel_sheaf` object
//! (the sheaf paths in interrupt context), an atomic percpu area,
//! the interrupt counter. So every policy's interrupt path runs while the
//! interrupted task holds, or is about to take, the same local locks.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use buddy::{AllocFlags, FreeFlags, Order};
use local_lock::sync::{CachePadded, SpinLock};
use slub::KMALLOC_SIZES;

use crate::arch::{self, MAX_HARTS};
use crate::mm::{self, DMA, DMA_END, KMALLOC, OBJ_CACHE, PAGE, PCPS, SHEAF_CACHE};

// ----------------------------------------------------------- statistics

macro_rules! hart_stats {
    ($($(#[doc = $d:literal])* $name:ident,)*) => {
        /// Per-hart event counters of the self-test (task and interrupt).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        pub enum H { $($(#[doc = $d])* $name,)* }
        impl H {
            /// Every counter.
            pub const ALL: &'static [H] = &[$(H::$name,)*];
            /// Its name.
            pub const fn name(self) -> &'static str {
                match self { $(H::$name => stringify!($name),)* }
            }
        }
    };
}

hart_stats! {
    /// Task rounds completed.
    ROUNDS,
    /// Page blocks allocated by task code (all pcps, single requests).
    TASK_PAGES,
    /// Pages allocated by `alloc_bulk` in task code.
    TASK_BULK_PAGES,
    /// `ZEROED` page requests in task code.
    ZEROED_REQ,
    /// `ONLY_ZERO` requests served.
    ONLY_ZERO_OK,
    /// `ONLY_ZERO` requests refused (no known-zero page at hand).
    ONLY_ZERO_FAIL,
    /// DMA-zone blocks allocated (all below DMA_END).
    DMA_PAGES,
    /// kmalloc / kernel_obj objects allocated by task code.
    TASK_OBJS,
    /// Objects freed by a hart other than the one that allocated them.
    REMOTE_FREES,
    /// Objects allocated by `alloc_bulk` (kernel_obj, kernel_sheaf).
    BULK_OBJS,
    /// `free_bulk` calls (local and remote objects).
    BULK_FREES,
    /// percpu areas allocated by task code.
    PCPU_AREAS,
    /// Timer interrupts taken.
    IRQ_TICKS,
    /// Pages allocated (and freed) in interrupt context, all policies.
    IRQ_PAGES,
    /// Objects allocated in interrupt context (kmalloc + kernel_obj).
    IRQ_OBJS,
    /// Atomic percpu areas allocated in interrupt context.
    IRQ_PCPU,
    /// Interrupt-context requests that found no memory (allowed: ATOMIC).
    IRQ_FAILS,
    /// Bursts of order-0 frees on the trylock pcp after which this hart's
    /// auto-tuned `high` stood above `high_min` (Linux 6.7+ `nr_pcp_high`).
    RAISED_HIGHS,
    /// Another hart's trylock lists decayed (`decay_pcp_high_cpu`) or
    /// drained (`drain_cpu`) from here while that hart kept freeing.
    REMOTE_DRAINS,
    /// This hart's own vmstat refreshes (`decay_pcp_high`).
    DECAYS,
    /// Microseconds in the timer handler (`mtime`, wall clock: includes
    /// waits for zone locks other harts hold, and host scheduling of the
    /// QEMU vCPU threads).
    IRQ_US,
}

const NSTATS: usize = H::ALL.len();

/// One hart's counters (task and handler of that hart write them; AMO adds).
pub struct HartStats([AtomicU64; NSTATS]);

/// Every hart's counters.
pub static STATS: [CachePadded<HartStats>; MAX_HARTS] =
    [const { CachePadded::new(HartStats([const { AtomicU64::new(0) }; NSTATS])) }; MAX_HARTS];

/// Adds `n` to this hart's counter `h`.
#[inline]
pub fn count(h: H, n: u64) {
    STATS[arch::hart_id()].0[h as usize].fetch_add(n, Relaxed);
}

/// Hart `hart`'s counter `h`.
pub fn stat(hart: usize, h: H) -> u64 {
    STATS[hart].0[h as usize].load(Relaxed)
}

/// Counter `h` summed over the harts.
pub fn stat_sum(h: H) -> u64 {
    (0..MAX_HARTS).map(|i| stat(i, h)).sum()
}

// ----------------------------------------------------------------- rng

/// xorshift64*.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded by `seed` (non-zero after mixing).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// The next value.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A value below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() >> 33) as usize % n
    }
}

// ------------------------------------------------------------ patterns

const MAGIC: u64 = 0x6d6d_2d72_732d_6b72; // "mm-rs-kr"

fn stamp_of(addr: usize, len: usize, from: usize) -> u64 {
    MAGIC ^ (addr as u64).rotate_left(17) ^ ((len as u64) << 40) ^ from as u64
}

/// Stamps `[p, p + len)`: a header word, the first 256 and the last 64
/// bytes (all of it for small blocks) with a byte derived from the stamp.
fn fill(p: NonNull<u8>, len: usize, from: usize) {
    let s = stamp_of(p.as_ptr() as usize, len, from);
    let b = (s >> 8) as u8 | 1;
    // SAFETY: the caller holds `len` bytes at `p`, 8-byte aligned.
    unsafe {
        let base = p.as_ptr();
        (base as *mut u64).write(s);
        if len <= 512 {
            base.add(8).write_bytes(b, len - 8);
        } else {
            base.add(8).write_bytes(b, 248);
            base.add(len - 64).write_bytes(b, 64);
        }
    }
}

/// Checks a [`fill`] stamp; panics naming what was found.
fn check(p: NonNull<u8>, len: usize, from: usize, what: &str) {
    let s = stamp_of(p.as_ptr() as usize, len, from);
    let b = (s >> 8) as u8 | 1;
    // SAFETY: as in `fill`.
    unsafe {
        let base = p.as_ptr();
        let head = (base as *const u64).read();
        assert!(
            head == s,
            "{what}: block {base:p} ({len} B, from hart {from}) header {head:#x}, expected {s:#x}: \
             overwritten or handed out twice"
        );
        let ranges: [(usize, usize); 2] = if len <= 512 {
            [(8, len), (0, 0)]
        } else {
            [(8, 256), (len - 64, len)]
        };
        for (a, e) in ranges {
            for i in a..e {
                let v = *base.add(i);
                assert!(
                    v == b,
                    "{what}: block {base:p} ({len} B, from hart {from}) byte {i} is {v:#x}, expected {b:#x}"
                );
            }
        }
    }
}

/// Panics unless `len` bytes at `p` read as zero.
fn check_zero(p: NonNull<u8>, len: usize, what: &str) {
    // SAFETY: the caller holds the bytes; word aligned, `len` a multiple of 8.
    let w = unsafe { core::slice::from_raw_parts(p.as_ptr() as *const u64, len / 8) };
    if let Some(i) = w.iter().position(|&x| x != 0) {
        panic!(
            "{what}: {p:p} ({len} B) should read as zero but word {i} is {:#x}",
            w[i]
        );
    }
}

fn order(o: u8) -> Order {
    Order::new(o).expect("order")
}

// ------------------------------------------------------------ mailboxes

/// An object in flight to another hart.
#[derive(Clone, Copy)]
struct Mail {
    addr: usize,
    len: usize,
    from: usize,
    /// 0: kmalloc, 1: kernel_obj, 2: kernel_sheaf.
    kind: u8,
}

const MAILBOX: usize = 96;

struct Ring {
    buf: [Mail; MAILBOX],
    head: usize,
    len: usize,
}

const EMPTY: Mail = Mail {
    addr: 0,
    len: 0,
    from: 0,
    kind: 0,
};

/// One mailbox per hart: others push, the owner pops. Taken with
/// interrupts masked (the timer handler mails too).
static MAILBOXES: [CachePadded<SpinLock<Ring>>; MAX_HARTS] = [const {
    CachePadded::new(SpinLock::new(Ring {
        buf: [EMPTY; MAILBOX],
        head: 0,
        len: 0,
    }))
}; MAX_HARTS];

fn with_box<R>(hart: usize, f: impl FnOnce(&mut Ring) -> R) -> R {
    let flags = arch::irq_save();
    let r = {
        let mut g = MAILBOXES[hart].lock();
        f(&mut g)
    };
    if flags & arch::MSTATUS_MIE != 0 {
        // SAFETY: interrupts were enabled before the save.
        unsafe { arch::irq_enable() };
    }
    r
}

/// Mails `m` to `to`; gives it back if the box is full.
fn post(to: usize, m: Mail) -> Result<(), Mail> {
    with_box(to, |r| {
        if r.len == MAILBOX {
            return Err(m);
        }
        let i = (r.head + r.len) % MAILBOX;
        r.buf[i] = m;
        r.len += 1;
        Ok(())
    })
}

fn take(me: usize) -> Option<Mail> {
    with_box(me, |r| {
        if r.len == 0 {
            return None;
        }
        let m = r.buf[r.head];
        r.head = (r.head + 1) % MAILBOX;
        r.len -= 1;
        Some(m)
    })
}

/// Checks and frees one object (wherever it came from).
fn release(m: Mail, me: usize) {
    let p = NonNull::new(m.addr as *mut u8).expect("mailed null");
    check(p, m.len, m.from, "remote free");
    if m.from != me {
        count(H::REMOTE_FREES, 1);
    }
    match m.kind {
        // SAFETY: a live kmalloc object, handed to us.
        0 => unsafe { KMALLOC.kfree(p.as_ptr()) },
        // SAFETY: a live kernel_obj object, handed to us.
        1 => unsafe { OBJ_CACHE.get().free(p) },
        // SAFETY: a live kernel_sheaf object, handed to us.
        _ => unsafe { SHEAF_CACHE.get().free(p) },
    }
}

/// Frees everything in this hart's mailbox; returns how many. The
/// `kernel_sheaf` objects are checked and freed together with
/// `free_bulk` (a remote bulk free: they come from another hart's slabs).
pub fn drain_mailbox(me: usize) -> usize {
    let mut n = 0;
    let mut bulk = [NonNull::<u8>::dangling(); 32];
    let mut k = 0;
    while let Some(m) = take(me) {
        n += 1;
        if m.kind != 2 {
            release(m, me);
            continue;
        }
        let p = NonNull::new(m.addr as *mut u8).expect("mailed null");
        check(p, m.len, m.from, "remote bulk free");
        if m.from != me {
            count(H::REMOTE_FREES, 1);
        }
        bulk[k] = p;
        k += 1;
        if k == bulk.len() {
            // SAFETY: live kernel_sheaf objects handed to us, each once.
            unsafe { SHEAF_CACHE.get().free_bulk(&bulk[..k]) };
            count(H::BULK_FREES, 1);
            k = 0;
        }
    }
    if k > 0 {
        // SAFETY: as above.
        unsafe { SHEAF_CACHE.get().free_bulk(&bulk[..k]) };
        count(H::BULK_FREES, 1);
    }
    n
}

/// Sends an object to the next hart, or frees it here (one hart, or full).
fn send_or_free(m: Mail, me: usize, harts: usize) {
    let to = (me + 1) % harts;
    if to == me {
        return release(m, me);
    }
    if let Err(m) = post(to, m) {
        release(m, me);
    }
}

// ----------------------------------------------------------------- task

/// One round of the task-side self-test on this hart.
pub fn task_round(rng: &mut Rng, me: usize, harts: usize) {
    for (name, pcp) in PCPS.iter() {
        pages_round(rng, name, pcp, me);
    }
    dma_round(rng);
    objects_round(rng, me, harts);
    percpu_round(rng);
    mm::PCP_IRQSAFE.prezero(2);
    high_round(rng, me, harts);
    count(H::ROUNDS, 1);
}

/// Linux 6.7+'s auto-tuned high while another CPU drains (issue #22), on
/// the trylock pcp (real per-CPU spin locks: remote drains on this
/// platform): every 8th round a burst of order-0 allocations then frees,
/// larger than `high_min`, raises this hart's `high` (`nr_pcp_alloc`,
/// `nr_pcp_high`), which must stay in `[high_min, high_max]`; every round
/// this hart decays or drains the next hart's lists from here while that
/// hart frees into them (its high moving under the remote lock), and every
/// 4th round runs its own vmstat refresh (`decay_pcp_high`).
fn high_round(rng: &mut Rng, me: usize, harts: usize) {
    /// At most this many pages in a burst (4 MiB).
    const BURST_MAX: usize = 1024;
    let pcp = &mm::PCP_TRYLOCK;
    if rng.below(8) == 0 {
        let (batch, lo) = pcp.batch_high();
        let n = (lo + 2 * batch).min(BURST_MAX);
        // The burst is linked through the pages' first words.
        let mut head: Option<NonNull<u8>> = None;
        for _ in 0..n {
            let Some(p) = pcp.alloc(Order::ZERO, AllocFlags::NONE) else {
                break;
            };
            let next = head.map_or(0, |h| h.as_ptr() as usize);
            // SAFETY: our page, at least a word long and aligned.
            unsafe { p.ptr.as_ptr().cast::<usize>().write(next) };
            head = Some(p.ptr);
        }
        while let Some(p) = head {
            // SAFETY: written above, the page still ours.
            let next = unsafe { p.as_ptr().cast::<usize>().read() };
            // SAFETY: allocated above with order 0, freed once.
            unsafe { pcp.free(p, Order::ZERO, FreeFlags::NONE) };
            head = NonNull::new(next as *mut u8);
        }
        let (lo, hi) = pcp.high_range();
        let l = pcp.local_lists();
        assert!(
            (lo..=hi).contains(&l.high) && l.count <= hi,
            "trylock pcp: after a burst high {} count {} outside [{lo}, {hi}]",
            l.high,
            l.count
        );
        if l.high > lo {
            count(H::RAISED_HIGHS, 1);
        }
    }
    if harts > 1 {
        let other = (me + 1) % harts;
        let r = if rng.below(2) == 0 {
            pcp.decay_pcp_high_cpu(other)
        } else {
            pcp.drain_cpu(other)
        };
        assert!(
            r.is_ok(),
            "trylock pcp: hart {me} could not reach hart {other}'s lists: {r:?}"
        );
        count(H::REMOTE_DRAINS, 1);
    }
    if rng.below(4) == 0 {
        pcp.decay_pcp_high();
        let (lo, hi) = pcp.high_range();
        let l = pcp.local_lists();
        assert!(
            (lo..=hi).contains(&l.high) && l.count <= l.high,
            "trylock pcp: after decay_pcp_high high {} count {} range [{lo}, {hi}]",
            l.high,
            l.count
        );
        count(H::DECAYS, 1);
    }
}

fn pages_round(rng: &mut Rng, name: &str, pcp: &mm::KPcp, me: usize) {
    const BATCH: usize = 24;
    let mut held: [(Option<NonNull<u8>>, u8); BATCH] = [(None, 0); BATCH];
    for slot in held.iter_mut() {
        let o = [0u8, 0, 0, 0, 1, 1, 2, 3][rng.below(8)];
        let flags = if rng.below(6) == 0 {
            AllocFlags::COLD
        } else {
            AllocFlags::NONE
        };
        let Some(p) = pcp.alloc(order(o), flags) else {
            continue;
        };
        count(H::TASK_PAGES, 1);
        if name == "dma" {
            assert!(
                p.addr() + (PAGE << o) <= DMA_END,
                "dma pcp returned {:#x} (order {o}), above DMA_END",
                p.addr()
            );
        }
        fill(p.ptr, PAGE << o, me);
        *slot = (Some(p.ptr), o);
    }
    // Free in a shuffled order, some cold.
    for i in (1..BATCH).rev() {
        held.swap(i, rng.below(i + 1));
    }
    for (p, o) in held {
        if let Some(p) = p {
            check(p, PAGE << o, me, name);
            let f = if rng.below(4) == 0 {
                FreeFlags::COLD
            } else {
                FreeFlags::NONE
            };
            // SAFETY: allocated above from this pcp with order `o`.
            unsafe { pcp.free(p, order(o), f) };
        }
    }

    // Zeroed requests: must read as zero; half are cleared again and freed
    // "still zero", to come back through the zero lists.
    for _ in 0..3 {
        if let Some(p) = pcp.alloc(Order::ZERO, AllocFlags::ZEROED) {
            count(H::ZEROED_REQ, 1);
            assert!(
                p.zero,
                "{name}: ZEROED page {:#x} not flagged zero",
                p.addr()
            );
            check_zero(p.ptr, PAGE, name);
            fill(p.ptr, PAGE, me);
            let f = if rng.below(2) == 0 {
                // SAFETY: our page.
                unsafe { p.ptr.as_ptr().write_bytes(0, PAGE) };
                FreeFlags::ZERO
            } else {
                FreeFlags::NONE
            };
            // SAFETY: allocated above; with ZERO it was cleared.
            unsafe { pcp.free(p.ptr, Order::ZERO, f) };
        }
    }
    match pcp.alloc(Order::ZERO, AllocFlags::ONLY_ZERO) {
        Some(p) => {
            count(H::ONLY_ZERO_OK, 1);
            check_zero(p.ptr, PAGE, name);
            // SAFETY: untouched, still zero.
            unsafe { pcp.free(p.ptr, Order::ZERO, FreeFlags::ZERO) };
        }
        None => count(H::ONLY_ZERO_FAIL, 1),
    }

    // Bulk: one hold of the lists for many pages; every fourth bulk request
    // is ZEROED (cleared under the hold: interrupts land inside it).
    let mut bulk: [Option<NonNull<u8>>; 16] = [None; 16];
    let zeroed = rng.below(4) == 0;
    let flags = if zeroed {
        AllocFlags::ZEROED
    } else {
        AllocFlags::NONE
    };
    let n = pcp.alloc_bulk(flags, &mut bulk);
    count(H::TASK_BULK_PAGES, n as u64);
    let mut ptrs: [NonNull<u8>; 16] = [NonNull::dangling(); 16];
    let mut k = 0;
    for p in bulk.iter().flatten() {
        if zeroed {
            check_zero(*p, PAGE, "bulk ZEROED");
        }
        fill(*p, PAGE, me);
        ptrs[k] = *p;
        k += 1;
    }
    for p in &ptrs[..k] {
        check(*p, PAGE, me, "bulk");
    }
    // SAFETY: order-0 pages from alloc_bulk of this pcp, not used again.
    unsafe { pcp.free_bulk(&ptrs[..k]) };
}

fn dma_round(rng: &mut Rng) {
    for _ in 0..2 {
        let o = rng.below(3) as u8;
        if let Some(p) = mm::BUDDY.alloc_pages(order(o), AllocFlags::NONE.zone_max(DMA)) {
            assert!(
                p.addr() + (PAGE << o) <= DMA_END,
                "a zone_max(DMA) request got {:#x} (order {o}) above DMA_END",
                p.addr()
            );
            count(H::DMA_PAGES, 1);
            // SAFETY: just allocated with this order.
            unsafe { mm::BUDDY.free_pages(p.ptr, order(o)) };
        }
    }
}

/// Sizes the object rounds use: every class boundary, odd sizes between,
/// and large blocks (page allocator).
const SIZES: [usize; 20] = [
    8, 13, 16, 24, 32, 60, 64, 96, 100, 128, 192, 256, 500, 1024, 2000, 4096, 8192, 12_000, 20_000,
    40_000,
];

fn objects_round(rng: &mut Rng, me: usize, harts: usize) {
    // Every class once per round (the classes list is the kernel's).
    for &size in KMALLOC_SIZES.iter() {
        let p = KMALLOC
            .kmalloc(size, 8)
            .unwrap_or_else(|| panic!("kmalloc({size}) failed"));
        assert_eq!(
            KMALLOC.ksize(p.as_ptr()),
            size,
            "ksize of a kmalloc-{size} object"
        );
        fill(p, size, me);
        count(H::TASK_OBJS, 1);
        send_or_free(
            Mail {
                addr: p.as_ptr() as usize,
                len: size,
                from: me,
                kind: 0,
            },
            me,
            harts,
        );
    }
    for _ in 0..24 {
        let size = SIZES[rng.below(SIZES.len())];
        let zero = rng.below(5) == 0;
        let p = if zero {
            KMALLOC.kzalloc(size, 8)
        } else {
            KMALLOC.kmalloc(size, 8)
        }
        .unwrap_or_else(|| panic!("kmalloc({size}) failed"));
        assert!(KMALLOC.ksize(p.as_ptr()) >= size, "ksize below the request");
        if zero {
            check_zero(p, size & !7, "kzalloc");
        }
        fill(p, size & !7, me);
        count(H::TASK_OBJS, 1);
        send_or_free(
            Mail {
                addr: p.as_ptr() as usize,
                len: size & !7,
                from: me,
                kind: 0,
            },
            me,
            harts,
        );
    }
    let cache = OBJ_CACHE.get();
    for _ in 0..8 {
        let p = cache.alloc().expect("kernel_obj alloc failed");
        assert_eq!(p.as_ptr() as usize % 64, 0, "kernel_obj alignment");
        fill(p, 200, me);
        count(H::TASK_OBJS, 1);
        send_or_free(
            Mail {
                addr: p.as_ptr() as usize,
                len: 200,
                from: me,
                kind: 1,
            },
            me,
            harts,
        );
    }
    // Bulk: kernel_obj and kernel_sheaf (sheaves refill and flush in bulk
    // too). Half of each batch is freed here with free_bulk, the other half
    // mailed to the next hart (which frees sheaf objects with free_bulk).
    for (kind, c) in [(1u8, OBJ_CACHE.get()), (2u8, SHEAF_CACHE.get())] {
        let size = c.object_size();
        let mut objs = [None; 24];
        let got = c.alloc_bulk(&mut objs);
        assert!(got == objs.len(), "{}: alloc_bulk got {got}", c.name());
        count(H::BULK_OBJS, got as u64);
        let mut local = [NonNull::<u8>::dangling(); 24];
        let mut k = 0;
        for (i, &o) in objs.iter().enumerate() {
            let p = o.expect("alloc_bulk returned null");
            fill(p, size, me);
            if i % 2 == 0 {
                local[k] = p;
                k += 1;
            } else {
                send_or_free(
                    Mail {
                        addr: p.as_ptr() as usize,
                        len: size,
                        from: me,
                        kind,
                    },
                    me,
                    harts,
                );
            }
        }
        for p in &local[..k] {
            check(*p, size, me, "bulk");
        }
        // SAFETY: objects of this cache from alloc_bulk, each once.
        unsafe { c.free_bulk(&local[..k]) };
        count(H::BULK_FREES, 1);
    }
    // kernel_sheaf one by one (the sheaf fast paths).
    let sc = SHEAF_CACHE.get();
    for _ in 0..16 {
        let p = sc.alloc().expect("kernel_sheaf alloc failed");
        fill(p, 64, me);
        count(H::TASK_OBJS, 1);
        send_or_free(
            Mail {
                addr: p.as_ptr() as usize,
                len: 64,
                from: me,
                kind: 2,
            },
            me,
            harts,
        );
    }
    drain_mailbox(me);
}

fn percpu_round(rng: &mut Rng) {
    let a = mm::percpu();
    let mut held = [None; 6];
    for slot in held.iter_mut() {
        let size = [4usize, 8, 12, 16, 40, 64, 200, 1024, 4096][rng.below(9)];
        let align = [4usize, 8, 16, 64][rng.below(4)];
        let p = a
            .alloc(size, align)
            .unwrap_or_else(|e| panic!("percpu alloc({size}, {align}): {e:?}"));
        count(H::PCPU_AREAS, 1);
        assert_eq!(p.addr() % align, 0, "percpu alignment");
        for cpu in 0..a.nr_units() {
            let u = a.per_cpu_ptr(p, cpu);
            check_zero_bytes(u, size, "percpu area");
            // SAFETY: our area's copy for `cpu`, `size` bytes.
            unsafe { u.as_ptr().write_bytes(cpu as u8 + 1, size) };
        }
        *slot = Some((p, size));
    }
    for (p, size) in held.into_iter().flatten() {
        for cpu in 0..a.nr_units() {
            let u = a.per_cpu_ptr(p, cpu);
            // SAFETY: written above.
            let s = unsafe { core::slice::from_raw_parts(u.as_ptr(), size) };
            assert!(
                s.iter().all(|&b| b == cpu as u8 + 1),
                "percpu area {:#x} unit {cpu} overwritten",
                p.addr()
            );
        }
        a.free(p);
    }
    for _ in 0..16 {
        mm::counters().0.inc();
    }
}

fn check_zero_bytes(p: NonNull<u8>, len: usize, what: &str) {
    // SAFETY: the caller holds the bytes.
    let s = unsafe { core::slice::from_raw_parts(p.as_ptr(), len) };
    assert!(
        s.iter().all(|&b| b == 0),
        "{what}: {p:p} ({len} B) not zero"
    );
}

/// Task increments of the task counter per round.
pub const COUNTER_PER_ROUND: i64 = 16;

// ------------------------------------------------------------ interrupt

/// The timer interrupt's work on this hart (interrupts masked, `in_irq`
/// set).
pub fn timer_tick(me: usize, harts: usize) {
    count(H::IRQ_TICKS, 1);
    let t = stat(me, H::IRQ_TICKS);
    let mut rng = Rng::new(t ^ ((me as u64) << 32) ^ arch::mtime());

    // A page from every pcp: each policy's interrupt path (irq-safe: the
    // lists; task-only: straight to the buddy; trylock: the lists unless
    // the interrupted task holds them).
    for (name, pcp) in PCPS.iter() {
        let o = (t & 1) as u8;
        match pcp.alloc(order(o), AllocFlags::ATOMIC) {
            Some(p) => {
                count(H::IRQ_PAGES, 1);
                fill(p.ptr, PAGE << o, me);
                check(p.ptr, PAGE << o, me, name);
                // SAFETY: allocated just above with this order.
                unsafe { pcp.free(p.ptr, order(o), FreeFlags::NONE) };
            }
            None => count(H::IRQ_FAILS, 1),
        }
    }

    // kmalloc: freed here, or mailed to another hart's task.
    let size = SIZES[rng.below(SIZES.len() - 3)];
    match KMALLOC.kmalloc(size, 8) {
        Some(p) => {
            count(H::IRQ_OBJS, 1);
            let len = size & !7;
            fill(p, len, me);
            let m = Mail {
                addr: p.as_ptr() as usize,
                len,
                from: me,
                kind: 0,
            };
            if rng.below(2) == 0 && harts > 1 {
                if let Err(m) = post((me + 1) % harts, m) {
                    release(m, me);
                }
            } else {
                release(m, me);
            }
        }
        None => count(H::IRQ_FAILS, 1),
    }
    let cache = OBJ_CACHE.get();
    match cache.alloc() {
        Some(p) => {
            count(H::IRQ_OBJS, 1);
            fill(p, 200, me);
            check(p, 200, me, "kernel_obj in irq");
            // SAFETY: allocated just above.
            unsafe { cache.free(p) };
        }
        None => count(H::IRQ_FAILS, 1),
    }

    let sc = SHEAF_CACHE.get();
    match sc.alloc() {
        Some(p) => {
            count(H::IRQ_OBJS, 1);
            fill(p, 64, me);
            check(p, 64, me, "kernel_sheaf in irq");
            // SAFETY: allocated just above.
            unsafe { sc.free(p) };
        }
        None => count(H::IRQ_FAILS, 1),
    }

    // An atomic percpu area (never populates: may fail, which is fine).
    let a = mm::percpu();
    match a.alloc_atomic(16, 8) {
        Ok(p) => {
            count(H::IRQ_PCPU, 1);
            let u = a.per_cpu_ptr(p, me);
            check_zero_bytes(u, 16, "atomic percpu area");
            // SAFETY: this CPU's copy of our 16-byte area.
            unsafe { u.as_ptr().write_bytes(0xa5, 16) };
            a.free(p);
        }
        Err(_) => count(H::IRQ_FAILS, 1),
    }
    mm::counters().1.inc();
}

// ------------------------------------------------------- zone fallback

/// Blocks held by [`zone_fallback_test`].
static HOGS: SpinLock<[(usize, u8); 256]> = SpinLock::new([(0, 0); 256]);

/// Boot-time test of the zonelist, run on hart 0 before the other harts
/// start: exhaust Normal, see a Normal request fall back to DMA, exhaust
/// what Normal requests may take of DMA and see DMA's `lowmem_reserve`
/// still serve a DMA request, see an `ATOMIC` request dip below the min
/// watermark, see pcp fail cleanly, then give everything back (blocks that
/// were never touched go back still zero).
pub fn zone_fallback_test() {
    let b = &mm::BUDDY;
    let mut hogs = HOGS.lock();
    let mut n = 0usize;
    fn grab(hogs: &mut [(usize, u8)], zone_only: Option<buddy::ZoneId>, n: &mut usize) {
        let b = &mm::BUDDY;
        for o in (0..=mm::MAX_ORDER).rev() {
            loop {
                // Node 0's zonelist only (on a NUMA boot, other nodes'
                // memory would come before DMA's reserve: see numa_test).
                let p = match zone_only {
                    Some(z) => b.alloc_pages_zone(z, order(o), AllocFlags::NONE),
                    None => b.alloc_pages_node(0, order(o), AllocFlags::THISNODE),
                };
                let Some(p) = p else { break };
                assert!(*n < hogs.len(), "zone test: too many blocks");
                assert!(
                    p.zero,
                    "zone test: boot RAM block {:#x} not known zero",
                    p.addr()
                );
                hogs[*n] = (p.addr(), o);
                *n += 1;
            }
        }
    }
    // 1. Normal, alone.
    grab(&mut hogs[..], Some(mm::NORMAL), &mut n);
    let normal_left = b.nr_free_pages(mm::NORMAL);
    let wm = b.watermarks(mm::NORMAL);
    assert!(
        normal_left <= wm.min + 1,
        "zone test: Normal stopped at {normal_left} free pages, min watermark {}",
        wm.min
    );
    // 2. A Normal request now falls back to DMA.
    let before = n;
    let p = b
        .alloc_pages_node(0, Order::ZERO, AllocFlags::THISNODE)
        .expect("zone test: no fallback from Normal to DMA");
    assert!(
        p.addr() < DMA_END,
        "zone test: fallback page {:#x} not in DMA",
        p.addr()
    );
    hogs[n] = (p.addr(), 0);
    n += 1;
    // 3. Normal requests take DMA down to its min + lowmem_reserve[Normal].
    grab(&mut hogs[..], None, &mut n);
    let info = b.zone_info(DMA);
    let reserve = info.lowmem_reserve[mm::NORMAL.index()];
    let dma_left = b.nr_free_pages(DMA);
    assert!(
        reserve > 0 && dma_left >= reserve,
        "zone test: Normal requests left {dma_left} DMA pages, lowmem_reserve {reserve}"
    );
    // 4. The reserve still serves DMA requests.
    let p = b
        .alloc_pages_node(0, Order::ZERO, AllocFlags::THISNODE.zone_max(DMA))
        .expect("zone test: lowmem_reserve did not keep a page for a DMA request");
    assert!(p.addr() < DMA_END);
    hogs[n] = (p.addr(), 0);
    n += 1;
    // 5. ATOMIC may go below Normal's min watermark; the pcp lists (empty)
    //    fail cleanly when the buddy cannot refill them.
    let p = b
        .alloc_pages_node(0, Order::ZERO, AllocFlags::ATOMIC | AllocFlags::THISNODE)
        .expect("zone test: ATOMIC request refused below the min watermark");
    hogs[n] = (p.addr(), 0);
    n += 1;
    let pcp_page = mm::PCP_TASKONLY.alloc(Order::ZERO, AllocFlags::NOWARN | AllocFlags::THISNODE);
    assert!(
        pcp_page.is_none(),
        "zone test: pcp served a page from an exhausted zone"
    );
    crate::kprintln!(
        "  zone test: {} blocks hogged ({before} from Normal, which stopped at {normal_left} free \
         pages, min {}); Normal fell back to DMA; DMA kept {dma_left} pages for its reserve {reserve} \
         and served a DMA request; ATOMIC went below min; pcp failed cleanly",
        n,
        wm.min
    );
    give_back(&hogs[..n]);
}

/// Frees the hogged blocks: untouched, so still zero.
fn give_back(hogs: &[(usize, u8)]) {
    for &(addr, o) in hogs {
        let p = NonNull::new(addr as *mut u8).expect("hog");
        // SAFETY: allocated by the boot tests with order `o`, never written.
        unsafe { mm::BUDDY.free_pages_flags(p, order(o), FreeFlags::ZERO) };
    }
}

/// The NUMA self-test at boot (issue #20), on every node with memory:
/// node-local requests (`alloc_pages_node(nid)`) are served from node
/// `nid` while it has memory; the per-node counters add up to the totals;
/// then, with the node exhausted by `THISNODE` requests, a plain request
/// for it falls back to the nearest node with memory (by the device
/// tree's distances) and a `THISNODE` one fails. Prints the per-node
/// buddyinfo lines. On one node it checks the local half only.
pub fn numa_test() {
    let b = &mm::BUDDY;
    let nodes = b.nr_node_ids();
    let sum = |f: &dyn Fn(usize) -> usize| (0..nodes).map(f).sum::<usize>();
    assert_eq!(
        sum(&|n| b.nr_free_pages_node(n)),
        b.total_free_pages(),
        "numa test: per-node free pages do not add up"
    );
    assert_eq!(
        sum(&|n| b.managed_pages_node(n)),
        b.total_managed_pages(),
        "numa test: per-node managed pages do not add up"
    );
    let mut hogs = HOGS.lock();
    for nid in (0..nodes).filter(|&n| b.node_has_memory(n)) {
        // Node-local while the node has memory.
        let p = b
            .alloc_pages_node(nid, Order::ZERO, AllocFlags::NONE)
            .expect("numa test: no page for a node-local request");
        assert_eq!(
            b.page_to_nid(p.ptr.as_ptr()),
            Some(nid),
            "numa test: node {nid}'s request served from another node"
        );
        give_back(&[(p.addr(), 0)]);
        if nodes == 1 {
            break;
        }
        // Exhaust the node (its own zones only), largest blocks first.
        let mut n = 0;
        for o in (0..=mm::MAX_ORDER).rev() {
            while let Some(p) = b.alloc_pages_node(nid, order(o), AllocFlags::THISNODE) {
                assert_eq!(b.page_to_nid(p.ptr.as_ptr()), Some(nid));
                assert!(n < hogs.len(), "numa test: too many blocks");
                hogs[n] = (p.addr(), o);
                n += 1;
            }
        }
        assert!(
            b.alloc_pages_node(nid, Order::ZERO, AllocFlags::THISNODE)
                .is_none(),
            "numa test: THISNODE served from an exhausted node"
        );
        let nearest = b
            .node_order(nid, false)
            .find(|&m| m != nid)
            .expect("numa test: no other node with memory");
        let p = b
            .alloc_pages_node(nid, Order::ZERO, AllocFlags::NONE)
            .expect("numa test: no fallback to another node");
        let got = b.page_to_nid(p.ptr.as_ptr());
        assert_eq!(
            got,
            Some(nearest),
            "numa test: node {nid} exhausted: fell back to {got:?}, nearest is {nearest}"
        );
        hogs[n] = (p.addr(), 0);
        n += 1;
        assert_eq!(
            sum(&|m| b.nr_free_pages_node(m)),
            b.total_free_pages(),
            "numa test: per-node free pages do not add up"
        );
        crate::kprintln!(
            "  numa test: node {nid}: node-local page from node {nid}; exhausted by {n} THISNODE \
             blocks ({} free pages left), then THISNODE failed and a plain request fell back \
             to node {nearest}",
            b.nr_free_pages_node(nid)
        );
        give_back(&hogs[..n]);
    }
    crate::kprintln!("  per-node buddyinfo:");
    crate::console::print(format_args!("{b}"));
}
