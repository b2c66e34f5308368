//! Hint maintenance of one chunk against brute-force recomputation
//! (`check_chunk` after every operation), plus one scenario per hint rule.

use std::vec;
use std::vec::Vec;

use super::Rng;
use crate::bitmap::{find_next_bit, find_next_zero_bit};
use crate::check::check_chunk;
use crate::chunk::VecChunk;
use crate::BLOCK_BITS;

fn alloc(c: &mut VecChunk, bits: usize, align: usize) -> Option<usize> {
    let mut ctx = c.ctx();
    let start = ctx.find_block_fit(bits, align, false)?;
    ctx.alloc_area(bits, align, start)
}

fn free(c: &mut VecChunk, bit_off: usize) -> usize {
    c.ctx().free_area(bit_off)
}

fn check(c: &mut VecChunk) {
    check_chunk(&c.ctx(), "vec chunk");
}

fn contig(c: &mut VecChunk) -> (u32, u32) {
    let md = c.ctx().st.md;
    (md.contig_hint, md.contig_hint_start)
}

/// The largest clear run that lies inside one block.
fn largest_in_block(model: &[bool]) -> usize {
    let mut best = 0;
    for blk in model.chunks(BLOCK_BITS) {
        let mut run = 0;
        for &used in blk {
            run = if used { 0 } else { run + 1 };
            best = best.max(run);
        }
    }
    best
}

/// Runs `steps` random allocations and frees on a chunk of `pages` pages,
/// checking every hint against brute force after each one. On a violation
/// it prints the operation, the blocks before and after, and the free runs
/// before, then panics.
fn soak(pages: usize, seed: u64, steps: usize) {
    use std::println;
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let map_bits = pages * BLOCK_BITS;
    let mut c = VecChunk::new(pages);
    let mut live: Vec<(usize, usize)> = Vec::new();
    let mut model = vec![false; map_bits];
    for step in 0..steps {
        let before = c.clone();
        let desc;
        if live.is_empty() || rng.below(100) < 58 {
            let bits = match rng.below(10) {
                0..=5 => 1 + rng.below(8),
                6..=7 => 1 + rng.below(256),
                8 => 1 + rng.below(1100),
                _ => 1 + rng.below(map_bits.min(8192)),
            };
            let align = match rng.below(6) {
                0..=2 => 1,
                3 => 2,
                4 => 1 << rng.below(5),
                _ => 1 << rng.below(11),
            };
            if std::env::var("PCPU_DUMP_STEP")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                == Some(step)
            {
                let mut b = c.clone();
                for (i, md) in b.ctx().m.md.iter().enumerate() {
                    println!("  block {i}: {md:?}");
                }
                let cmd = b.ctx().st.md;
                println!("  chunk: {cmd:?} next_hint {}", cmd.next_hint(bits));
                let mut x = 0;
                let mut runs = std::string::String::new();
                while let Some((s, e)) =
                    crate::bitmap::next_clear_region(b.ctx().m.alloc, map_bits, x)
                {
                    runs += &std::format!("[{s},{e}) ");
                    x = e;
                }
                println!("  free runs: {runs}; request {bits} align {align}");
            }
            let r = alloc(&mut c, bits, align);
            desc = std::format!("alloc {bits} align {align} -> {r:?}");
            match r {
                Some(off) => {
                    assert_eq!(off % align, 0, "step {step}: misaligned");
                    assert!(off + bits <= map_bits);
                    for (i, m) in model[off..off + bits].iter_mut().enumerate() {
                        assert!(!*m, "step {step}: overlap at {}", off + i);
                        *m = true;
                    }
                    live.push((off, bits));
                }
                None if align == 1 => {
                    // Runs inside a block are always found once the chunk
                    // hint admits the request (it may lag behind the truth;
                    // the kernel then takes another chunk).
                    let best = largest_in_block(&model);
                    let hint = before.st.md.contig_hint as usize;
                    assert!(
                        best < bits || hint < bits,
                        "{pages} pages seed {seed} step {step}: {bits} bits refused but a block has a run of {best} (chunk hint {hint}) {:?}", before.st.md
                    );
                }
                None => {}
            }
        } else {
            let (off, bits) = live.swap_remove(rng.below(live.len()));
            assert_eq!(
                free(&mut c, off),
                bits,
                "step {step}: size from the boundary map"
            );
            model[off..off + bits].fill(false);
            desc = std::format!("free {off} ({bits})");
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&mut c)));
        if let Err(e) = r {
            println!("{pages} pages, seed {seed}, step {step}: {desc}");
            let mut b = before;
            for (i, md) in b.ctx().m.md.iter().enumerate() {
                println!("  before block {i}: {md:?}");
            }
            println!("  before chunk: {:?}", b.ctx().st.md);
            for (i, md) in c.ctx().m.md.iter().enumerate() {
                println!("  after block {i}: {md:?}");
            }
            println!("  after chunk: {:?}", c.ctx().st.md);
            let ctx = b.ctx();
            let mut x = 0;
            let mut runs = std::string::String::new();
            while let Some((s, e)) = crate::bitmap::next_clear_region(ctx.m.alloc, map_bits, x) {
                runs += &std::format!("[{s},{e}) ");
                x = e;
            }
            println!("  free runs before: {runs}");
            std::panic::resume_unwind(e);
        }
    }
    // Free everything: the chunk is wholly free again, hints exact.
    for (off, bits) in live.drain(..) {
        assert_eq!(free(&mut c, off), bits);
        check(&mut c);
    }
    assert_eq!(contig(&mut c), (map_bits as u32, 0));
    assert_eq!(c.ctx().st.nr_empty_pop_pages, pages as isize);
}

#[test]
fn random_ops_match_brute_force() {
    if cfg!(miri) {
        soak(1, 11, 120);
        soak(2, 12, 120);
        return;
    }
    for (pages, seed) in [
        (1, 1),
        (2, 2),
        (3, 3),
        (8, 4),
        (2, 5),
        (8, 59),
        (8, 209),
        (2, 11),
    ] {
        soak(pages, seed, 3000);
    }
}

/// `PCPU_SOAK_SEEDS=N cargo test --release -p percpu-bitmap soak -- --ignored`
/// (4000 seeds, about 12 million checked operations, pass).
#[test]
#[ignore = "soak: thousands of seeds against the brute-force hint checker; run with --ignored (PCPU_SOAK_SEEDS=N)"]
fn soak_many_seeds() {
    let n: u64 = std::env::var("PCPU_SOAK_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    for seed in 1..=n {
        soak([1usize, 2, 3, 5, 8][(seed % 5) as usize], seed, 3000);
    }
}

/// The chunk contig hint is rescanned on allocation only when the
/// allocation overlaps it; scan hints steer first fit past small holes.
#[test]
fn alloc_rescans_chunk_hint_only_when_broken() {
    let mut c = VecChunk::new(4);
    assert_eq!(alloc(&mut c, 100, 1), Some(0));
    assert_eq!(alloc(&mut c, 100, 1), Some(100));
    free(&mut c, 0);
    // [0,100) is merged locally but does not become the scan hint: with no
    // scan hint, what lies before it is unknown (the kernel would take it).
    let md = c.ctx().st.md;
    assert_eq!((md.contig_hint, md.contig_hint_start), (3896, 200));
    assert_eq!(md.scan_hint, 0);
    check(&mut c);

    // A small request fills the hole first; the contig hint is untouched.
    assert_eq!(alloc(&mut c, 50, 1), Some(0));
    assert_eq!(contig(&mut c), (3896, 200));
    check(&mut c);

    // 150 bits do not fit in [50,100): they break the contig hint, which is
    // rescanned; block 0's refresh finds the skipped hole before the new
    // contig hint and makes it the scan hint.
    assert_eq!(alloc(&mut c, 150, 1), Some(200));
    assert_eq!(contig(&mut c), (3746, 350));
    let b0 = c.ctx().m.md[0];
    assert_eq!((b0.scan_hint, b0.scan_hint_start), (50, 50));
    assert_eq!((b0.contig_hint, b0.contig_hint_start), (674, 350));
    check(&mut c);
}

/// Frees inside one block merge into the chunk hint locally, so a run that
/// crosses blocks can be under-reported (never over-reported) until a free
/// makes a whole block free or crosses blocks, which rescans.
#[test]
fn free_rescans_chunk_hint_only_for_a_block_or_a_crossing() {
    let mut c = VecChunk::new(4);
    let x0 = alloc(&mut c, 990, 1).unwrap();
    let x1 = alloc(&mut c, 10, 1).unwrap();
    let x2 = alloc(&mut c, 24, 1).unwrap();
    let x3 = alloc(&mut c, 24, 1).unwrap();
    let _x4 = alloc(&mut c, 3048, 1).unwrap();
    assert_eq!((x0, x1, x2, x3), (0, 990, 1000, 1024));
    assert_eq!(contig(&mut c).0, 0, "full");
    check(&mut c);

    free(&mut c, x2); // [1000,1024): end of block 0
    free(&mut c, x3); // [1024,1048): start of block 1
                      // The true run is [1000,1048) = 48 bits across the block edge, but each
                      // free stayed in its block: the chunk knows 24.
    assert_eq!(
        contig(&mut c),
        (24, 1024),
        "equal runs: the better aligned start wins"
    );
    check(&mut c);

    free(&mut c, x1); // [990,1000): extends the run inside block 0 only
    assert_eq!(contig(&mut c), (34, 990));
    check(&mut c);

    // Block 0 becomes wholly free: full rescan, exact again.
    free(&mut c, x0);
    assert_eq!(contig(&mut c), (1048, 0));
    check(&mut c);
}

/// The local merge uses the chunk-relative end (the kernel's block-relative
/// `end` makes it a no-op outside block 0, leaving a full-looking chunk
/// with free space).
#[test]
fn local_merge_outside_block_zero() {
    let mut c = VecChunk::new(2);
    let a: Vec<usize> = (0..4).map(|_| alloc(&mut c, 512, 1).unwrap()).collect();
    assert_eq!(a, [0, 512, 1024, 1536]);
    assert_eq!(contig(&mut c).0, 0);
    free(&mut c, 1024);
    assert_eq!(contig(&mut c), (512, 1024));
    check(&mut c);
    assert_eq!(alloc(&mut c, 256, 1), Some(1024));
    check(&mut c);
}

/// A free that crosses a block edge rescans the chunk and resets the
/// blocks it covers; nr_empty_pop_pages follows wholly free pages.
#[test]
fn cross_block_alloc_and_free() {
    let mut c = VecChunk::new(4);
    assert_eq!(c.ctx().st.nr_empty_pop_pages, 4);
    let a = alloc(&mut c, 10, 1).unwrap();
    let big = alloc(&mut c, 2 * BLOCK_BITS + 20, 1).unwrap();
    assert_eq!((a, big), (0, 10));
    // Blocks 0, 1, 2 are touched: only page 3 is empty.
    assert_eq!(c.ctx().st.nr_empty_pop_pages, 1);
    assert_eq!(c.ctx().m.md[1].contig_hint, 0);
    check(&mut c);
    free(&mut c, big);
    assert_eq!(c.ctx().st.nr_empty_pop_pages, 3);
    assert_eq!(contig(&mut c), (4 * BLOCK_BITS as u32 - 10, 10));
    check(&mut c);
}

/// Alignment padding counts against the contig hint, so a chunk whose only
/// free run is misaligned refuses an aligned request.
#[test]
fn alignment_counts_against_the_hint() {
    let mut c = VecChunk::new(1);
    let offs: Vec<usize> = (0..BLOCK_BITS)
        .map(|_| alloc(&mut c, 1, 1).unwrap())
        .collect();
    assert_eq!(offs[BLOCK_BITS - 1], BLOCK_BITS - 1);
    // Free bit 5 and 6: a 2-bit run at an odd start.
    free(&mut c, 5);
    free(&mut c, 6);
    assert_eq!(contig(&mut c), (2, 5));
    assert_eq!(
        alloc(&mut c, 2, 2),
        None,
        "aligned to 2 bits it needs [6,8)"
    );
    assert_eq!(alloc(&mut c, 1, 2), Some(6));
    check(&mut c);
}

/// The first chunk hides what lies outside its region as allocated.
#[test]
fn first_chunk_hidden_regions() {
    let mut c = VecChunk::new(3);
    c.ctx().init_first(100, 8000);
    let st = &c.ctx().st;
    assert_eq!(
        (st.start_offset, st.end_offset, st.free_bytes),
        (100, 12288 - 8100, 8000)
    );
    assert_eq!(c.ctx().st.md.first_free, 25);
    check(&mut c);
    assert_eq!(alloc(&mut c, 2000, 1), Some(25));
    assert_eq!(alloc(&mut c, 1, 1), None);
    check(&mut c);
}

/// Atomic requests (`pop_only`) skip unpopulated pages.
#[test]
fn pop_only_uses_populated_pages() {
    let mut c = VecChunk::new(4);
    c.ctx().chunk_depopulated(0, 2);
    assert_eq!(c.ctx().st.nr_empty_pop_pages, 2);
    check(&mut c);
    assert_eq!(c.ctx().find_block_fit(10, 1, true), Some(2 * BLOCK_BITS));
    assert_eq!(c.ctx().find_block_fit(10, 1, false), Some(0));
    c.ctx().chunk_depopulated(3, 4);
    // Page 2 alone: a request larger than a page cannot be served atomically.
    assert_eq!(c.ctx().find_block_fit(BLOCK_BITS + 1, 1, true), None);
    assert_eq!(
        c.ctx().find_block_fit(BLOCK_BITS, 1, true),
        Some(2 * BLOCK_BITS)
    );
}

/// The boundary map: the end of an allocation stays marked after free and
/// the start of a live allocation is exactly "allocated and bound".
#[test]
fn boundary_map_rules() {
    let mut c = VecChunk::new(1);
    let a = alloc(&mut c, 7, 1).unwrap();
    let b = alloc(&mut c, 3, 1).unwrap();
    assert_eq!((a, b), (0, 7));
    let ctx = c.ctx();
    assert_eq!(find_next_bit(ctx.m.bound, BLOCK_BITS + 1, 1), 7);
    assert!(ctx.is_alloc_start(0).is_ok());
    assert_eq!(ctx.is_alloc_start(3), Err(crate::FreeErrorKind::Interior));
    assert_eq!(
        ctx.is_alloc_start(10),
        Err(crate::FreeErrorKind::NotAllocated)
    );
    assert_eq!(ctx.alloc_bits_at(7), 3);
    free(&mut c, a);
    let ctx = c.ctx();
    assert_eq!(
        ctx.is_alloc_start(0),
        Err(crate::FreeErrorKind::NotAllocated)
    );
    assert_eq!(find_next_zero_bit(ctx.m.alloc, BLOCK_BITS, 0), 0);
    assert!(
        crate::bitmap::test_bit(ctx.m.bound, 7),
        "free leaves boundary bits"
    );
}

/// A corner of the kernel's scan-hint rule: a free that creates a run
/// smaller than the contig hint made it the scan hint even with a larger
/// run before it (scan hint 0 = "unknown"); the next allocation that breaks
/// the contig hint promoted that scan hint and scanned only after it, so
/// the block (and chunk) contig hint under-reported the larger run. Here
/// the scan hint only moves to a larger run before it, which keeps the
/// promotion exact.
#[test]
fn scan_hint_promotion_stays_exact() {
    let mut c = VecChunk::new(1);
    let sizes = [10, 50, 240, 100, 20, 80, 300, 224];
    let offs: Vec<usize> = sizes
        .iter()
        .map(|&s| alloc(&mut c, s, 1).unwrap())
        .collect();
    assert_eq!(offs, [0, 10, 60, 300, 400, 420, 500, 800]);
    free(&mut c, 10); // A = [10,60): 50
    free(&mut c, 300); // S = [300,400): 100
    free(&mut c, 500); // C = [500,800): 300
    let b = c.ctx().m.md[0];
    assert_eq!(
        (
            b.contig_hint,
            b.contig_hint_start,
            b.scan_hint,
            b.scan_hint_start
        ),
        (300, 500, 100, 300)
    );
    // 80 bits skip A (too small) and break the scan hint S.
    assert_eq!(alloc(&mut c, 80, 1), Some(300));
    assert_eq!(c.ctx().m.md[0].scan_hint, 0);
    check(&mut c);
    // [380,420) = 40 bits: the kernel made it the scan hint although A
    // (50 bits) lies before it.
    free(&mut c, 400);
    check(&mut c);
    // 280 bits break the contig hint C, leaving 20 bits of it.
    assert_eq!(alloc(&mut c, 280, 1), Some(500));
    let b = c.ctx().m.md[0];
    assert_eq!(
        (b.contig_hint, b.contig_hint_start),
        (50, 10),
        "the kernel's rule gives 40 at 380"
    );
    assert_eq!(contig(&mut c), (50, 10));
    check(&mut c);
}

/// The word-at-a-time zero-area search returns exactly what the kernel's
/// run-by-run loop returns (found index when found, and the largest skipped
/// area), over random maps, starts, sizes and alignments.
#[test]
fn find_zero_area_matches_the_kernel_loop() {
    let mut rng = Rng(0x1234_5678);
    let rounds = if cfg!(miri) { 30 } else { 3000 };
    for _ in 0..rounds {
        let pages = 1 + rng.below(2);
        let mut c = VecChunk::new(pages);
        let map_bits = pages * BLOCK_BITS;
        let density = rng.below(100);
        {
            let ctx = c.ctx();
            for b in 0..map_bits {
                if rng.below(100) < density {
                    crate::bitmap::set_bit(ctx.m.alloc, b);
                }
            }
        }
        let ctx = c.ctx();
        for _ in 0..20 {
            let size = 1 + rng.below(map_bits);
            let start = rng.below(size + 2);
            let cap = if rng.below(2) == 0 { 8 } else { 300 };
            let nr = 1 + rng.below(cap);
            let align = 1usize << rng.below(11);
            let want = ctx.find_zero_area_reference(size, start, nr, align - 1);
            let got = ctx.find_zero_area_fast(size, start, nr, align - 1);
            if want.0 + nr <= size || got.0 + nr <= size {
                assert_eq!(got, want, "size {size} start {start} nr {nr} align {align}");
            } else {
                // Both fail; the failing index may differ, the record may not.
                assert!(got.0 + nr > size && want.0 + nr > size);
                assert_eq!(
                    (got.1, got.2),
                    (want.1, want.2),
                    "size {size} start {start} nr {nr} align {align}"
                );
            }
        }
    }
}
