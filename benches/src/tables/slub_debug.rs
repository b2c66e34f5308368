//! `slub-debug`: what each SLUB debug flag and each hardening option costs
//! on the single-thread fast path (issue #6): one `GlobalSlub` per flag set,
//! a 64 B and a 256 B alloc + free pair each, interleaved as every table is,
//! with the ratio to the default `GlobalSlub` in the note.
//!
//! Debug caches (`F`, `Z`, `P`, `U`) take the locked path under the list
//! lock with their checks (no fast path), so their cost is that of the
//! kernel's `slub_debug`; `HARDENED` and `RANDOM_FREELIST` keep the fast
//! path (hardening encodes every free pointer; randomisation only changes
//! the order of a new slab's freelist).

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;

use slub::{GlobalSlub, SlabFlags};

use super::Table;
use crate::measure::{Case, Ctx, Report};

static DEFAULT: GlobalSlub = GlobalSlub::with_flags(SlabFlags::NONE);
static HARDENED: GlobalSlub = GlobalSlub::with_flags(SlabFlags::HARDENED);
static RANDOM: GlobalSlub = GlobalSlub::with_flags(SlabFlags::RANDOM_FREELIST);
static F: GlobalSlub = GlobalSlub::with_flags(SlabFlags::CONSISTENCY_CHECKS);
static Z: GlobalSlub = GlobalSlub::with_flags(SlabFlags::RED_ZONE);
static P: GlobalSlub = GlobalSlub::with_flags(SlabFlags::POISON);
static U: GlobalSlub = GlobalSlub::with_flags(SlabFlags::STORE_USER);
static FZPU: GlobalSlub = GlobalSlub::with_flags(SlabFlags::DEBUG_ALL);

/// The rows: name and heap.
static HEAPS: [(&str, &GlobalSlub); 8] = [
    ("default", &DEFAULT),
    ("HARDENED", &HARDENED),
    ("RANDOM_FREELIST", &RANDOM),
    ("slub_debug=F (consistency)", &F),
    ("slub_debug=Z (red zones)", &Z),
    ("slub_debug=P (poison)", &P),
    ("slub_debug=U (owners)", &U),
    ("slub_debug=FZPU", &FZPU),
];

/// The object sizes.
const SIZES: [usize; 2] = [64, 256];

fn pair(heap: &'static GlobalSlub, l: Layout) {
    // SAFETY: non-zero size; the object is freed with its layout at once.
    unsafe {
        let p = heap.alloc(l);
        assert!(!p.is_null(), "GlobalSlub out of memory");
        black_box(p).write(1);
        heap.dealloc(p, l);
    }
}

/// See the module docs.
pub struct SlubDebug;

impl Table for SlubDebug {
    fn name(&self) -> &'static str {
        "slub-debug"
    }

    fn about(&self) -> &'static str {
        "SLUB debug flags (F, Z, P, U, FZPU) and hardening (HARDENED, RANDOM_FREELIST): 64/256 B alloc + free pair on GlobalSlub, ratio to the default"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let mut cases = Vec::new();
        for size in SIZES {
            let l = Layout::from_size_align(size, 8).expect("layout");
            for (name, heap) in HEAPS {
                cases.push(
                    Case::op(format!("{name}, {size} B"), move || pair(heap, l))
                        .section(format!("{size} B alloc + free pair")),
                );
            }
        }
        let mut r = cx.report(
            "slub-debug",
            "SLUB debug flags and hardening: cost of one alloc + free pair (issue #6)",
            cases,
        );
        let n = HEAPS.len();
        let mut summary = vec![
            "cost against the default GlobalSlub (the first row of each size); target for a default-on option: under 5%"
                .to_string(),
        ];
        for (k, size) in SIZES.iter().enumerate() {
            let base = r.rows[k * n].stats.ns.median;
            for (i, (name, _)) in HEAPS.iter().enumerate() {
                let row = &mut r.rows[k * n + i];
                let ratio = row.stats.ns.median / base;
                row.case.note = format!("{ratio:.2}x the default");
                if i > 0 {
                    summary.push(format!(
                        "  {size:>4} B  {name:<28} {:>+7.1}%",
                        (ratio - 1.0) * 100.0
                    ));
                }
            }
        }
        r.notes.extend(summary);
        r.notes.push(
            "debug caches take the locked path under the list lock with every check (no fast path, no CPU slabs), \
             as the kernel's slub_debug does; HARDENED and RANDOM_FREELIST keep the fast path"
                .to_string(),
        );
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_set_serves_and_frees() {
        for (_, heap) in HEAPS {
            for size in SIZES {
                let l = Layout::from_size_align(size, 8).unwrap();
                for _ in 0..100 {
                    pair(heap, l);
                }
            }
        }
    }
}
