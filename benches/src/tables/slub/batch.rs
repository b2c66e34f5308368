//! `slub-batch`: allocate N objects of 64 B, then free the N, per object,
//! the two phases apart (seed 000's shape on objects), through the
//! measurement module's alloc-N-then-free-N loop.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;

use super::heaps::GLOBAL_SLUB_ROW;
use super::heaps::{layout, ratio_notes, Caches, Competitors, Kind, ObjHeap, Visit};
use crate::measure::Verdict;
use crate::measure::{
    alloc_free_case, fmt_num, per_item, phase_note, with_phases, AllocFree, Case, Clock, Ctx,
    Phases, Report, Row,
};
use crate::tables::pages::verdict;
use crate::tables::Table;

// ---------------------------------------------------------------------------
// The case body
// ---------------------------------------------------------------------------

/// Objects of one `Layout` from an [`ObjHeap`], as the items of the
/// measurement module's alloc-N-then-free-N round ([`alloc_free_case`]).
pub struct Objects<A> {
    /// The heap.
    pub a: Arc<A>,
    /// The objects' layout.
    pub l: Layout,
}

impl<A: ObjHeap> AllocFree for Objects<A> {
    #[inline(always)]
    fn alloc(&self) -> NonNull<u8> {
        self.a.alloc(self.l)
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>) {
        // SAFETY: forwarded contract (allocated above with `l`).
        unsafe { self.a.free(p, self.l) }
    }
    fn enter_thread(&self, t: usize) {
        self.a.enter_thread(t)
    }
}

/// A case running `iters` rounds of alloc-N-then-free-N of `l`, recording
/// the phases per object; figures are per round (the table divides by N).
pub fn batch_case<A: ObjHeap>(
    name: &str,
    a: &Arc<A>,
    l: Layout,
    n: usize,
    clock: Clock,
    phases: Arc<Phases>,
) -> Case {
    let items = Objects { a: a.clone(), l };
    alloc_free_case(name, items, n, clock, 1, Some(phases))
}

// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

/// N values of `slub-batch`.
pub fn batch_counts(cfg: &crate::measure::Config) -> Vec<usize> {
    cfg.sweep(
        &[1, 64, 4096],
        &[1, 16, 256, 4096, 16384],
        &[1, 4, 16, 64, 256, 1024, 4096, 16384],
    )
}

struct BatchCases {
    l: Layout,
    n: usize,
    clock: Clock,
    cases: Vec<(Case, Arc<Phases>)>,
}

impl Visit for BatchCases {
    fn visit<A: ObjHeap>(&mut self, name: &'static str, _kind: Kind, a: &Arc<A>) {
        let (l, n, clock) = (self.l, self.n, self.clock);
        self.cases
            .push(with_phases(|ph| batch_case(name, a, l, n, clock, ph)));
    }
}

/// The `slub-batch` table (see the [SLUB tables](super)).
pub struct SlubBatch;

impl Table for SlubBatch {
    fn name(&self) -> &'static str {
        "slub-batch"
    }

    fn about(&self) -> &'static str {
        "alloc N then free N objects of 64 B (N = 1..16384), ns per object, alloc/free split: GlobalSlub, KmemCache, peers"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let comp = Competitors::new();
        let clock = Clock::new(cx.machine.tsc_ghz);
        let size = 64;
        let mut rows = Vec::new();
        let mut summary = Vec::new();
        let mut verdicts = Vec::new();
        for n in batch_counts(cx.cfg) {
            let section = format!("N = {n}: alloc {n} x {size} B, then free them (per object)");
            let mut v = BatchCases {
                l: layout(size),
                n,
                clock,
                cases: Vec::new(),
            };
            comp.visit(size, Caches::Both, &mut v);
            let (cases, phs): (Vec<Case>, Vec<Arc<Phases>>) = v
                .cases
                .into_iter()
                .map(|(c, ph)| (c.section(section.clone()), ph))
                .unzip();
            let stats = cx.measure(&cases);
            let mut these: Vec<Row> = Vec::new();
            for ((mut case, mut st), ph) in cases.into_iter().zip(stats).zip(phs) {
                per_item(&mut st, n);
                if let Some(note) = phase_note(&ph, st.rounds) {
                    case.note = note;
                }
                these.push(Row { case, stats: st });
            }
            if let Some((s, best)) = ratio_notes(&mut these) {
                verdicts.push(
                    Verdict::at_most(
                        format!("N = {n}: GlobalSlub <= fastest peer"),
                        s,
                        best.1,
                        "ns/obj",
                    )
                    .vs_peer(best.1 / s)
                    .on(&these, &[GLOBAL_SLUB_ROW, best.0]),
                );
                summary.push(format!(
                    "  {n:>6}  {:>10}  {:>8} {:<34}  {:>5.2}x {}",
                    fmt_num(s),
                    fmt_num(best.1),
                    best.0,
                    s / best.1,
                    verdict(s <= best.1)
                ));
            }
            rows.extend(these);
        }
        let mut notes = vec![
            "ns/op and cycles/op: alloc + free per object; the note splits the phases (rdtsc around each) and gives the ratio \
             to the fastest peer at that N. Same competitors as slub-pairs (see there); objects are freed in allocation order."
                .to_string(),
            "N = 1 measures the clock, not the allocators: each phase is one object between two rdtsc reads (about 9.5 ns, \
             the pages table's '(timer: empty phases)' floor), so every row shows ~19 ns there."
                .to_string(),
            "SLUB at large N: the CPU slab runs out every objs_per_slab objects (64 at 64 B in an order-0 slab), so the slow \
             path (new slab from the pcp, or a partial one) is part of the figure, as it is in the kernel."
                .to_string(),
            "summary (ns per object; target: GlobalSlub <= the fastest peer):".to_string(),
            format!(
                "  {:>6}  {:>10}  {:<43}  {}",
                "N", "GlobalSlub", "fastest peer", "ratio"
            ),
        ];
        notes.extend(summary);
        Report {
            table: "slub-batch",
            title: "SLUB batches: alloc N, free N objects of 64 B (seed 000's shape on objects)"
                .into(),
            notes,
            rows,
            verdicts,
            ..Report::default()
        }
    }
}
