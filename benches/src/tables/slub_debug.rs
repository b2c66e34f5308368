//! `slub-debug`: what each SLUB debug flag and each hardening option costs
//! on the single-thread fast path (issue #6): one `GlobalSlub` per flag set,
//! a 64 B and a 256 B alloc + free pair each, interleaved as every table is,
//! with the ratio to the default `GlobalSlub` in the note.
//!
//! Debug caches (`F`, `Z`, `P`, `U`) take the locked path under the list
//! lock with their checks (no fast path), so their cost is that of the
//! kernel's `slub_debug`; `HARDENED` and `RANDOM_FREELIST` keep the fast
//! path (hardening encodes every free pointer and sheaf entry, marks free
//! objects and checks them on free (double frees), and range-checks every
//! free pointer and sheaf entry an allocation follows (writes after free);
//! randomisation only changes the order of a new slab's freelist).

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;

use slub::{GlobalSlub, SlabFlags};

use super::Table;
use crate::measure::{Case, Ctx, Report};

static PLAIN: GlobalSlub = GlobalSlub::with_flags(SlabFlags::NONE);
static DEFAULT: GlobalSlub = GlobalSlub::new();
static RANDOM: GlobalSlub =
    GlobalSlub::with_flags(GlobalSlub::DEFAULT_FLAGS.union(SlabFlags::RANDOM_FREELIST));
static F: GlobalSlub = GlobalSlub::with_flags(SlabFlags::CONSISTENCY_CHECKS);
static Z: GlobalSlub = GlobalSlub::with_flags(SlabFlags::RED_ZONE);
static P: GlobalSlub = GlobalSlub::with_flags(SlabFlags::POISON);
static U: GlobalSlub = GlobalSlub::with_flags(SlabFlags::STORE_USER);
static FZPU: GlobalSlub = GlobalSlub::with_flags(SlabFlags::DEBUG_ALL);
static NOSH: GlobalSlub = GlobalSlub::with_config(SlabFlags::NONE, 0);
static NOSH_HARDENED: GlobalSlub = GlobalSlub::with_config(SlabFlags::HARDENED, 0);

/// The rows: name, heap, and the row (index) it is compared with. The
/// first row of each group has no option on: the others' cost is against
/// it.
static HEAPS: [(&str, &GlobalSlub, usize); 10] = [
    ("no options (sheaves)", &PLAIN, 0),
    ("HARDENED (GlobalSlub::new())", &DEFAULT, 0),
    ("HARDENED + RANDOM_FREELIST", &RANDOM, 0),
    ("slub_debug=F (consistency)", &F, 0),
    ("slub_debug=Z (red zones)", &Z, 0),
    ("slub_debug=P (poison)", &P, 0),
    ("slub_debug=U (owners)", &U, 0),
    ("slub_debug=FZPU", &FZPU, 0),
    ("no sheaves, no options", &NOSH, 8),
    ("no sheaves, HARDENED", &NOSH_HARDENED, 8),
];

/// The object sizes.
const SIZES: [usize; 2] = [64, 256];

/// Objects of the batch shape: beyond what two sheaves and the CPU slab
/// hold, so refills and flushes (and their free pointers) are in it.
const BATCH: usize = 1024;

fn pair(heap: &'static GlobalSlub, l: Layout) {
    // SAFETY: non-zero size; the object is freed with its layout at once.
    unsafe {
        let p = heap.alloc(l);
        assert!(!p.is_null(), "GlobalSlub out of memory");
        black_box(p).write(1);
        heap.dealloc(p, l);
    }
}

/// `slots.len()` allocations, then their frees (most recent first).
fn batch(heap: &'static GlobalSlub, l: Layout, slots: &mut [*mut u8]) {
    for s in slots.iter_mut() {
        // SAFETY: non-zero size.
        let p = unsafe { heap.alloc(l) };
        assert!(!p.is_null(), "GlobalSlub out of memory");
        // SAFETY: a fresh object of at least one byte.
        unsafe { black_box(p).write(1) };
        *s = p;
    }
    for s in slots.iter().rev() {
        // SAFETY: allocated above with `l`, freed once.
        unsafe { heap.dealloc(*s, l) };
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
        let mut sections = Vec::new();
        for size in SIZES {
            let l = Layout::from_size_align(size, 8).expect("layout");
            for (name, heap, _) in HEAPS {
                cases.push(
                    Case::op(format!("{name}, {size} B"), move || pair(heap, l))
                        .section(format!("{size} B alloc + free pair")),
                );
            }
            sections.push(format!("{size} B pair"));
            for (name, heap, _) in HEAPS {
                cases.push(
                    // One operation = one object (alloc + free), in batches
                    // of BATCH (the last one shorter).
                    Case::raw(format!("{name}, {size} B x{BATCH}"), move |_, iters| {
                        let mut slots = vec![std::ptr::null_mut::<u8>(); BATCH];
                        let mut left = iters as usize;
                        while left > 0 {
                            let k = left.min(BATCH);
                            batch(heap, l, &mut slots[..k]);
                            left -= k;
                        }
                    })
                    .section(format!(
                        "{size} B: {BATCH} allocs then {BATCH} frees (per object: refills, flushes, free pointers)"
                    )),
                );
            }
            sections.push(format!("{size} B x{BATCH}"));
        }
        let mut r = cx.report(
            "slub-debug",
            "SLUB debug flags and hardening: cost per object, one by one and in batches (issue #6)",
            cases,
        );
        let n = HEAPS.len();
        let mut summary = vec![
            "cost against GlobalSlub with no option (the first row of each section; the 'no sheaves' rows against \
             'no sheaves, no options'); target for a default-on option: under 5%"
                .to_string(),
        ];
        for (k, section) in sections.iter().enumerate() {
            for (i, (name, _, base_row)) in HEAPS.iter().enumerate() {
                let base = r.rows[k * n + base_row].stats.ns.median;
                let row = &mut r.rows[k * n + i];
                let ratio = row.stats.ns.median / base;
                row.case.note = format!("{ratio:.2}x {}", HEAPS[*base_row].0);
                if i != *base_row {
                    summary.push(format!(
                        "  {section:<12} {name:<28} {:>+7.1}%",
                        (ratio - 1.0) * 100.0
                    ));
                }
            }
        }
        r.notes.extend(summary);
        r.notes.push(
            "debug caches take the locked path under the list lock with every check (no fast path, no CPU slabs, \
             no sheaves), as the kernel's slub_debug does; HARDENED and RANDOM_FREELIST keep the fast paths (with \
             sheaves, HARDENED's pair cost is the double-free marker on free, the encoded sheaf entry and its range \
             check on allocation, and the marker cleared; the x1024 shape adds the free pointers of refills and \
             flushes)"
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
        let mut slots = vec![std::ptr::null_mut::<u8>(); BATCH];
        for (_, heap, _) in HEAPS {
            for size in SIZES {
                let l = Layout::from_size_align(size, 8).unwrap();
                for _ in 0..100 {
                    pair(heap, l);
                }
                batch(heap, l, &mut slots);
            }
        }
    }
}
