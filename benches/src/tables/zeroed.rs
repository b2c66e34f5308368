//! `zeroed`: known-zero pages (PG_zero, seed 003: Andrea Arcangeli's
//! "PG_zero" thread). A zeroed request served from pages that were freed
//! still zero skips the clearing; the same request served from pages freed
//! dirty clears 4 KiB each time.
//!
//! Per N (allocate N zeroed order-0 pages, then free them; per page):
//!
//! * pcp (trylock, kernel platform) whose pages are freed with
//!   `FreeFlags::ZERO` (they go to the zero list and come back without
//!   clearing) vs the same pcp setup whose pages are written and freed dirty
//!   (each zeroed allocation clears its page); each over its own 1 GiB
//!   buddy, added known-zero and dirty respectively, so neither borrows the
//!   other's zero pages;
//! * the buddy directly: `free_pages_zeroed` vs `free_pages` after a write;
//! * peers' `alloc_zeroed` at Layout 4096/4096 (pages written, then freed):
//!   glibc through `System` (`posix_memalign` + `memset`: Rust's `System`
//!   uses `calloc` only for alignments up to 16), mimalloc, jemalloc.
//!
//! After each row the pcp counters `ALLOC_ZERO_HIT` / `ALLOC_CLEARED` (and
//! the buddy's `zeroed_no_clear` / `zeroed_cleared`) show which path served
//! the requests during that N's measurement.

use std::alloc::System;
use std::ptr::NonNull;
use std::sync::Arc;

use buddy::Stat;
use pcp::{PcpStat, Policy};

use super::pages::{
    fastest, median_of, Arena, BuddyPages, Global, PageAlloc, PcpPages, ARENA_BYTES,
};
use super::Table;
use crate::measure::{
    alloc_free_case, fmt_num, per_item, phase_note, with_phases, AllocFree, Case, Clock, Ctx,
    Phases, Report, Row,
};
use crate::user_kernel::UserKernel;

/// How a row's pages go back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Return {
    /// Untouched, freed as still zero (`free_zero`).
    StillZero,
    /// One byte written (untimed), freed normally.
    Dirty,
}

/// Zeroed order-0 pages of a [`PageAlloc`], going back as `ret` says, as
/// the items of the measurement module's alloc-N-then-free-N round: the
/// allocations (`alloc_zeroed`) and the frees are timed, the dirtying
/// write between them ([`AllocFree::between`]) is not.
pub struct ZeroedPages<A> {
    /// The allocator.
    pub a: Arc<A>,
    /// How the pages go back.
    pub ret: Return,
}

impl<A: PageAlloc> AllocFree for ZeroedPages<A> {
    const BETWEEN: bool = true;

    #[inline(always)]
    fn alloc(&self) -> NonNull<u8> {
        self.a.alloc_zeroed(0)
    }

    #[inline(always)]
    fn between(&self, items: &[*mut u8]) {
        if self.ret == Return::Dirty {
            for &p in items {
                // SAFETY: `p` is a page we hold (allocated just before).
                unsafe { p.add(64).write_volatile(0xa5) };
            }
        }
    }

    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>) {
        // SAFETY: allocated with order 0, freed once (the caller's
        // contract); with `StillZero` it was never written, so it reads as
        // zero.
        unsafe {
            match self.ret {
                Return::StillZero => self.a.free_zero(p, 0),
                Return::Dirty => self.a.free(p, 0),
            }
        }
    }
}

/// A case running `iters` rounds of alloc-N-then-free-N zeroed pages
/// ([`ZeroedPages`]), recording its phases per page; the runner's figure
/// is per round ([`per_item`] turns it into per page).
pub fn zeroed_case<A: PageAlloc>(
    name: impl Into<String>,
    a: &Arc<A>,
    n: usize,
    ret: Return,
    clock: Clock,
    phases: Option<Arc<Phases>>,
) -> Case {
    let items = ZeroedPages { a: a.clone(), ret };
    alloc_free_case(name, items, n, clock, 1, phases)
}

/// N values of the table.
fn counts(quick: bool) -> Vec<usize> {
    if quick {
        vec![1, 64]
    } else {
        vec![1, 64, 4096]
    }
}

fn pcp_counts(p: &PcpPages<UserKernel>) -> (u64, u64) {
    let s = p.pcp.stats();
    (
        s.get(PcpStat::ALLOC_ZERO_HIT),
        s.get(PcpStat::ALLOC_CLEARED),
    )
}

fn buddy_counts(a: &Arena) -> (u64, u64) {
    let b = a.buddy();
    (b.stat(Stat::ZEROED_NO_CLEAR), b.stat(Stat::ZEROED_CLEARED))
}

fn share(hit: u64, other: u64) -> String {
    let t = hit + other;
    if t == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * hit as f64 / t as f64)
    }
}

const PCP_ZERO: &str = "pcp: zero list (freed still zero)";
const PCP_DIRTY: &str = "pcp: freed dirty (cleared on alloc)";
const BUDDY_ZERO: &str = "buddy: known zero (free_pages_zeroed)";
const BUDDY_DIRTY: &str = "buddy: freed dirty (cleared on alloc)";
const PEERS: [&str; 3] = [
    "glibc (System: posix_memalign + memset)",
    "mimalloc alloc_zeroed",
    "jemalloc alloc_zeroed",
];

/// The `zeroed` table (see the module docs).
pub struct Zeroed;

impl Table for Zeroed {
    fn name(&self) -> &'static str {
        "zeroed"
    }

    fn about(&self) -> &'static str {
        "seed 003: zeroed 4 KiB pages freed still zero (pcp zero list, buddy PG_zero: no clearing) vs freed dirty (cleared), peers' alloc_zeroed"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let clock = Clock::new(cx.machine.tsc_ghz);
        let zero_arena = Arena::new(ARENA_BYTES, true);
        let dirty_arena = Arena::new(ARENA_BYTES, false);
        let pcp_z = Arc::new(super::pages::kernel_pcp(&zero_arena, Policy::Trylock));
        let pcp_d = Arc::new(super::pages::kernel_pcp(&dirty_arena, Policy::Trylock));
        let buddy_z = Arc::new(BuddyPages(zero_arena.clone()));
        let buddy_d = Arc::new(BuddyPages(dirty_arena.clone()));
        let glibc = Arc::new(Global(System));
        let mi = Arc::new(Global(mimalloc::MiMalloc));
        let je = Arc::new(Global(tikv_jemallocator::Jemalloc));

        let mut rows = Vec::new();
        let mut summary = vec![
            "summary (ns per page, alloc_zeroed + free):".to_string(),
            "       N   pcp zero  pcp dirty  saving          buddy zero  buddy dirty  saving          best peer".to_string(),
        ];
        for n in counts(cx.cfg.quick) {
            let section =
                format!("N = {n}: alloc {n} zeroed order-0 pages, then free them (per page)");
            let cases = vec![
                with_phases(|ph| {
                    zeroed_case(PCP_ZERO, &pcp_z, n, Return::StillZero, clock, Some(ph))
                }),
                with_phases(|ph| zeroed_case(PCP_DIRTY, &pcp_d, n, Return::Dirty, clock, Some(ph))),
                with_phases(|ph| {
                    zeroed_case(BUDDY_ZERO, &buddy_z, n, Return::StillZero, clock, Some(ph))
                }),
                with_phases(|ph| {
                    zeroed_case(BUDDY_DIRTY, &buddy_d, n, Return::Dirty, clock, Some(ph))
                }),
                with_phases(|ph| zeroed_case(PEERS[0], &glibc, n, Return::Dirty, clock, Some(ph))),
                with_phases(|ph| zeroed_case(PEERS[1], &mi, n, Return::Dirty, clock, Some(ph))),
                with_phases(|ph| zeroed_case(PEERS[2], &je, n, Return::Dirty, clock, Some(ph))),
            ];
            let (cs, phs): (Vec<Case>, Vec<Arc<Phases>>) = cases
                .into_iter()
                .map(|(c, ph)| (c.section(section.clone()), ph))
                .unzip();
            let before = (
                pcp_counts(&pcp_z),
                pcp_counts(&pcp_d),
                buddy_counts(&zero_arena),
                buddy_counts(&dirty_arena),
            );
            let stats = cx.measure(&cs);
            let after = (
                pcp_counts(&pcp_z),
                pcp_counts(&pcp_d),
                buddy_counts(&zero_arena),
                buddy_counts(&dirty_arena),
            );
            let delta = |a: (u64, u64), b: (u64, u64)| (a.0 - b.0, a.1 - b.1);
            let mut these: Vec<Row> = Vec::new();
            for ((mut case, mut st), ph) in cs.into_iter().zip(stats).zip(phs) {
                per_item(&mut st, n);
                let mut note = phase_note(&ph, st.rounds).unwrap_or_default();
                let counters = match case.name.as_str() {
                    PCP_ZERO => Some((
                        "pcp ALLOC_ZERO_HIT",
                        "ALLOC_CLEARED",
                        delta(after.0, before.0),
                    )),
                    PCP_DIRTY => Some((
                        "pcp ALLOC_ZERO_HIT",
                        "ALLOC_CLEARED",
                        delta(after.1, before.1),
                    )),
                    BUDDY_ZERO => Some((
                        "buddy zeroed_no_clear",
                        "zeroed_cleared",
                        delta(after.2, before.2),
                    )),
                    BUDDY_DIRTY => Some((
                        "buddy zeroed_no_clear",
                        "zeroed_cleared",
                        delta(after.3, before.3),
                    )),
                    _ => None,
                };
                if let Some((hit, miss, (h, m))) = counters {
                    note.push_str(&format!(
                        "; {hit} {h} / {miss} {m} (no clear {})",
                        share(h, m)
                    ));
                }
                case.note = note;
                these.push(Row { case, stats: st });
            }
            if let (Some(pz), Some(pd), Some(bz), Some(bd), Some(peer)) = (
                median_of(&these, PCP_ZERO),
                median_of(&these, PCP_DIRTY),
                median_of(&these, BUDDY_ZERO),
                median_of(&these, BUDDY_DIRTY),
                fastest(&these, &PEERS),
            ) {
                // A saving between two rows either of which spread beyond the
                // noise threshold is no saving: say so instead (issue #21).
                let noisy = |name: &str| {
                    these.iter().any(|r| {
                        r.case.name == name
                            && cx.cfg.noise > 1.0
                            && r.stats.spread_ratio() > cx.cfg.noise
                    })
                };
                let saving = |z: f64, d: f64, zn: &str, dn: &str| {
                    if noisy(zn) || noisy(dn) {
                        format!("{:>6} {:<7}", "-", "(noisy)")
                    } else {
                        format!("{:>6} ({:>4.0}%)", fmt_num(d - z), 100.0 * (d - z) / d)
                    }
                };
                summary.push(format!(
                    "  {n:>6}  {:>9}  {:>9}  {}  {:>10}  {:>11}  {}  {} ({})",
                    fmt_num(pz),
                    fmt_num(pd),
                    saving(pz, pd, PCP_ZERO, PCP_DIRTY),
                    fmt_num(bz),
                    fmt_num(bd),
                    saving(bz, bd, BUDDY_ZERO, BUDDY_DIRTY),
                    fmt_num(peer.1),
                    peer.0
                ));
            }
            rows.extend(these);
        }
        let purged = purged_section(cx, clock);
        summary.extend(purged.1);
        rows.extend(purged.0);
        let mut notes = vec![
            "ns/op and cycles/op: alloc_zeroed + free per page (the dirtying write between them is untimed); the note splits \
             the phases and gives the counters of the path taken during that N's measurement."
                .to_string(),
            "pcp rows: Pcp::new on Kernel<UserHooks> with Policy::Trylock, over a 1 GiB buddy added known zero (zero-list row) or \
             dirty (dirty row); buddy rows: the same two buddies directly (Buddy::alloc_pages(ZEROED))."
                .to_string(),
            "peers write their pages too and cannot know them zero: Rust's System.alloc_zeroed with 4 KiB alignment is \
             posix_memalign + memset (calloc only for alignments up to 16); glibc also trims and re-faults its heap top at N >= 64 \
             (see the pages table)."
                .to_string(),
        ];
        notes.push(
            "N = 1 is at the timer's floor: each phase is one page between two rdtsc reads (about 9.5 ns each, the pages \
             table's '(timer: empty phases)' row), and the zero list's whole gain is one 4 KiB clear (about 25 ns). On a \
             loaded machine a round is preempted more often than not, the totals spread 5x and their median can land on \
             either mode (issue #21's -68% saving: pcp zero [18 .. 98] ns against pcp dirty [42 .. 229]); the phase split \
             in the notes stays at alloc 9.5 + free 9.3 ns against 34 + 9.3 ns. Such rows are flagged noisy and their \
             saving is printed as '(noisy)' instead of a figure."
                .to_string(),
        );
        notes.extend(summary);
        Report {
            table: "zeroed",
            title:
                "Zeroed pages: freed still zero (PG_zero, no clearing) vs freed dirty (seed 003)"
                    .into(),
            notes,
            rows,
            ..Report::default()
        }
    }
}

/// Row: `GlobalBuddy` pages whose blocks were purged (`trim`) before the
/// round: known zero from the OS, first write faults.
pub const PURGED_ROW: &str = "GlobalBuddy, purged by trim (OS zero, first write faults)";
/// Row: `GlobalBuddy` pages freed dirty (each `alloc_zeroed` clears).
pub const DIRTY_ROW: &str = "GlobalBuddy, freed dirty (cleared by alloc_zeroed)";

/// Pages of the purged section's rounds.
const PURGED_N: usize = 64;

/// The heap of the purged row: purging only by `trim` (no decay, no cap),
/// so what each round finds is what its untimed `trim` left.
static PURGE_HEAP: buddy::GlobalBuddy =
    buddy::GlobalBuddy::with_config(buddy::GLOBAL_CONFIG.with_purge(NO_AUTO_PURGE));
/// The heap of the dirty row (the same policy, never trimmed).
static DIRTY_HEAP: buddy::GlobalBuddy =
    buddy::GlobalBuddy::with_config(buddy::GLOBAL_CONFIG.with_purge(NO_AUTO_PURGE));
const NO_AUTO_PURGE: buddy::PurgePolicy = buddy::PurgePolicy::trim_only(9);

/// One round of the purged section on `heap`: (untimed) `trim` if
/// `purge`, then (timed) `PURGED_N` zeroed pages allocated and each
/// written once, the way a program uses a zeroed page (so the purged
/// row pays its page faults, where the OS does the zeroing), then
/// (timed) freed. Returns the timed cycles.
fn purged_round(heap: &'static buddy::GlobalBuddy, purge: bool, clock: &Clock) -> u64 {
    use core::alloc::GlobalAlloc;
    let l = core::alloc::Layout::from_size_align(4096, 4096).expect("page layout");
    if purge {
        heap.trim();
    }
    let mut pages = [core::ptr::null_mut::<u8>(); PURGED_N];
    let t0 = clock.now();
    for p in pages.iter_mut() {
        // SAFETY: a non-zero layout.
        let q = unsafe { heap.alloc_zeroed(l) };
        assert!(!q.is_null(), "mm-bench zeroed: GlobalBuddy exhausted");
        // SAFETY: a fresh page of ours.
        unsafe { q.add(64).write_volatile(0xa5) };
        *p = q;
    }
    for &p in &pages {
        // SAFETY: allocated above with `l`, freed once.
        unsafe { heap.dealloc(p, l) };
    }
    clock.now() - t0
}

/// The section "pages purged (known zero from the OS) vs freed dirty",
/// first write timed (issue #17: PG_zero meets the OS), and its summary
/// lines.
fn purged_section(cx: &Ctx<'_>, clock: Clock) -> (Vec<Row>, Vec<String>) {
    let section = format!(
        "N = {PURGED_N}, first write timed: pages purged (known zero from the OS) vs freed dirty (per page)"
    );
    let case = |name: &str, heap: &'static buddy::GlobalBuddy, purge: bool| {
        Case::custom(name, move |_, iters| {
            let mut t = 0;
            for _ in 0..iters {
                t += purged_round(heap, purge, &clock);
            }
            clock.elapsed(t, 1.0)
        })
        .section(section.clone())
    };
    let cs = vec![
        case(PURGED_ROW, &PURGE_HEAP, true),
        case(DIRTY_ROW, &DIRTY_HEAP, false),
    ];
    let stats = cx.measure(&cs);
    let mut rows = Vec::new();
    for (case, mut st) in cs.into_iter().zip(stats) {
        per_item(&mut st, PURGED_N);
        rows.push(Row { case, stats: st });
    }
    let mut summary = Vec::new();
    if let (Some(p), Some(d)) = (median_of(&rows, PURGED_ROW), median_of(&rows, DIRTY_ROW)) {
        let z = PURGE_HEAP.buddy().stat(Stat::ZEROED_NO_CLEAR);
        summary.push(format!(
            "purged vs dirty, N = {PURGED_N}, alloc_zeroed + first write + free: {} ns against {} ns per page ({:.2}x): a purged \
             page skips the clearing ({z} zeroed allocations served without clearing) but the OS zero-fills it at its first \
             write (a page fault); purging is for RSS, the zero list for speed",
            fmt_num(p),
            fmt_num(d),
            p / d
        ));
    }
    (rows, summary)
}
