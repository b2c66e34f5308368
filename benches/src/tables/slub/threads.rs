//! `slub-threads` (issue #16): 1 to 1024 threads, each replacing objects
//! of random sizes 16..=1024 B in a ring of [`LIVE_PER_THREAD`] live ones
//! and handing every [`REMOTE_EVERY`]th object it takes out to the next
//! thread to free, for a fixed time; alloc + free pairs per second (all
//! threads) and the peak RSS, each allocator in its own child process (the
//! runner re-executed with [`THREADS_CHILD_FLAG`], through the shared
//! machinery of [`child`](super::child)), rounds interleaved across the
//! allocators, medians.
//!
//! # The workload
//!
//! Thread `t` of `T` owns a ring of [`LIVE_PER_THREAD`] slots, each holding
//! a live object. A step replaces the next slot: it allocates an object of
//! a uniformly random size in [`THREADS_SIZES`], writes its size (the
//! freeing thread needs it for the `Layout`) and its allocating thread into
//! its first 12 bytes, puts it in the slot and disposes of the object that
//! was there: every [`REMOTE_EVERY`]th step it hands it to thread
//! `(t + 1) % T` through that thread's [`Mailbox`] (a bounded
//! single-producer single-consumer ring of [`MAILBOX`] entries), the other
//! steps it frees it. Every 16 steps a thread frees what its own mailbox
//! holds. So a quarter of the frees are of objects another thread
//! allocated (none with one thread, whose mailbox is its own), whatever
//! the number of threads: when the next thread's mailbox is full (that
//! thread has had no CPU since, which happens when there are more threads
//! than CPUs), the thread empties its own mailbox and gives its CPU away
//! (`sched_yield`) until there is room. The objects in flight stay bounded
//! ([`MAILBOX`] per thread) and the hand-off cheap (the producer reads the
//! owner's index only when the mailbox looks full, the owner the
//! producer's once per drain);
//! every row reports the share of frees that were remote (each object
//! carries its allocating thread) and how often a thread had to wait.
//!
//! The threads start together at a barrier; the timed part starts when the
//! last one reaches it and lasts a fixed time, which every thread checks
//! itself once per ring lap (64 steps): a thread kept off its CPU delays
//! only its own stop, and the wall time runs until the last thread stopped.

use std::process::ExitCode;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use local_lock::sync::CachePadded;

use super::child::{
    cpus_arg, field, finish_child, names, parse_cpus, report_if_asked, run_child, run_on,
    runner_exe, ChildError, HeapJob,
};
use super::heaps::{layout, Competitors, ObjHeap, GLOBAL_SLUB_ROW, PEERS};
use super::larson::LARSON_SIZES;
use super::rss_kb;
use crate::measure::{
    allow_current_thread, fmt_num, pin_current_thread, two_cpu_check, two_cpu_work, Case, Config,
    Ctx, Report, Row, Spread, Stats, Verdict,
};
use crate::tables::pages::verdict;
use crate::tables::Table;

/// The thread counts of `--full`.
pub const THREAD_COUNTS: [usize; 7] = [1, 2, 8, 32, 64, 256, 1024];

/// The thread counts of the default run: without 1024, whose mimalloc
/// child alone peaks at 1.2 GB (issue #21: the default run stays within
/// 1 GB).
pub const THREAD_COUNTS_DEFAULT: [usize; 6] = [1, 2, 8, 32, 64, 256];

/// The thread counts of `--quick` (the CI smoke: one count past
/// `PerThread`'s 63 owned slots).
pub const THREAD_COUNTS_QUICK: [usize; 3] = [1, 2, 64];

/// Live objects per thread (its ring of slots).
pub const LIVE_PER_THREAD: usize = 64;

/// Entries of each thread's mailbox (a power of two).
pub const MAILBOX: usize = 64;

/// Every this many steps, the object taken out goes to the next thread.
pub const REMOTE_EVERY: usize = 4;

/// Steps between two drains of a thread's own mailbox.
const DRAIN_EVERY: usize = 16;

/// Checks of a full mailbox before its producer yields its CPU (about a
/// microsecond: what the next thread, if it is running, needs to reach its
/// next drain).
const SPINS_BEFORE_YIELD: u32 = 64;

/// Smallest and largest object (those of `slub-larson`).
pub const THREADS_SIZES: (usize, usize) = LARSON_SIZES;

/// Stack of each worker thread (a worker needs little; 1024 default 2 MiB
/// stacks would only cost address space, but their guard pages and
/// mappings make starting them slower).
const WORKER_STACK: usize = 128 << 10;

/// The competitors of the table: `GlobalSlub` and the malloc peers (what a
/// `std` program puts behind `#[global_allocator]`). The `no_std` heaps
/// behind a spin lock are left out: with more threads than CPUs a
/// preempted lock holder makes every waiter spin its time slice away.
pub const THREADS_ROWS: [&str; 6] = [
    GLOBAL_SLUB_ROW,
    PEERS[0],
    PEERS[1],
    PEERS[2],
    PEERS[3],
    PEERS[4],
];

/// The hidden flag that makes the runner a `slub-threads` child.
pub const THREADS_CHILD_FLAG: &str = "--slub-threads-child";

/// The shape of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadsParams {
    /// Worker threads.
    pub threads: usize,
    /// Timed part (the stop flag is set after this).
    pub millis: u64,
    /// Random seed.
    pub seed: u64,
    /// Pin worker `t` to the `t`th CPU of the list given (else each worker
    /// may run on any CPU of it).
    pub pin: bool,
}

/// What one run measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ThreadsResult {
    /// Steps (one alloc and one free, or hand-off, each), all threads.
    pub ops: u64,
    /// Wall time from the start barrier until the last thread stopped.
    pub secs: f64,
    /// Frees in the timed part.
    pub frees: u64,
    /// Those of objects another thread allocated.
    pub remote: u64,
    /// Times a thread found the next thread's mailbox full and gave its
    /// CPU away.
    pub waits: u64,
    /// Bytes live at the end (rings and mailboxes; requested sizes).
    pub live: u64,
    /// VmRSS before the workload, KiB (0 in-process).
    pub rss0_kb: u64,
    /// VmHWM after the workload, KiB (0 in-process).
    pub hwm_kb: u64,
}

/// One thread's mailbox: a bounded single-producer (the previous thread)
/// single-consumer (its owner) ring of objects to free, with cached
/// indices; pushing never waits (it fails when the mailbox is full).
#[repr(align(128))]
pub struct Mailbox {
    slots: [AtomicPtr<u8>; MAILBOX],
    /// Next entry to take (written by the owner).
    head: CachePadded<AtomicUsize>,
    /// Next entry to fill (written by the producer).
    tail: CachePadded<AtomicUsize>,
}

impl Default for Mailbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Mailbox {
    /// An empty mailbox.
    pub fn new() -> Self {
        Mailbox {
            slots: core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())),
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// The producer's push: `false` (nothing done) when full. `tail` and
    /// `head_seen` are the producer's own copies (start at 0).
    #[inline(always)]
    fn try_push(&self, tail: &mut usize, head_seen: &mut usize, p: *mut u8) -> bool {
        if tail.wrapping_sub(*head_seen) >= MAILBOX {
            *head_seen = self.head.load(Ordering::Acquire);
            if tail.wrapping_sub(*head_seen) >= MAILBOX {
                return false;
            }
        }
        self.slots[*tail % MAILBOX].store(p, Ordering::Relaxed);
        *tail = tail.wrapping_add(1);
        self.tail.store(*tail, Ordering::Release);
        true
    }

    /// The owner's drain: calls `f` on every entry there. `head` is the
    /// owner's own copy (starts at 0).
    #[inline(always)]
    fn drain(&self, head: &mut usize, mut f: impl FnMut(*mut u8)) {
        let tail = self.tail.load(Ordering::Acquire);
        if tail == *head {
            return;
        }
        while *head != tail {
            f(self.slots[*head % MAILBOX].load(Ordering::Relaxed));
            *head = head.wrapping_add(1);
        }
        self.head.store(*head, Ordering::Release);
    }
}

#[inline(always)]
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// A new object of random size, its size and allocating thread written in.
#[inline(always)]
fn obj_new<A: ObjHeap>(a: &A, rng: &mut u64, t: usize) -> *mut u8 {
    let span = (THREADS_SIZES.1 - THREADS_SIZES.0 + 1) as u64;
    let size = THREADS_SIZES.0 + (xorshift(rng) % span) as usize;
    let p = a.alloc(layout(size)).as_ptr();
    // SAFETY: a fresh object of at least 16 bytes aligned to 8.
    unsafe {
        p.cast::<u64>().write(size as u64);
        p.add(8).cast::<u32>().write(t as u32);
    }
    p
}

/// The size and the allocating thread of an object of [`obj_new`].
///
/// # Safety
///
/// `p` is a live object of `obj_new`.
#[inline(always)]
unsafe fn obj_header(p: *mut u8) -> (usize, usize) {
    // SAFETY: the caller's contract: written by `obj_new`.
    unsafe {
        (
            p.cast::<u64>().read() as usize,
            p.add(8).cast::<u32>().read() as usize,
        )
    }
}

/// Frees an object of [`obj_new`]; `true` if another thread than `t`
/// allocated it.
///
/// # Safety
///
/// `p` is a live object of `obj_new` on `a`, not used afterwards.
#[inline(always)]
unsafe fn obj_free<A: ObjHeap>(a: &A, p: *mut u8, t: usize) -> bool {
    // SAFETY: the caller's contract.
    unsafe {
        let (size, owner) = obj_header(p);
        a.free(NonNull::new_unchecked(p), layout(size));
        owner != t
    }
}

/// What one worker returns.
struct WorkerOut {
    ops: u64,
    stopped: Instant,
    frees: u64,
    remote: u64,
    waits: u64,
    live: u64,
}

/// The run's clock: the timed part starts when the last thread reaches the
/// start barrier (its leader records the time) and ends `millis` later;
/// every thread checks it itself (every ring lap), so a busy machine
/// that keeps some thread off its CPU delays only that thread's stop.
struct Clock {
    base: Instant,
    /// Nanoseconds from `base` to the start (0: not started yet).
    start_ns: AtomicU64,
    millis: u64,
}

impl Clock {
    fn start(&self) {
        let now = self.base.elapsed().as_nanos() as u64;
        self.start_ns.store(now.max(1), Ordering::Relaxed);
    }

    fn start_instant(&self) -> Instant {
        self.base + Duration::from_nanos(self.start_ns.load(Ordering::Relaxed))
    }

    #[inline(always)]
    fn over(&self) -> bool {
        let s = self.start_ns.load(Ordering::Relaxed);
        s != 0 && self.base.elapsed().as_nanos() as u64 >= s + self.millis * 1_000_000
    }
}

/// What the threads of a run share.
struct Shared {
    p: ThreadsParams,
    cpus: Vec<usize>,
    boxes: Vec<Mailbox>,
    clock: Clock,
    start: Barrier,
    end: Barrier,
    /// The workers (with `keep`) and the measuring thread: every result
    /// is in `outs`.
    done: Barrier,
    outs: Mutex<Vec<Option<WorkerOut>>>,
    keep: bool,
}

/// One worker's end of the mailboxes and its counts.
struct Worker<'a, A: ObjHeap> {
    a: &'a A,
    t: usize,
    inbox: &'a Mailbox,
    outbox: &'a Mailbox,
    head: usize,
    tail: usize,
    head_seen: usize,
    frees: u64,
    remote: u64,
    waits: u64,
}

impl<A: ObjHeap> Worker<'_, A> {
    /// Frees `p` here.
    ///
    /// # Safety
    ///
    /// `p` is a live object of `obj_new` on `a` that only we hold.
    #[inline(always)]
    unsafe fn free(&mut self, p: *mut u8) {
        // SAFETY: the caller's contract.
        self.remote += u64::from(unsafe { obj_free(self.a, p, self.t) });
        self.frees += 1;
    }

    /// Frees what the mailbox holds.
    #[inline(always)]
    fn drain(&mut self) {
        let (inbox, mut head) = (self.inbox, self.head);
        inbox.drain(&mut head, |q| {
            // SAFETY: handed to us by the previous thread, which no longer
            // uses it; a live object of `obj_new`.
            unsafe { self.free(q) }
        });
        self.head = head;
    }

    /// Hands `p` to the next thread. When its mailbox is full (it has not
    /// run since), empties our own (so a ring of waiting threads cannot
    /// wait on each other), spins briefly (the next thread may be running
    /// on another CPU, about to empty it) and then gives the CPU away until
    /// there is room; after the end of the run, frees `p` here instead.
    ///
    /// # Safety
    ///
    /// As [`free`](Self::free).
    #[inline(always)]
    unsafe fn hand_off(&mut self, p: *mut u8, clock: &Clock) {
        let mut spins = 0;
        loop {
            if self.outbox.try_push(&mut self.tail, &mut self.head_seen, p) {
                return;
            }
            self.drain();
            if self.outbox.try_push(&mut self.tail, &mut self.head_seen, p) {
                return;
            }
            if spins < SPINS_BEFORE_YIELD {
                spins += 1;
                core::hint::spin_loop();
                continue;
            }
            if clock.over() {
                // SAFETY: the caller's contract.
                return unsafe { self.free(p) };
            }
            self.waits += 1;
            std::thread::yield_now();
        }
    }
}

fn worker<A: ObjHeap>(a: &A, t: usize, sh: &Shared) -> WorkerOut {
    let n = sh.p.threads;
    if !sh.cpus.is_empty() {
        let _ = if sh.p.pin {
            pin_current_thread(sh.cpus[t % sh.cpus.len()])
        } else {
            allow_current_thread(&sh.cpus)
        };
    }
    a.enter_thread(t);
    let mut rng = sh.p.seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(t as u64 + 1)) | 1;
    let mut w = Worker {
        a,
        t,
        inbox: &sh.boxes[t],
        outbox: &sh.boxes[(t + 1) % n],
        head: 0,
        tail: 0,
        head_seen: 0,
        frees: 0,
        remote: 0,
        waits: 0,
    };
    let mut ring = [core::ptr::null_mut::<u8>(); LIVE_PER_THREAD];
    for s in ring.iter_mut() {
        *s = obj_new(a, &mut rng, t);
    }
    let mut ops = 0u64;
    if sh.start.wait().is_leader() {
        sh.clock.start();
    }
    while !sh.clock.over() {
        for (i, slot) in ring.iter_mut().enumerate() {
            let old = core::mem::replace(slot, obj_new(a, &mut rng, t));
            if i % REMOTE_EVERY == REMOTE_EVERY - 1 {
                // SAFETY: taken out of its slot: ours alone, live.
                unsafe { w.hand_off(old, &sh.clock) };
            } else {
                // SAFETY: as above.
                unsafe { w.free(old) };
            }
            if i % DRAIN_EVERY == DRAIN_EVERY - 1 {
                w.drain();
            }
        }
        ops += LIVE_PER_THREAD as u64;
    }
    let stopped = Instant::now();
    // Every thread has stopped handing off: the mailboxes are final.
    sh.end.wait();
    let mut live = 0u64;
    let mut last = |q: *mut u8| {
        // SAFETY: a live object of `obj_new` that only we hold now.
        live += unsafe { obj_header(q) }.0 as u64;
        if !sh.keep {
            // SAFETY: as above; freed once (its slot or entry is dropped).
            unsafe { obj_free(a, q, t) };
        }
    };
    for &q in &ring {
        last(q);
    }
    let mut head = w.head;
    w.inbox.drain(&mut head, &mut last);
    WorkerOut {
        ops,
        stopped,
        frees: w.frees,
        remote: w.remote,
        waits: w.waits,
        live,
    }
}

/// Runs the workload (see the [SLUB tables](super)) on `a` with
/// `p.threads` threads; `cpus` are the CPUs to pin to (`p.pin`) or to run
/// on (empty: the threads keep the caller's). `keep` leaves the objects
/// allocated at the end and the threads parked (a child process about to
/// exit: no thread exits, so no allocator's thread-exit work, all at once,
/// delays the exit), else the objects are freed and the threads joined.
///
/// The threads are started one at a time, each after the previous one is
/// running: the runner links rpmalloc with its `pthread_create` hook, so
/// every new thread, whatever the allocator measured, first takes
/// rpmalloc's global spin lock (no yield) to set up its heap, and a burst
/// of 1024 new threads spinning on a preempted holder took tens of
/// seconds. Starting them one by one costs a few milliseconds.
pub fn threads_run<A: ObjHeap>(
    a: &Arc<A>,
    p: &ThreadsParams,
    cpus: &[usize],
    keep: bool,
) -> ThreadsResult {
    assert!(p.threads >= 1);
    let sh = Arc::new(Shared {
        p: *p,
        cpus: cpus.to_vec(),
        boxes: (0..p.threads).map(|_| Mailbox::new()).collect(),
        clock: Clock {
            base: Instant::now(),
            start_ns: AtomicU64::new(0),
            millis: p.millis,
        },
        start: Barrier::new(p.threads),
        end: Barrier::new(p.threads),
        done: Barrier::new(p.threads + 1),
        outs: Mutex::new((0..p.threads).map(|_| None).collect()),
        keep,
    });
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let mut handles = Vec::with_capacity(p.threads);
    for t in 0..p.threads {
        let (sh, a, ready) = (Arc::clone(&sh), Arc::clone(a), ready_tx.clone());
        let h = std::thread::Builder::new()
            .stack_size(WORKER_STACK)
            .spawn(move || {
                let _ = ready.send(());
                drop(ready);
                let out = worker(&*a, t, &sh);
                sh.outs.lock().unwrap_or_else(|e| e.into_inner())[t] = Some(out);
                sh.done.wait();
                if sh.keep {
                    // The process exits with the thread parked here.
                    loop {
                        std::thread::park();
                    }
                }
            })
            .expect("mm-bench: cannot start a slub-threads worker");
        handles.push(h);
        // The new thread is running (its start-up hooks done).
        let _ = ready_rx.recv();
    }
    sh.done.wait();
    if !keep {
        for h in handles {
            h.join().expect("a slub-threads worker panicked");
        }
    }
    let outs: Vec<WorkerOut> = sh
        .outs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter_mut()
        .map(|o| o.take().expect("every worker reported"))
        .collect();
    let t0 = sh.clock.start_instant();
    ThreadsResult {
        ops: outs.iter().map(|o| o.ops).sum(),
        secs: outs
            .iter()
            .map(|o| o.stopped.saturating_duration_since(t0).as_secs_f64())
            .fold(0.0, f64::max),
        frees: outs.iter().map(|o| o.frees).sum(),
        remote: outs.iter().map(|o| o.remote).sum(),
        waits: outs.iter().map(|o| o.waits).sum(),
        live: outs.iter().map(|o| o.live).sum(),
        rss0_kb: 0,
        hwm_kb: 0,
    }
}

struct ThreadsJob<'a> {
    p: ThreadsParams,
    cpus: &'a [usize],
    keep: bool,
}

impl HeapJob for ThreadsJob<'_> {
    type Out = ThreadsResult;

    fn run<A: ObjHeap>(&mut self, a: &Arc<A>) -> ThreadsResult {
        let (rss0, _) = rss_kb();
        let mut r = threads_run(a, &self.p, self.cpus, self.keep);
        r.rss0_kb = rss0;
        r.hwm_kb = rss_kb().1;
        r
    }
}

/// The runner's hidden child mode: `mm-bench --slub-threads-child NAME
/// THREADS MILLIS SEED PIN CPUS` (PIN `1` or `0`, CPUS `0,1,...` or `-`)
/// runs one allocator's workload and prints one `threads ...` line. `None`
/// when the arguments are not such a child's.
pub fn threads_child_main() -> Option<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some(THREADS_CHILD_FLAG) {
        return None;
    }
    let parse = || -> Option<(String, ThreadsParams, Vec<usize>)> {
        let p = ThreadsParams {
            threads: args.get(2)?.parse().ok().filter(|&t| t >= 1)?,
            millis: args.get(3)?.parse().ok()?,
            seed: args.get(4)?.parse().ok()?,
            pin: args.get(5)? == "1",
        };
        Some((args.get(1)?.clone(), p, parse_cpus(args.get(6)?)?))
    };
    let Some((name, p, cpus)) = parse() else {
        eprintln!("mm-bench {THREADS_CHILD_FLAG}: bad arguments {args:?}");
        return Some(ExitCode::from(2));
    };
    // The runner pinned its measuring thread, and this process inherited
    // that: unpinned runs let the measuring thread run anywhere too.
    if !p.pin && !cpus.is_empty() {
        let _ = allow_current_thread(&cpus);
    }
    let comp = Competitors::new();
    let job = ThreadsJob {
        p,
        cpus: &cpus,
        keep: true,
    };
    let r = run_on(&comp, &name, job);
    report_if_asked(&name);
    let fields = r.map(|r| {
        [
            ("ops", r.ops.to_string()),
            ("secs", r.secs.to_string()),
            ("frees", r.frees.to_string()),
            ("remote", r.remote.to_string()),
            ("waits", r.waits.to_string()),
            ("live", r.live.to_string()),
            ("rss0_kb", r.rss0_kb.to_string()),
            ("hwm_kb", r.hwm_kb.to_string()),
        ]
    });
    finish_child(
        THREADS_CHILD_FLAG,
        &name,
        "threads",
        fields.as_ref().map(|f| &f[..]),
    )
}

/// Parses a child's `threads ...` line.
pub fn parse_threads_line(s: &str) -> Option<ThreadsResult> {
    let f = |k: &str| field::<u64>(s, "threads", k);
    Some(ThreadsResult {
        ops: f("ops")?,
        secs: field(s, "threads", "secs")?,
        frees: f("frees")?,
        remote: f("remote")?,
        waits: f("waits")?,
        live: f("live")?,
        rss0_kb: f("rss0_kb")?,
        hwm_kb: f("hwm_kb")?,
    })
}

/// Runs `name` in a child process (the runner re-executed), or in this
/// process if there is no runner binary (the RSS fields are then 0).
fn threads_child(
    comp: &Competitors,
    name: &str,
    p: ThreadsParams,
    cpus: &[usize],
) -> Result<ThreadsResult, ChildError> {
    let Some(exe) = runner_exe() else {
        let job = ThreadsJob {
            p,
            cpus,
            keep: false,
        };
        return run_on(comp, name, job)
            .ok_or_else(|| ChildError::Failed(format!("no allocator {name:?}")));
    };
    let args = [
        THREADS_CHILD_FLAG.to_string(),
        name.to_string(),
        p.threads.to_string(),
        p.millis.to_string(),
        p.seed.to_string(),
        if p.pin { "1" } else { "0" }.to_string(),
        cpus_arg(cpus),
    ];
    let out = run_child(&exe, &args, child_timeout(&p))?;
    parse_threads_line(&out).ok_or_else(|| ChildError::Failed(format!("no result line in {out:?}")))
}

/// How long a child may take before it is killed: its timed part, plus
/// starting and stopping its threads, plus a wide margin (an allocator
/// whose locks collapse under the thread count still gets its row, as a
/// timeout).
fn child_timeout(p: &ThreadsParams) -> Duration {
    Duration::from_millis(p.millis + 20 * p.threads as u64) + Duration::from_secs(20)
}

/// The timed part of a run at `threads` threads: longer for many threads,
/// so that each gets CPU time more than once (the scheduler gives two CPUs'
/// worth of time slices round the threads).
pub fn run_millis(cfg: &Config, threads: usize) -> u64 {
    let base = if cfg.quick {
        40
    } else if threads <= 8 {
        120
    } else if threads <= 64 {
        200
    } else {
        300
    };
    if cfg.full {
        base * 2
    } else {
        base
    }
}

/// `1 thread`, `N threads`.
fn thr(t: usize) -> String {
    if t == 1 {
        "1 thread".into()
    } else {
        format!("{t} threads")
    }
}

/// How long the table may run before it starts no new round: about a
/// minute by default (three rounds on a quiet two-CPU machine), five with
/// `--full`.
fn table_budget(cfg: &Config) -> Duration {
    Duration::from_secs(if cfg.full {
        300
    } else if cfg.quick {
        10
    } else {
        60
    })
}

/// Figures of one allocator at one thread count (medians over rounds).
#[derive(Clone, Copy)]
struct Fig {
    mops: f64,
    hwm_mib: f64,
}

/// The `slub-threads` table (see the [SLUB tables](super)).
pub struct SlubThreads;

impl Table for SlubThreads {
    fn name(&self) -> &'static str {
        "slub-threads"
    }

    fn about(&self) -> &'static str {
        "1..1024 threads replacing random 16..1024 B objects (64 live each, a quarter freed by the next thread): Mops/s and peak RSS, one child process per allocator: GlobalSlub, malloc peers"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let comp = Competitors::new();
        let all = names(&comp);
        let rows_of: Vec<&'static str> = THREADS_ROWS
            .iter()
            .copied()
            .filter(|n| all.contains(n))
            .collect();
        let cpus = cx.machine.allowed_cpus.clone();
        let ncpu = cpus.len().max(1);
        let counts = cx
            .cfg
            .sweep(&THREAD_COUNTS_QUICK, &THREAD_COUNTS_DEFAULT, &THREAD_COUNTS);
        let rounds = if cx.cfg.quick {
            1
        } else if cx.cfg.full {
            cx.cfg.rounds.clamp(1, 5)
        } else {
            cx.cfg.rounds.clamp(1, 3)
        };
        let seed0 = 0x5eed_7472_6561_6401u64;
        let pin_of = |t: usize| cx.cfg.pin && t <= ncpu;
        let work = two_cpu_work(Duration::from_millis(5));
        // res[count][allocator]: the rounds' results.
        let mut res: Vec<Vec<Vec<ThreadsResult>>> =
            vec![vec![Vec::new(); rows_of.len()]; counts.len()];
        let mut failed: Vec<Vec<Option<String>>> = vec![vec![None; rows_of.len()]; counts.len()];
        let mut ratios = Vec::new();
        let began = Instant::now();
        let budget = table_budget(cx.cfg);
        let mut done_rounds = 0;
        for round in 0..rounds {
            // A loaded machine (thread starts slow, allocators whose
            // start-up spin locks lose their holder) can make rounds far
            // longer than planned: no new round past the budget.
            if round > 0 && began.elapsed() > budget {
                break;
            }
            done_rounds += 1;
            for (ci, &t) in counts.iter().enumerate() {
                if t == 2 {
                    // Right before the two-thread runs, which it vouches for.
                    ratios.push(two_cpu_check(&cpus[..cpus.len().min(2)], cx.cfg.pin, work));
                }
                let p = ThreadsParams {
                    threads: t,
                    millis: run_millis(cx.cfg, t),
                    seed: seed0.wrapping_add(round as u64),
                    pin: pin_of(t),
                };
                for k in 0..rows_of.len() {
                    let i = (round + ci + k) % rows_of.len();
                    // A timeout is not retried (it would cost the same).
                    if failed[ci][i]
                        .as_deref()
                        .is_some_and(|e| e.contains("killed"))
                    {
                        continue;
                    }
                    match threads_child(&comp, rows_of[i], p, &cpus) {
                        Ok(r) => res[ci][i].push(r),
                        Err(e) => {
                            eprintln!("mm-bench: slub-threads, {} at {t} threads: {e}", rows_of[i]);
                            failed[ci][i] = Some(e.to_string());
                        }
                    }
                }
            }
        }
        let two_cpu = Spread::of(&ratios).map(|s| s.median);

        let mut rows = Vec::new();
        let mut verdicts = Vec::new();
        let mut notes = vec![
            format!(
                "each of T threads keeps {LIVE_PER_THREAD} live objects in a ring and replaces them in turn: alloc (size uniform in \
                 {}..={} B), write its size and thread into it, free the object it replaces; every {REMOTE_EVERY}th replaced object \
                 goes to the next thread's {MAILBOX}-entry mailbox instead (freed by that thread, which empties its mailbox every \
                 {DRAIN_EVERY} steps; when the next mailbox is full, the thread empties its own and yields its CPU until there is \
                 room: objects in flight stay bounded, a quarter of the frees stay remote at every thread count). 'remote' is the \
                 measured share of the timed frees whose object another thread allocated (0 with one thread: its mailbox is its \
                 own); 'waits' the yields per 1000 pairs.",
                THREADS_SIZES.0, THREADS_SIZES.1
            ),
            format!(
                "fixed time per run ({} ms at 1-8 threads, {} ms at 32-64, {} ms above), threads started together at a barrier; \
                 Mops/s = all threads' alloc+free pairs / wall time from the barrier until the last thread stopped; ns/op = its \
                 inverse (ns per pair, all threads together). Rows with at most {ncpu} threads (the CPUs allowed) are pinned, \
                 one thread per CPU, the 2-thread row with the two-CPU check beside it; rows with more threads than CPUs are \
                 NOT pinned (the scheduler places them).",
                run_millis(cx.cfg, 1),
                run_millis(cx.cfg, 32),
                run_millis(cx.cfg, 256)
            ),
            format!(
                "peak RSS: each run in its own child process (the runner re-executed with a hidden flag), VmHWM at the end (the \
                 whole child: the runner's own pages, 'the child's start', the worker stacks and, through the rpmalloc \
                 pthread_create hook the runner is linked with, an rpmalloc heap per thread count for every allocator alike); {done_rounds} round(s) of {rounds} planned (no new round after {} s), interleaved across the allocators, \
                 medians. Peers: the malloc allocators (the no_std \
                 heaps behind a spin lock are left out: with more threads than CPUs a preempted lock holder makes every waiter \
                 spin its time slice away).",
                budget.as_secs()
            ),
            "the hand-off couples each thread to the next: a thread whose neighbour has had no CPU for a while waits (yields). \
             With other processes on the CPUs, the pinned two-thread row suffers most (the two threads then rarely run at once; \
             its two-CPU check is measured right before it, but only for 5 ms)."
                .to_string(),
        ];
        for (ci, &t) in counts.iter().enumerate() {
            let pinned = pin_of(t);
            let section = format!(
                "{}, {}",
                thr(t),
                if pinned {
                    "pinned one per CPU".to_string()
                } else if t > ncpu {
                    format!("not pinned ({t} > {ncpu} CPUs)")
                } else {
                    "not pinned".to_string()
                }
            );
            let mut figs: Vec<(&'static str, Fig)> = Vec::new();
            for (i, name) in rows_of.iter().enumerate() {
                let rs = &res[ci][i];
                if rs.is_empty() {
                    continue;
                }
                let mops: Vec<f64> = rs
                    .iter()
                    .map(|r| r.ops as f64 / r.secs.max(1e-9) / 1e6)
                    .collect();
                let ns: Vec<f64> = mops.iter().map(|m| 1e3 / m.max(1e-12)).collect();
                let hwm: Vec<f64> = rs.iter().map(|r| r.hwm_kb as f64 / 1024.0).collect();
                let foot: Vec<f64> = rs
                    .iter()
                    .map(|r| r.hwm_kb.saturating_sub(r.rss0_kb) as f64 / 1024.0)
                    .collect();
                let remote: Vec<f64> = rs
                    .iter()
                    .map(|r| 100.0 * r.remote as f64 / r.frees.max(1) as f64)
                    .collect();
                let waits: Vec<f64> = rs
                    .iter()
                    .map(|r| 1000.0 * r.waits as f64 / r.ops.max(1) as f64)
                    .collect();
                let live = rs.iter().map(|r| r.live as f64).sum::<f64>()
                    / rs.len() as f64
                    / (1 << 20) as f64;
                let (Some(ns), Some(mops), Some(hwm), Some(foot), Some(remote), Some(waits)) = (
                    Spread::of(&ns),
                    Spread::of(&mops),
                    Spread::of(&hwm),
                    Spread::of(&foot),
                    Spread::of(&remote),
                    Spread::of(&waits),
                ) else {
                    continue;
                };
                let note = if hwm.median > 0.0 {
                    format!(
                        "{} Mops/s; peak RSS {} MiB ({} above the child's start; {} MiB live at the end); remote {:.0}%; waits {}",
                        fmt_num(mops.median),
                        fmt_num(hwm.median),
                        fmt_num(foot.median),
                        fmt_num(live),
                        remote.median,
                        fmt_num(waits.median)
                    )
                } else {
                    format!(
                        "{} Mops/s (in-process: no per-allocator RSS); remote {:.0}%; waits {}",
                        fmt_num(mops.median),
                        remote.median,
                        fmt_num(waits.median)
                    )
                };
                figs.push((
                    name,
                    Fig {
                        mops: mops.median,
                        hwm_mib: hwm.median,
                    },
                ));
                rows.push(Row {
                    case: Case::raw(*name, |_, _| {})
                        .threads(t)
                        .section(section.clone())
                        .note(note),
                    stats: Stats {
                        ns,
                        cycles: None,
                        iters: rs.iter().map(|r| r.ops).sum::<u64>() / rs.len() as u64,
                        rounds: rs.len(),
                        two_cpu: if t == 2 && pinned { two_cpu } else { None },
                        remeasured: false,
                        flags: Vec::new(),
                    },
                });
            }
            for (i, name) in rows_of.iter().enumerate() {
                if let Some(e) = &failed[ci][i] {
                    notes.push(format!("{}: {name} {e}", thr(t)));
                }
            }
            let slub = figs.iter().find(|f| f.0 == GLOBAL_SLUB_ROW).map(|f| f.1);
            let peers: Vec<&(&'static str, Fig)> =
                figs.iter().filter(|f| PEERS.contains(&f.0)).collect();
            let best = peers
                .iter()
                .max_by(|a, b| a.1.mops.total_cmp(&b.1.mops))
                .copied();
            let leanest = peers
                .iter()
                .filter(|f| f.1.hwm_mib > 0.0)
                .min_by(|a, b| a.1.hwm_mib.total_cmp(&b.1.hwm_mib))
                .copied();
            // GlobalSlub without a result (its runs failed or timed out)
            // misses both targets.
            let s = slub.unwrap_or(Fig {
                mops: 0.0,
                hwm_mib: f64::INFINITY,
            });
            let sec_rows: Vec<Row> = rows
                .iter()
                .filter(|r| r.case.section == section)
                .cloned()
                .collect();
            if let Some((bname, b)) = best {
                verdicts.push(
                    Verdict::at_least(
                        format!("{}: GlobalSlub >= best peer", thr(t)),
                        s.mops,
                        b.mops,
                        "Mops/s",
                    )
                    .vs_peer(s.mops / b.mops)
                    .on(&sec_rows, &[GLOBAL_SLUB_ROW, bname]),
                );
                notes.push(format!(
                    "{}: GlobalSlub {} Mops/s vs best peer {bname} {} Mops/s ({:.2}x): {}",
                    thr(t),
                    fmt_num(s.mops),
                    fmt_num(b.mops),
                    s.mops / b.mops,
                    verdict(s.mops >= b.mops)
                ));
            }
            if let Some((lname, l)) = leanest {
                let limit = 1.25 * l.hwm_mib;
                verdicts.push(
                    Verdict::at_most(
                        format!("{}: GlobalSlub peak RSS <= 1.25x lowest peer", thr(t)),
                        s.hwm_mib,
                        limit,
                        "MiB",
                    )
                    .on(&sec_rows, &[GLOBAL_SLUB_ROW, lname]),
                );
                notes.push(format!(
                    "{}: GlobalSlub peak RSS {} MiB vs 1.25x lowest peer {lname} ({} MiB) = {} MiB ({:.2}x): {}",
                    thr(t),
                    fmt_num(s.hwm_mib),
                    fmt_num(l.hwm_mib),
                    fmt_num(limit),
                    s.hwm_mib / l.hwm_mib,
                    verdict(s.hwm_mib <= limit)
                ));
            }
        }
        Report {
            table: "slub-threads",
            title: "1 to 1024 threads churning random 16..1024 B objects: throughput and peak RSS"
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
    use super::*;

    #[test]
    fn mailbox_hands_over_in_order_and_refuses_when_full() {
        let m = Mailbox::new();
        let (mut tail, mut seen, mut head) = (0, 0, 0);
        let objs: Vec<*mut u8> = (1..=MAILBOX + 1).map(|i| (i * 8) as *mut u8).collect();
        for &p in &objs[..MAILBOX] {
            assert!(m.try_push(&mut tail, &mut seen, p));
        }
        assert!(!m.try_push(&mut tail, &mut seen, objs[MAILBOX]));
        let mut got = Vec::new();
        m.drain(&mut head, |p| got.push(p));
        assert_eq!(got, objs[..MAILBOX]);
        assert!(m.try_push(&mut tail, &mut seen, objs[MAILBOX]));
        got.clear();
        m.drain(&mut head, |p| got.push(p));
        assert_eq!(got, [objs[MAILBOX]]);
    }

    #[test]
    fn threads_run_and_free_in_process() {
        let comp = Competitors::new();
        for threads in [1, 3, 70] {
            let p = ThreadsParams {
                threads,
                millis: 20,
                seed: 1,
                pin: false,
            };
            for name in THREADS_ROWS {
                let job = ThreadsJob {
                    p,
                    cpus: &[],
                    keep: false,
                };
                let r = run_on(&comp, name, job).expect("a competitor");
                assert!(r.ops > 0 && r.secs > 0.0, "{name}");
                assert!(r.frees > 0 && r.remote <= r.frees, "{name}");
                if threads == 1 {
                    assert_eq!(r.remote, 0, "{name}: one thread frees its own");
                }
                let objs = (threads * LIVE_PER_THREAD) as u64;
                assert!(
                    r.live >= objs * 16 && r.live <= (objs + (threads * MAILBOX) as u64) * 1024,
                    "{name}: {} live bytes",
                    r.live
                );
            }
        }
        let line = "threads ops=10 secs=0.5 frees=9 remote=2 waits=4 live=100 rss0_kb=3 hwm_kb=9\n";
        assert_eq!(
            parse_threads_line(line),
            Some(ThreadsResult {
                ops: 10,
                secs: 0.5,
                frees: 9,
                remote: 2,
                waits: 4,
                live: 100,
                rss0_kb: 3,
                hwm_kb: 9
            })
        );
        assert_eq!(parse_threads_line("larson ops=1"), None);
    }
}
