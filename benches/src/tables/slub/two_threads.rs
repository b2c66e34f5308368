//! `slub-2t`: 64 B pairs on one thread, then on two pinned threads at once
//! (the runner's two-CPU check beside them).

use std::alloc::Layout;
use std::sync::Arc;

use super::heaps::{layout, Caches, Competitors, Kind, ObjHeap, Visit, GLOBAL_SLUB_ROW, PEERS};
use super::pairs::{pair_case, WARM_PAIRS};
use crate::measure::Verdict;
use crate::measure::{fmt_num, Case, Ctx, Report, Row};
use crate::tables::pages::verdict;
use crate::tables::Table;

struct TwoThreadCases {
    l: Layout,
    cases: Vec<Case>,
}

impl Visit for TwoThreadCases {
    fn visit<A: ObjHeap>(&mut self, name: &'static str, _kind: Kind, a: &Arc<A>) {
        self.cases.push(pair_case(name, a, self.l, 1));
        self.cases.push(pair_case(name, a, self.l, 2));
    }
}

/// The `slub-2t` table (see the [SLUB tables](super)).
pub struct Slub2t;

impl Table for Slub2t {
    fn name(&self) -> &'static str {
        "slub-2t"
    }

    fn about(&self) -> &'static str {
        "64 B alloc + free pairs on one thread and on two pinned threads at once (2-CPU check): GlobalSlub, KmemCache, peers"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let comp = Competitors::new();
        let size = 64;
        let section =
            format!("{size} B: each thread does alloc + free pairs (ns per pair per thread)");
        let mut v = TwoThreadCases {
            l: layout(size),
            cases: Vec::new(),
        };
        comp.visit(size, Caches::Both, &mut v);
        let cases: Vec<Case> = v
            .cases
            .into_iter()
            .map(|c| c.section(section.clone()))
            .collect();
        let stats = cx.measure(&cases);
        let mut rows: Vec<Row> = cases
            .into_iter()
            .zip(stats)
            .map(|(case, stats)| Row { case, stats })
            .collect();
        let mut summary = Vec::new();
        for i in (0..rows.len()).step_by(2) {
            let one = rows[i].stats.ns.median;
            let two = rows[i + 1].stats.ns.median;
            let agg1 = 1e3 / one;
            let agg2 = 2.0 * 1e3 / two;
            rows[i].case.note = format!("{} Mpairs/s", fmt_num(agg1));
            rows[i + 1].case.note = format!(
                "{} Mpairs/s aggregate; 2t/1t scaling {:.2}x",
                fmt_num(agg2),
                agg2 / agg1
            );
            summary.push((rows[i].case.name.clone(), agg2, agg2 / agg1));
        }
        let best_peer = summary
            .iter()
            .filter(|s| PEERS.contains(&s.0.as_str()))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .cloned();
        let mut notes = vec![
            format!("each allocator twice: one thread (the measuring thread), then two threads at once pinned to two CPUs, each doing \
             its own pairs; ns/op is per pair per thread; Mpairs/s counts both. KmemCache lockless: workers are virtual CPUs \
             1 and 2 of Kernel<UserHooks>. The runner starts fresh threads for every batch: each does {WARM_PAIRS} untimed \
             pairs first, so a thread cache's one-time set-up (jemalloc's tcache, GlobalSlub's slot and CPU slab) is not \
             in the figure, nor is GlobalSlub's flush at thread exit (after the stopwatch stops)."
            ),
            "2cpu: the runner's two-CPU check (pure arithmetic on one vs two threads): below ~1.9x the second CPU was partly \
             someone else's, and scaling figures are capped by it. The no_std heaps share one spin lock: their lock line \
             bounces between the CPUs on every operation."
                .to_string(),
            "summary (aggregate Mpairs/s on two threads, scaling 2t/1t):".to_string(),
        ];
        for (name, agg, sc) in &summary {
            notes.push(format!("  {name:<42} {:>8}  {sc:>5.2}x", fmt_num(*agg)));
        }
        let mut verdicts = Vec::new();
        if let (Some(s), Some(p)) = (summary.iter().find(|s| s.0 == GLOBAL_SLUB_ROW), best_peer) {
            verdicts.push(
                Verdict::at_least(
                    "64 B, 2 threads: GlobalSlub >= best peer (aggregate)",
                    s.1,
                    p.1,
                    "Mpairs/s",
                )
                .vs_peer(s.1 / p.1)
                .on(&rows, &[GLOBAL_SLUB_ROW, p.0.as_str()]),
            );
            notes.push(format!(
                "target GlobalSlub >= the best peer's aggregate: {} vs {} ({}): {}",
                fmt_num(s.1),
                fmt_num(p.1),
                p.0,
                verdict(s.1 >= p.1)
            ));
        }
        Report {
            table: "slub-2t",
            title: "SLUB 64 B pairs on two CPUs at once".into(),
            notes,
            rows,
            verdicts,
            ..Report::default()
        }
    }
}
