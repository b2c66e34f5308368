//! `memory-return` (issue #17): does memory go back to the OS? The issue's
//! steps, with the resident set size (RSS, `/proc/self/statm`) after each,
//! for `GlobalSlub`, `GlobalPcp`, `GlobalBuddy` and the malloc peers that
//! have a trim call (glibc `malloc_trim(0)`, mimalloc `mi_collect(true)`,
//! jemalloc `thread.tcache.flush` + `arena.<all>.purge`), each allocator in
//! its own child process (the runner re-executed with
//! [`MEMORY_RETURN_CHILD_FLAG`], through the machinery of the SLUB tables'
//! [`child`](super::slub::child)), so that its RSS is its own:
//!
//! 1. objects of 64 B..64 KiB (log-uniform sizes) allocated and written
//!    (one byte per page) until their requested bytes reach the step's
//!    size (1 GiB under `--full`);
//! 2. all freed (in random order);
//! 3. 1.5 s of waiting, nothing allocated (the decay of allocators that
//!    purge by themselves over time);
//! 4. the allocator's trim;
//! 5. 256 blocks of 4 MiB allocated, written, and all freed;
//! 6. one block of 1 GiB allocated, written, and freed (RSS just before
//!    it and just after its free);
//! 7. 512 MiB of small objects again (live).
//!
//! The default run scales every size down by 8 (128 MiB of objects, 32
//! blocks of 4 MiB, one 128 MiB block, 64 MiB again), `--quick` by 32 with
//! a 0.2 s wait; `--full` runs the sizes.
//!
//! The targets become verdicts: after the trim, `GlobalSlub`'s,
//! `GlobalPcp`'s and `GlobalBuddy`'s RSS at most 1.1x the best peer's
//! after its trim and at most 32 MiB above the child's RSS before step 1
//! (no live data is left then); the large block freed: RSS back to within
//! 8 MiB of where it was before it, at once.
//!
//! Then **the cost of purging**, in this process: `slub-pairs`' pairs,
//! `slub-larson`'s churn and page churns of `GlobalPcp` and `GlobalBuddy`
//! with the automatic decay on (the default policy) and off
//! ([`GlobalBuddy::set_decay_paused`]: the decay returns before reading the
//! clock, as a policy without decay), interleaved round by round; the
//! issue's target is "on" within 3% of "off".

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use buddy::GlobalBuddy;
use pcp::GlobalPcp;

use super::slub::child::{field, result_line, run_child, runner_exe, ChildError};
use super::slub::{larson_run, LarsonParams, ObjHeap, SlubHeap, GLOBAL_SLUB};
use crate::measure::{
    black_box, fmt_num, Case, Ctx, Report, Row, Spread, Stats, Stopwatch, Verdict,
};
use crate::tables::pages::verdict;
use crate::tables::Table;

/// The hidden flag that makes the runner a `memory-return` child.
pub const MEMORY_RETURN_CHILD_FLAG: &str = "--memory-return-child";

/// The allocators of the table, in print order: this family's three
/// global allocators, then the peers with a trim call.
pub const MEMORY_RETURN_ROWS: [&str; 6] = [
    "GlobalSlub",
    "GlobalPcp",
    "GlobalBuddy",
    "glibc (System)",
    "mimalloc",
    "jemalloc",
];

/// How many of [`MEMORY_RETURN_ROWS`] are this family's.
const OURS: usize = 3;

/// The `GlobalPcp` of the table (its children, and the cost check's page
/// churn in the runner).
static MR_PCP: GlobalPcp = GlobalPcp::new();

/// The `GlobalBuddy` of the table.
static MR_BUDDY: GlobalBuddy = GlobalBuddy::new();

/// Smallest and largest object of steps 1 and 7.
pub const OBJ_SIZES: (usize, usize) = (64, 64 << 10);

/// The 4 MiB blocks of step 5 (the buddy's largest block).
pub const BIG_BLOCK: usize = 4 << 20;

/// The sizes of one run, scaled from the by `1 >> shift`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrParams {
    /// Divide the sizes by `2^shift` (0 under `--full`).
    pub shift: u32,
    /// Step 3's wait, ms.
    pub wait_ms: u64,
    /// Random seed.
    pub seed: u64,
}

impl MrParams {
    /// Requested bytes of step 1's objects.
    pub fn objects(&self) -> usize {
        (1 << 30) >> self.shift
    }
    /// Blocks of [`BIG_BLOCK`] in step 5.
    pub fn big_blocks(&self) -> usize {
        256 >> self.shift
    }
    /// Bytes of step 6's block.
    pub fn one_block(&self) -> usize {
        (1 << 30) >> self.shift
    }
    /// Requested bytes of step 7's objects.
    pub fn again(&self) -> usize {
        (512 << 20) >> self.shift
    }
}

/// RSS after each step, bytes (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MrResult {
    /// Before step 1.
    pub start: u64,
    /// Step 1: the objects live.
    pub live: u64,
    /// Step 2: all freed.
    pub freed: u64,
    /// Step 3: after the wait.
    pub waited: u64,
    /// Step 4: after the trim.
    pub trimmed: u64,
    /// The trim's duration, ns.
    pub trim_ns: u64,
    /// Step 5: the 4 MiB blocks live.
    pub big_live: u64,
    /// Step 5: the 4 MiB blocks freed.
    pub big_freed: u64,
    /// Step 6: just before the large block.
    pub one_before: u64,
    /// Step 6: the large block live.
    pub one_live: u64,
    /// Step 6: right after its free.
    pub one_freed: u64,
    /// Step 7: the objects live again.
    pub again: u64,
    /// Requested bytes of step 1 (live data).
    pub live_bytes: u64,
}

/// RSS now, bytes (0 if unknown).
fn rss() -> u64 {
    local_lock::os::resident_bytes().unwrap_or(0) as u64
}

#[inline(always)]
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// A log-uniform size in [`OBJ_SIZES`]: a power of two from 64 B to
/// 32 KiB, then uniform up to twice it.
fn obj_size(rng: &mut u64) -> usize {
    let r = xorshift(rng);
    let k = 6 + (r % 10) as u32;
    let base = 1usize << k;
    (base + ((r >> 8) as usize % base)).min(OBJ_SIZES.1)
}

fn lay(size: usize) -> Layout {
    match Layout::from_size_align(size, 8) {
        Ok(l) => l,
        Err(_) => panic!("mm-bench: bad size {size}"),
    }
}

/// Allocates `size` bytes from `g` and writes one byte per 4 KiB (so the
/// memory is resident), panicking when the allocator is exhausted.
fn alloc_touch<G: GlobalAlloc>(g: &G, size: usize) -> *mut u8 {
    // SAFETY: a non-zero size.
    let p = unsafe { g.alloc(lay(size)) };
    assert!(
        !p.is_null(),
        "mm-bench: memory-return: out of memory ({size} B)"
    );
    let mut off = 0;
    while off < size {
        // SAFETY: inside the fresh allocation.
        unsafe { p.add(off).write_volatile(1) };
        off += 4096;
    }
    // SAFETY: as above (the last byte).
    unsafe { p.add(size - 1).write_volatile(1) };
    p
}

/// Allocates objects of [`obj_size`] until `bytes` are requested; returns
/// them with their sizes.
fn fill<G: GlobalAlloc>(g: &G, bytes: usize, rng: &mut u64) -> Vec<(*mut u8, usize)> {
    let mut v = Vec::with_capacity(bytes / 2048 + 16);
    let mut total = 0;
    while total < bytes {
        let s = obj_size(rng);
        v.push((alloc_touch(g, s), s));
        total += s;
    }
    v
}

/// Frees `objs` in a random order.
///
/// # Safety
///
/// Live objects of `g` with these sizes, not used afterwards.
unsafe fn free_all<G: GlobalAlloc>(g: &G, mut objs: Vec<(*mut u8, usize)>, rng: &mut u64) {
    for i in (1..objs.len()).rev() {
        let j = (xorshift(rng) % (i as u64 + 1)) as usize;
        objs.swap(i, j);
    }
    for (p, s) in objs {
        // SAFETY: the caller's contract.
        unsafe { g.dealloc(p, lay(s)) };
    }
}

/// The steps on `g` with its `trim`; `keep` leaves step 7's
/// objects allocated (a child about to exit), else they are freed.
pub fn memory_return_run<G: GlobalAlloc>(
    g: &G,
    trim: impl Fn(),
    p: &MrParams,
    keep: bool,
) -> MrResult {
    let mut rng = p.seed | 1;
    let mut r = MrResult {
        start: rss(),
        ..MrResult::default()
    };
    let objs = fill(g, p.objects(), &mut rng);
    r.live_bytes = objs.iter().map(|o| o.1 as u64).sum();
    r.live = rss();
    // SAFETY: every object is live, freed once.
    unsafe { free_all(g, objs, &mut rng) };
    r.freed = rss();
    std::thread::sleep(Duration::from_millis(p.wait_ms));
    r.waited = rss();
    let t = Instant::now();
    trim();
    r.trim_ns = t.elapsed().as_nanos() as u64;
    r.trimmed = rss();
    let big: Vec<*mut u8> = (0..p.big_blocks())
        .map(|_| alloc_touch(g, BIG_BLOCK))
        .collect();
    r.big_live = rss();
    for b in big {
        // SAFETY: allocated above with this layout, freed once.
        unsafe { g.dealloc(b, lay(BIG_BLOCK)) };
    }
    r.big_freed = rss();
    r.one_before = rss();
    let one = alloc_touch(g, p.one_block());
    r.one_live = rss();
    // SAFETY: as above.
    unsafe { g.dealloc(one, lay(p.one_block())) };
    r.one_freed = rss();
    let again = fill(g, p.again(), &mut rng);
    r.again = rss();
    if !keep {
        // SAFETY: live objects, freed once.
        unsafe { free_all(g, again, &mut rng) };
    } else {
        std::mem::forget(again);
    }
    r
}

// mimalloc's collection (`mi_collect`), from the library the `mimalloc`
// crate links (its `-sys` crate declares it only with a feature that needs
// a crate this workspace does not have).
extern "C" {
    fn mi_collect(force: bool);
}

/// jemalloc's trim: flush this thread's cache, then purge every arena
/// (`MALLCTL_ARENAS_ALL` = 4096).
fn jemalloc_purge() {
    for name in [&b"thread.tcache.flush\0"[..], b"arena.4096.purge\0"] {
        // SAFETY: a NUL-terminated control name that takes no argument.
        unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr().cast(),
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                0,
            )
        };
    }
}

/// Runs the steps on the allocator called `name`; `None` if there is none.
pub fn memory_return_on(name: &str, p: &MrParams, keep: bool) -> Option<MrResult> {
    Some(match name {
        "GlobalSlub" => memory_return_run(
            &GLOBAL_SLUB,
            || {
                GLOBAL_SLUB.trim();
            },
            p,
            keep,
        ),
        "GlobalPcp" => memory_return_run(
            &MR_PCP,
            || {
                MR_PCP.trim();
            },
            p,
            keep,
        ),
        "GlobalBuddy" => memory_return_run(
            &MR_BUDDY,
            || {
                MR_BUDDY.trim();
            },
            p,
            keep,
        ),
        "glibc (System)" => memory_return_run(
            &System,
            || {
                // SAFETY: no precondition.
                unsafe { libc::malloc_trim(0) };
            },
            p,
            keep,
        ),
        "mimalloc" => memory_return_run(
            &mimalloc::MiMalloc,
            || {
                // SAFETY: no precondition.
                unsafe { mi_collect(true) }
            },
            p,
            keep,
        ),
        "jemalloc" => memory_return_run(&tikv_jemallocator::Jemalloc, jemalloc_purge, p, keep),
        _ => return None,
    })
}

const KEYS: [&str; 13] = [
    "start",
    "live",
    "freed",
    "waited",
    "trimmed",
    "trim_ns",
    "big_live",
    "big_freed",
    "one_before",
    "one_live",
    "one_freed",
    "again",
    "live_bytes",
];

impl MrResult {
    fn values(&self) -> [u64; 13] {
        [
            self.start,
            self.live,
            self.freed,
            self.waited,
            self.trimmed,
            self.trim_ns,
            self.big_live,
            self.big_freed,
            self.one_before,
            self.one_live,
            self.one_freed,
            self.again,
            self.live_bytes,
        ]
    }

    fn from_values(v: [u64; 13]) -> Self {
        MrResult {
            start: v[0],
            live: v[1],
            freed: v[2],
            waited: v[3],
            trimmed: v[4],
            trim_ns: v[5],
            big_live: v[6],
            big_freed: v[7],
            one_before: v[8],
            one_live: v[9],
            one_freed: v[10],
            again: v[11],
            live_bytes: v[12],
        }
    }
}

/// A child's result line.
pub fn memory_return_line(r: &MrResult) -> String {
    let f: Vec<(&str, String)> = KEYS
        .iter()
        .zip(r.values())
        .map(|(k, v)| (*k, v.to_string()))
        .collect();
    result_line("memret", &f)
}

/// Parses a child's `memret ...` line.
pub fn parse_memory_return_line(s: &str) -> Option<MrResult> {
    let mut v = [0u64; 13];
    for (k, slot) in KEYS.iter().zip(v.iter_mut()) {
        *slot = field(s, "memret", k)?;
    }
    Some(MrResult::from_values(v))
}

/// The runner's hidden child mode: `mm-bench --memory-return-child NAME
/// SHIFT WAIT_MS SEED` runs the steps on one allocator and prints one
/// `memret ...` line. `None` when the arguments are not such a child's.
pub fn memory_return_child_main() -> Option<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some(MEMORY_RETURN_CHILD_FLAG) {
        return None;
    }
    let parse = || -> Option<(String, MrParams)> {
        let p = MrParams {
            shift: args.get(2)?.parse().ok().filter(|&s| s <= 8)?,
            wait_ms: args.get(3)?.parse().ok()?,
            seed: args.get(4)?.parse().ok()?,
        };
        Some((args.get(1)?.clone(), p))
    };
    let Some((name, p)) = parse() else {
        eprintln!("mm-bench {MEMORY_RETURN_CHILD_FLAG}: bad arguments {args:?}");
        return Some(ExitCode::from(2));
    };
    match memory_return_on(&name, &p, true) {
        Some(r) => {
            println!("{}", memory_return_line(&r));
            std::process::exit(0)
        }
        None => {
            eprintln!("mm-bench {MEMORY_RETURN_CHILD_FLAG}: no allocator {name:?}");
            Some(ExitCode::from(2))
        }
    }
}

/// Runs `name` in a child process, or in this one (RSS figures then mix
/// every allocator's) when there is no runner binary.
fn memory_return_child(name: &str, p: MrParams) -> Result<MrResult, ChildError> {
    let Some(exe) = runner_exe() else {
        return memory_return_on(name, &p, false)
            .ok_or_else(|| ChildError::Failed(format!("no allocator {name:?}")));
    };
    let args = [
        MEMORY_RETURN_CHILD_FLAG.to_string(),
        name.to_string(),
        p.shift.to_string(),
        p.wait_ms.to_string(),
        p.seed.to_string(),
    ];
    let timeout = Duration::from_secs(60) + Duration::from_millis(p.wait_ms);
    let out = run_child(&exe, &args, timeout)?;
    parse_memory_return_line(&out)
        .ok_or_else(|| ChildError::Failed(format!("no result line in {out:?}")))
}

// ---------------------------------------------------------------------------
// The cost of purging
// ---------------------------------------------------------------------------

/// Turns the automatic decay of every heap the cost check uses on or off.
fn set_purging(on: bool) {
    for b in [
        GLOBAL_SLUB.pages().pcp().source(),
        MR_PCP.pcp().source(),
        &MR_BUDDY,
    ] {
        b.set_decay_paused(!on);
    }
}

/// `on`/`off` row name.
fn onoff(on: bool) -> &'static str {
    if on {
        "purging on (default policy)"
    } else {
        "purging off (decay paused)"
    }
}

/// A pair case on `GlobalSlub` with purging `on`.
fn slub_pair_case(size: usize, on: bool) -> Case {
    let l = lay(size);
    Case::custom(onoff(on), move |_, iters| {
        set_purging(on);
        let a = SlubHeap(&GLOBAL_SLUB);
        let sw = Stopwatch::start();
        for _ in 0..iters {
            let p = black_box(a.alloc(l));
            // SAFETY: allocated just above with `l`, freed once.
            unsafe { a.free(p, l) };
        }
        sw.stop()
    })
    .section(format!("cost: slub-pairs {size} B (ns per pair)"))
}

/// A page churn on `g` with purging `on`: `n` blocks of `size` allocated,
/// then freed, per operation (ns per block).
fn page_case<G: GlobalAlloc + Sync + 'static>(
    g: &'static G,
    what: &str,
    size: usize,
    n: usize,
    on: bool,
) -> Case {
    let l = match Layout::from_size_align(size, 4096) {
        Ok(l) => l,
        Err(_) => panic!("bad page layout"),
    };
    Case::custom(onoff(on), move |_, iters| {
        set_purging(on);
        let mut v = vec![core::ptr::null_mut::<u8>(); n];
        let sw = Stopwatch::start();
        for _ in 0..iters.div_ceil(n as u64) {
            for s in v.iter_mut() {
                // SAFETY: non-zero size.
                *s = black_box(unsafe { g.alloc(l) });
            }
            for &s in &v {
                // SAFETY: allocated above with `l`, freed once.
                unsafe { g.dealloc(s, l) };
            }
        }
        let mut e = sw.stop();
        // Per block (the loop did whole churns of `n`).
        let done = iters.div_ceil(n as u64) * n as u64;
        e.ns *= iters as f64 / done as f64;
        e.cycles = e.cycles.map(|c| c * iters as f64 / done as f64);
        e
    })
    .section(format!("cost: pages, {what} (ns per block)"))
}

/// Larson's churn on `GlobalSlub` (two threads, `millis` each round) with
/// purging on and off, interleaved; Mops/s per round for `[on, off]`.
fn larson_cost(cx: &Ctx<'_>, rounds: usize, millis: u64) -> [Vec<f64>; 2] {
    let a = Arc::new(SlubHeap(&GLOBAL_SLUB));
    let cpus = cx.machine.allowed_cpus.clone();
    let p = LarsonParams {
        threads: 2,
        millis,
        slots: 8192,
        seed: 0x5eed_1a25_0000_0017,
    };
    let mut out = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for k in 0..2 {
            let on = (round + k) % 2 == 0;
            set_purging(on);
            let r = larson_run(
                &*a,
                &LarsonParams {
                    seed: p.seed + round as u64,
                    ..p
                },
                &cpus,
                cx.cfg.pin,
                false,
            );
            out[usize::from(!on)].push(r.ops as f64 / r.secs.max(1e-9) / 1e6);
        }
    }
    set_purging(true);
    out
}

// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

/// A row of the RSS table: its label and its figure.
type Step = (&'static str, fn(&MrResult) -> u64);

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// The `memory-return` table (see the module docs).
pub struct MemoryReturn;

impl Table for MemoryReturn {
    fn name(&self) -> &'static str {
        "memory-return"
    }

    fn about(&self) -> &'static str {
        "issue #17: RSS after 1 GiB of 64 B..64 KiB objects, their free, 1.5 s, the trim, 256 x 4 MiB, a 1 GiB block, 512 MiB again (sizes / 8 by default), one child per allocator: GlobalSlub, GlobalPcp, GlobalBuddy, glibc, mimalloc, jemalloc; and the cost of purging (pairs, larson, pages: on vs off)"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let p = MrParams {
            shift: if cx.cfg.quick {
                5
            } else if cx.cfg.full {
                0
            } else {
                3
            },
            wait_ms: if cx.cfg.quick { 200 } else { 1500 },
            seed: 0x5eed_6d65_6d72_6574,
        };
        let mut res: Vec<Option<MrResult>> = Vec::new();
        let mut notes = Vec::new();
        for name in MEMORY_RETURN_ROWS {
            match memory_return_child(name, p) {
                Ok(r) => res.push(Some(r)),
                Err(e) => {
                    eprintln!("mm-bench: memory-return, {name}: {e}");
                    notes.push(format!("{name}: {e}"));
                    res.push(None);
                }
            }
        }
        let in_process = runner_exe().is_none();

        // The RSS table, steps down, allocators across (MiB).
        let steps: [Step; 11] = [
            ("child start", |r| r.start),
            ("1. objects live", |r| r.live),
            ("2. all freed", |r| r.freed),
            ("3. after the wait", |r| r.waited),
            ("4. after the trim", |r| r.trimmed),
            ("5. 4 MiB blocks live", |r| r.big_live),
            ("5. 4 MiB blocks freed", |r| r.big_freed),
            ("6. before the large block", |r| r.one_before),
            ("6. large block live", |r| r.one_live),
            ("6. large block freed", |r| r.one_freed),
            ("7. objects live again", |r| r.again),
        ];
        let short = [
            "GlobalSlub",
            "GlobalPcp",
            "GlobalBuddy",
            "glibc",
            "mimalloc",
            "jemalloc",
        ];
        let mut t = format!(
            "RSS in MiB after each step{}:\n",
            if in_process {
                " (IN-PROCESS: the allocators' figures mix)"
            } else {
                ""
            }
        );
        t.push_str(&format!("  {:<28}", "step"));
        for s in short {
            t.push_str(&format!("{s:>12}"));
        }
        for (what, f) in steps {
            t.push_str(&format!("\n  {what:<28}"));
            for r in &res {
                match r {
                    Some(r) => t.push_str(&format!("{:>12.1}", mib(f(r)))),
                    None => t.push_str(&format!("{:>12}", "-")),
                }
            }
        }
        t.push_str(&format!("\n  {:<28}", "trim (ms)"));
        for r in &res {
            match r {
                Some(r) => t.push_str(&format!("{:>12.2}", r.trim_ns as f64 / 1e6)),
                None => t.push_str(&format!("{:>12}", "-")),
            }
        }
        notes.insert(0, t);
        notes.push(format!(
            "steps (issue #17; this run's sizes: {} MiB of objects, {} x 4 MiB, one {} MiB block, {} MiB again; the issue's 1 GiB / 256 / 1 GiB / 512 MiB under --full, 1/8 of them by default, 1/32 with --quick): \
             1. objects of 64 B..64 KiB (log-uniform) allocated and written, one byte per page, until their requested bytes reach the size; \
             2. all freed in random order; 3. {} ms with nothing allocated; 4. the allocator's trim (GlobalSlub/GlobalPcp/GlobalBuddy: trim(); glibc: malloc_trim(0); \
             mimalloc: mi_collect(true); jemalloc: thread.tcache.flush + arena.<all>.purge); 5. the 4 MiB blocks allocated, written, freed; \
             6. one large block allocated, written, freed; 7. the objects again (live). Each allocator in its own child process (the runner re-executed), \
             RSS from /proc/self/statm (the child's own pages included: 'child start'). GlobalPcp and GlobalBuddy are page-granular (an object takes \
             at least a 4 KiB page, 1.5x its bytes here).",
            p.objects() >> 20,
            p.big_blocks(),
            p.one_block() >> 20,
            p.again() >> 20,
            p.wait_ms
        ));

        let mut verdicts = Vec::new();
        let peers: Vec<(&str, &MrResult)> = MEMORY_RETURN_ROWS[OURS..]
            .iter()
            .zip(&res[OURS..])
            .filter_map(|(n, r)| r.as_ref().map(|r| (*n, r)))
            .collect();
        let best = peers.iter().min_by_key(|(_, r)| r.trimmed).copied();
        for (name, r) in MEMORY_RETURN_ROWS[..OURS].iter().zip(&res[..OURS]) {
            let Some(r) = r else { continue };
            if let (Some((bname, b)), false) = (best, in_process) {
                let limit = 1.1 * mib(b.trimmed);
                verdicts.push(Verdict::at_most(
                    format!("{name}: RSS after trim <= 1.1x best peer's ({bname})"),
                    mib(r.trimmed),
                    limit,
                    "MiB",
                ));
                notes.push(format!(
                    "{name}: RSS after trim {} MiB vs 1.1x {bname}'s {} MiB = {} MiB: {}",
                    fmt_num(mib(r.trimmed)),
                    fmt_num(mib(b.trimmed)),
                    fmt_num(limit),
                    verdict(mib(r.trimmed) <= limit)
                ));
            }
            if !in_process {
                let above = mib(r.trimmed.saturating_sub(r.start));
                verdicts.push(Verdict::at_most(
                    format!(
                        "{name}: RSS after trim <= 32 MiB above the child's start (no live data)"
                    ),
                    above,
                    32.0,
                    "MiB",
                ));
                let back = mib(r.one_freed.saturating_sub(r.one_before));
                verdicts.push(Verdict::at_most(
                    format!(
                        "{name}: large block freed: RSS back at once (<= 8 MiB above before it)"
                    ),
                    back,
                    8.0,
                    "MiB",
                ));
                notes.push(format!(
                    "{name}: after trim {} MiB above the child's start (target <= 32): {}; large block freed: {} MiB above before it (target <= 8): {}",
                    fmt_num(above),
                    verdict(above <= 32.0),
                    fmt_num(back),
                    verdict(back <= 8.0)
                ));
            }
        }

        // Rows: one per allocator, the trim's time as its figure.
        let mut rows = Vec::new();
        for (name, r) in MEMORY_RETURN_ROWS.iter().zip(&res) {
            let Some(r) = r else { continue };
            let ns = r.trim_ns as f64;
            rows.push(Row {
                case: Case::raw(*name, |_, _| {})
                    .section("RSS (MiB) after: live / freed / wait / trim / 4 MiB freed / large block freed / again; ns/op = the trim call")
                    .note(format!(
                        "{:.0} / {:.0} / {:.0} / {:.1} / {:.1} / {:.1} / {:.0}",
                        mib(r.live),
                        mib(r.freed),
                        mib(r.waited),
                        mib(r.trimmed),
                        mib(r.big_freed),
                        mib(r.one_freed),
                        mib(r.again)
                    )),
                stats: Stats {
                    ns: Spread { median: ns, min: ns, max: ns },
                    cycles: None,
                    iters: 1,
                    rounds: 1,
                    two_cpu: None,
                    remeasured: false,
                    flags: Vec::new(),
                },
            });
        }

        // The cost of purging: on vs off, interleaved by the measuring
        // engine (pairs, pages) or round by round (larson).
        let mut cases = Vec::new();
        for size in [64, 1024] {
            cases.push(slub_pair_case(size, true));
            cases.push(slub_pair_case(size, false));
        }
        for on in [true, false] {
            cases.push(page_case(
                &MR_PCP,
                "GlobalPcp, 64 pages allocated then freed",
                4096,
                64,
                on,
            ));
        }
        for on in [true, false] {
            cases.push(page_case(
                &MR_BUDDY,
                "GlobalBuddy, one 4 MiB block allocated and freed",
                BIG_BLOCK,
                1,
                on,
            ));
        }
        let stats = cx.measure(&cases);
        set_purging(true);
        let cost_rows: Vec<Row> = cases
            .into_iter()
            .zip(stats)
            .map(|(case, stats)| Row { case, stats })
            .collect();
        for pair in cost_rows.chunks(2) {
            let (on, off) = (&pair[0], &pair[1]);
            let ratio = on.stats.ns.median / off.stats.ns.median;
            let what = on.case.section.trim_start_matches("cost: ").to_string();
            verdicts.push(
                Verdict::at_most(format!("{what}: purging on <= 1.03x off"), ratio, 1.03, "x")
                    .on_where(&cost_rows, |r| r.case.section == on.case.section),
            );
            notes.push(format!(
                "{what}: on {} ns, off {} ns: {:.3}x (target <= 1.03): {}",
                fmt_num(on.stats.ns.median),
                fmt_num(off.stats.ns.median),
                ratio,
                verdict(ratio <= 1.03)
            ));
        }
        rows.extend(cost_rows);

        let (lrounds, lmillis) = if cx.cfg.quick {
            (2, 40)
        } else if cx.cfg.full {
            (9, 200)
        } else {
            (5, 100)
        };
        let [on, off] = larson_cost(cx, lrounds, lmillis);
        let section = "cost: slub-larson, GlobalSlub, 2 threads (ns per replacement, all threads)";
        for (is_on, mops) in [(true, &on), (false, &off)] {
            let ns: Vec<f64> = mops.iter().map(|m| 1e3 / m.max(1e-12)).collect();
            if let Some(ns) = Spread::of(&ns) {
                rows.push(Row {
                    case: Case::raw(onoff(is_on), |_, _| {})
                        .threads(2)
                        .section(section)
                        .note(format!("{} Mops/s", fmt_num(1e3 / ns.median))),
                    stats: Stats {
                        ns,
                        cycles: None,
                        iters: 0,
                        rounds: mops.len(),
                        two_cpu: None,
                        remeasured: false,
                        flags: Vec::new(),
                    },
                });
            }
        }
        if let (Some(a), Some(b)) = (Spread::of(&on), Spread::of(&off)) {
            let ratio = a.median / b.median;
            let sec_rows: Vec<Row> = rows
                .iter()
                .filter(|r| r.case.section == section)
                .cloned()
                .collect();
            verdicts.push(
                Verdict::at_least(
                    "slub-larson: purging on >= 0.97x off (Mops/s)",
                    ratio,
                    0.97,
                    "x",
                )
                .on_where(&sec_rows, |_| true),
            );
            notes.push(format!(
                "slub-larson: on {} Mops/s, off {} Mops/s: {:.3}x (target >= 0.97): {}",
                fmt_num(a.median),
                fmt_num(b.median),
                ratio,
                verdict(ratio >= 0.97)
            ));
        }
        notes.push(
            "cost: purging on = the default policy (decay after 5 s, scans at most every 1.25 s, from the slow paths: pcp batch frees and drains, \
             frees of blocks of the purge order and up, heap growth; the resident cap of 32 MiB checked at every free of 2 MiB or more and at most \
             every 10 ms on those slow paths; GlobalSlub's idle shrink on the decay tick); off = all of it paused (GlobalBuddy::set_decay_paused: \
             the hooks return before reading the clock, as a policy without decay or cap). Same process, interleaved (the measuring engine's \
             rounds; larson: alternate runs). Neither the pairs nor the page churns reach a decay call on their fast paths: their on/off \
             difference is the run's noise."
                .to_string(),
        );

        Report {
            table: "memory-return",
            title: "memory back to the OS: RSS after each step, and the cost of purging".into(),
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
    fn steps_run_in_process_and_lines_round_trip() {
        let p = MrParams {
            shift: 8,
            wait_ms: 1,
            seed: 3,
        };
        for name in MEMORY_RETURN_ROWS {
            let r = memory_return_on(name, &p, false).expect("an allocator");
            assert!(r.live_bytes >= p.objects() as u64, "{name}");
            assert!(r.live > 0 && r.one_live > 0, "{name}");
            assert_eq!(parse_memory_return_line(&memory_return_line(&r)), Some(r));
        }
        assert!(memory_return_on("nobody", &p, false).is_none());
        let mut rng = 7;
        for _ in 0..1000 {
            let s = obj_size(&mut rng);
            assert!((OBJ_SIZES.0..=OBJ_SIZES.1).contains(&s));
        }
    }
}
