//! The "before" of seed 002: the percpu *area map* allocator of
//! `mm/percpu.c` up to Linux 4.13, re-created as a baseline for the
//! `percpu` tables.
//!
//! # Design (as in 4.13)
//!
//! A chunk has one unit per CPU, like the bitmap allocator's. Its free and
//! used areas are described by `map`, an array of `i32` area *start
//! offsets* in bytes with the low bit as the in-use flag (offsets and sizes
//! are even: `size = ALIGN(size, 2)`, `align >= 2`):
//!
//! ```text
//! map[i] & !1 .. map[i + 1] & !1   area i        map[i] & 1 = in use
//! map[map_used] = unit_size | 1                  end sentinel
//! ```
//!
//! * **alloc** (`pcpu_alloc_area`): walk the areas from `first_free`;
//!   the first free area that fits (alignment `head` included, see
//!   `pcpu_fit_in_area`) is split by *inserting* entries into the array
//!   for the head (unless it is merged into a free predecessor or is smaller
//!   than an `int`) and for the tail (unless smaller than an `int`): a
//!   `memmove` of every entry after it. That memmove, and the walk over
//!   every area before the fit, are the costs the bitmap rewrite removed.
//!   `contig_hint` is the largest free area seen (exact after a full walk).
//! * **free** (`pcpu_free_area`): binary search of the offset, clear the
//!   flag, merge with free neighbours by *removing* entries (`memmove`).
//! * **slots**: chunks on lists by **free size** (`pcpu_chunk_slot`: slot 0
//!   if `free_size` or `contig_hint` is under an `int`); a request walks the
//!   slots from `slot(size)` up and skips chunks whose `contig_hint` is
//!   smaller than the request (alignment *not* included: a chunk full of
//!   4-byte holes is walked in full for every 8-byte-aligned 4-byte request,
//!   the seed's 52 minutes).
//! * **map growth** (`pcpu_extend_area_map`): the array doubles (from 16)
//!   when fewer than 3 free entries remain.
//! * Like the bitmap allocator here: chunks are created on demand from the
//!   same [`ChunkSource`], pages under an area are populated on allocation,
//!   and the area is cleared in every unit except where the pages are known
//!   zero (fresh from a zeroing source and not handed out since), tracked
//!   per page exactly as `percpu-bitmap` does. Chunk lookup on free is a
//!   hash of the chunk-aligned address (the kernel reads `page->index` of
//!   the vmalloc page).
//!
//! One lock (`pcpu_lock`, a spin lock) covers everything; the benchmark is
//! single-threaded, so the kernel's separate `pcpu_alloc_mutex` would be
//! one more uncontended lock.
//!
//! Divergence: the kernel's `list_for_each_entry` continues from a chunk
//! that `pcpu_alloc_area` just relocated to another slot (a quirk that can
//! skip or revisit chunks); here the next chunk is taken before the
//! attempt.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ptr::NonNull;

use local_lock::bits::fls;
use percpu_bitmap::{ChunkSource, MAX_ALLOC_SIZE, PAGE_SIZE};

/// `PCPU_SLOT_BASE_SHIFT`.
const SLOT_BASE_SHIFT: usize = 5;
/// `PCPU_DFL_MAP_ALLOC`: initial entries of a chunk's map.
const DFL_MAP_ALLOC: usize = 16;
/// `sizeof(int)`: heads and tails smaller than this are not split off.
const INT: usize = 4;
/// Not on a list / no neighbour.
const NONE: usize = usize::MAX;

/// `__pcpu_size_to_slot`.
fn size_to_slot_raw(size: usize) -> usize {
    (fls(size) + 2).saturating_sub(SLOT_BASE_SHIFT).max(1)
}

/// One chunk (`struct pcpu_chunk` of 4.13).
struct AmChunk {
    /// Unit 0's address.
    base: NonNull<u8>,
    /// Free bytes.
    free_size: usize,
    /// Largest free area known (exact after a full walk).
    contig_hint: usize,
    /// Entries in use, not counting the end sentinel.
    map_used: usize,
    /// Entries of `map` the chunk may use before it must grow
    /// (`map_alloc`; the `Vec` is kept at this length).
    map: Vec<i32>,
    /// No free area before this index.
    first_free: usize,
    /// Populated pages (one bool per page of a unit).
    populated: Vec<bool>,
    /// Per page: bytes from here to the page end are known zero in every
    /// unit (`PAGE_SIZE` = nothing known).
    clean_from: Vec<u16>,
    /// Slot list links.
    prev: usize,
    next: usize,
    slot: usize,
}

/// Hashes a chunk key (an address shifted by the chunk alignment) with one
/// multiply.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only usize keys")
    }
    fn write_usize(&mut self, k: usize) {
        self.0 = (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The allocator state under `pcpu_lock`.
struct Inner {
    chunks: Vec<AmChunk>,
    /// Heads of the slot lists.
    heads: Vec<usize>,
    tails: Vec<usize>,
    /// `addr >> key_shift` -> chunk index.
    lookup: HashMap<usize, usize, BuildHasherDefault<KeyHasher>>,
}

/// The area-map percpu allocator (see the module docs).
pub struct AreaMap<S: ChunkSource> {
    source: S,
    unit_size: usize,
    nr_units: usize,
    chunk_align: usize,
    key_shift: u32,
    nr_slots: usize,
    zeroed: bool,
    data: spin::Mutex<Inner>,
}

/// Statistics of an [`AreaMap`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AmStats {
    /// Chunks created.
    pub chunks: usize,
    /// Map entries in use over all chunks.
    pub map_entries: usize,
    /// Free bytes over all chunks (unit 0).
    pub free_bytes: usize,
}

impl<S: ChunkSource> AreaMap<S> {
    /// An allocator of chunks of `nr_units` units of `unit_size` bytes
    /// (a multiple of the page size, at least 32 KiB). `zeroed`: pages
    /// from `source` read as zero when populated (as `MmapSource`'s do), so
    /// areas on pages not handed out since need no clearing.
    pub fn new(source: S, unit_size: usize, nr_units: usize, zeroed: bool) -> Self {
        assert!(unit_size.is_multiple_of(PAGE_SIZE) && unit_size >= MAX_ALLOC_SIZE);
        assert!(unit_size < i32::MAX as usize && nr_units > 0);
        let chunk_align = unit_size.next_power_of_two();
        let nr_slots = size_to_slot_raw(unit_size) + 2;
        AreaMap {
            source,
            unit_size,
            nr_units,
            chunk_align,
            key_shift: chunk_align.trailing_zeros(),
            nr_slots,
            zeroed,
            data: spin::Mutex::new(Inner {
                chunks: Vec::new(),
                heads: vec![NONE; nr_slots],
                tails: vec![NONE; nr_slots],
                lookup: HashMap::default(),
            }),
        }
    }

    /// Bytes per unit.
    pub fn unit_size(&self) -> usize {
        self.unit_size
    }

    /// Units per chunk.
    pub fn nr_units(&self) -> usize {
        self.nr_units
    }

    /// `pcpu_size_to_slot`.
    fn size_to_slot(&self, size: usize) -> usize {
        if size == self.unit_size {
            self.nr_slots - 1
        } else {
            size_to_slot_raw(size)
        }
    }

    /// `pcpu_chunk_slot`: by free size.
    fn chunk_slot(&self, c: &AmChunk) -> usize {
        if c.free_size < INT || c.contig_hint < INT {
            0
        } else {
            self.size_to_slot(c.free_size)
        }
    }

    /// `pcpu_chunk_relocate`.
    fn relocate(&self, g: &mut Inner, ci: usize, oslot: usize) {
        let nslot = self.chunk_slot(&g.chunks[ci]);
        if oslot != nslot {
            list_del(g, ci);
            if oslot < nslot || oslot == NONE {
                list_add_head(g, ci, nslot);
            } else {
                list_add_tail(g, ci, nslot);
            }
        }
    }

    /// `pcpu_alloc`: `size` bytes aligned to `align`, cleared in every
    /// unit. Returns unit 0's address.
    pub fn alloc(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        let align = align.max(2);
        let size = size.next_multiple_of(2);
        if size == 0 || size > MAX_ALLOC_SIZE || align > PAGE_SIZE || !align.is_power_of_two() {
            return None;
        }
        let mut g = self.data.lock();
        let (ci, off) = 'found: loop {
            for slot in self.size_to_slot(size)..self.nr_slots {
                let mut ci = g.heads[slot];
                while ci != NONE {
                    let next = g.chunks[ci].next;
                    if size <= g.chunks[ci].contig_hint {
                        // pcpu_need_to_extend + pcpu_extend_area_map.
                        let c = &mut g.chunks[ci];
                        if c.map.len() < c.map_used + 1 + 3 {
                            let n = (c.map.len() * 2).max(c.map_used + 4);
                            c.map.resize(n, 0);
                        }
                        let oslot = slot;
                        if let Some(off) = alloc_area(&mut g.chunks[ci], size, align) {
                            self.relocate(&mut g, ci, oslot);
                            break 'found (ci, off);
                        }
                        self.relocate(&mut g, ci, oslot);
                    }
                    ci = next;
                }
            }
            // No space left: create a new chunk (only if no free one).
            if g.heads[self.nr_slots - 1] == NONE {
                let c = self.create_chunk()?;
                let key = c.base.as_ptr() as usize >> self.key_shift;
                let ci = g.chunks.len();
                g.chunks.push(c);
                g.lookup.insert(key, ci);
                self.relocate(&mut g, ci, NONE);
            }
        };

        // Populate the pages under the area, then clear what may be dirty.
        let c = &mut g.chunks[ci];
        let (ps, pe) = (off / PAGE_SIZE, (off + size).div_ceil(PAGE_SIZE));
        for p in ps..pe {
            if !c.populated[p] {
                for u in 0..self.nr_units {
                    // SAFETY: page `p` of unit `u` lies in the chunk's
                    // reservation from this source.
                    let ok = unsafe {
                        let at = c.base.as_ptr().add(u * self.unit_size + p * PAGE_SIZE);
                        self.source.populate(NonNull::new_unchecked(at), 1)
                    };
                    assert!(ok, "area map: populate failed");
                }
                c.populated[p] = true;
                c.clean_from[p] = if self.zeroed { 0 } else { PAGE_SIZE as u16 };
            }
        }
        let dirty_end = dirty_end(&mut c.clean_from, off, size);
        let base = c.base;
        drop(g);
        if dirty_end > off {
            for u in 0..self.nr_units {
                // SAFETY: the area is ours, populated, inside unit `u`.
                unsafe {
                    core::ptr::write_bytes(
                        base.as_ptr().add(u * self.unit_size + off),
                        0,
                        dirty_end - off,
                    )
                };
            }
        }
        // SAFETY: `off` lies inside unit 0 of the chunk.
        Some(unsafe { NonNull::new_unchecked(base.as_ptr().add(off)) })
    }

    /// `pcpu_create_chunk`.
    fn create_chunk(&self) -> Option<AmChunk> {
        let span_pages = self.nr_units * self.unit_size / PAGE_SIZE;
        let base = self.source.alloc_pages(span_pages, self.chunk_align)?;
        let pages = self.unit_size / PAGE_SIZE;
        let mut map = vec![0i32; DFL_MAP_ALLOC];
        map[0] = 0;
        map[1] = self.unit_size as i32 | 1;
        Some(AmChunk {
            base,
            free_size: self.unit_size,
            contig_hint: self.unit_size,
            map_used: 1,
            map,
            first_free: 0,
            populated: vec![false; pages],
            clean_from: vec![PAGE_SIZE as u16; pages],
            prev: NONE,
            next: NONE,
            slot: NONE,
        })
    }

    /// Creates `nr` chunks whose second half is full of in-use areas of
    /// `size` bytes (never freed individually) and whose every page is
    /// populated, with the first half marked as handed out before (not
    /// known zero): the start state of the seed's second-half-filled
    /// variant, built directly (filling through `alloc` and freeing the
    /// first halves would memmove for minutes).
    ///
    /// # Panics
    ///
    /// If `size` is odd or does not divide half a unit, or the source
    /// fails.
    pub fn precreate_halffull(&self, nr: usize, size: usize) {
        let half = self.unit_size / 2;
        assert!(size.is_multiple_of(2) && half.is_multiple_of(size));
        let pages = self.unit_size / PAGE_SIZE;
        let mut g = self.data.lock();
        for _ in 0..nr {
            let mut c = self.create_chunk().expect("area map: no memory");
            let areas = half / size;
            c.map = Vec::with_capacity((areas + 2).next_power_of_two() * 2);
            c.map.push(0);
            c.map
                .extend((0..areas).map(|k| (half + k * size) as i32 | 1));
            c.map.push(self.unit_size as i32 | 1);
            c.map_used = areas + 1;
            let cap = c.map.capacity();
            c.map.resize(cap, 0);
            c.free_size = half;
            c.contig_hint = half;
            for p in 0..pages {
                for u in 0..self.nr_units {
                    // SAFETY: page `p` of unit `u` lies in the chunk.
                    let ok = unsafe {
                        let at = c.base.as_ptr().add(u * self.unit_size + p * PAGE_SIZE);
                        self.source.populate(NonNull::new_unchecked(at), 1)
                    };
                    assert!(ok, "area map: populate failed");
                }
                c.populated[p] = true;
                c.clean_from[p] = PAGE_SIZE as u16;
            }
            let key = c.base.as_ptr() as usize >> self.key_shift;
            let ci = g.chunks.len();
            g.chunks.push(c);
            g.lookup.insert(key, ci);
            self.relocate(&mut g, ci, NONE);
        }
    }

    /// `free_percpu`.
    ///
    /// # Panics
    ///
    /// If `p` is not the start of a live area of this allocator.
    pub fn free(&self, p: NonNull<u8>) {
        let addr = p.as_ptr() as usize;
        let mut g = self.data.lock();
        let ci = *g
            .lookup
            .get(&(addr >> self.key_shift))
            .expect("area map: foreign pointer");
        let oslot = self.chunk_slot(&g.chunks[ci]);
        let off = addr - g.chunks[ci].base.as_ptr() as usize;
        free_area(&mut g.chunks[ci], off);
        self.relocate(&mut g, ci, oslot);
    }

    /// Chunks, map entries and free bytes now.
    pub fn stats(&self) -> AmStats {
        let g = self.data.lock();
        AmStats {
            chunks: g.chunks.len(),
            map_entries: g.chunks.iter().map(|c| c.map_used).sum(),
            free_bytes: g.chunks.iter().map(|c| c.free_size).sum(),
        }
    }

    /// The areas of every chunk as `(unit 0 address, bytes, in use)`,
    /// checking the map's structure on the way (tests).
    pub fn areas(&self) -> Vec<(usize, usize, bool)> {
        let g = self.data.lock();
        let mut v = Vec::new();
        for c in &g.chunks {
            assert_eq!(c.map[c.map_used], self.unit_size as i32 | 1, "sentinel");
            assert_eq!(c.map[0] & !1, 0);
            let mut free = 0;
            for i in 0..c.map_used {
                let (s, e) = ((c.map[i] & !1) as usize, (c.map[i + 1] & !1) as usize);
                assert!(s < e, "areas increase");
                let used = c.map[i] & 1 != 0;
                if !used {
                    free += e - s;
                    assert!(i >= c.first_free, "first_free past a free area");
                    assert!(e - s <= c.contig_hint, "contig_hint is an upper bound");
                }
                v.push((c.base.as_ptr() as usize + s, e - s, used));
            }
            assert_eq!(free, c.free_size, "free_size");
        }
        v
    }
}

impl<S: ChunkSource> Drop for AreaMap<S> {
    fn drop(&mut self) {
        let span_pages = self.nr_units * self.unit_size / PAGE_SIZE;
        for c in self.data.get_mut().chunks.drain(..) {
            // SAFETY: the reservation came from this source with these
            // parameters and no area of it is used any more.
            unsafe { self.source.free_pages(c.base, span_pages, self.chunk_align) };
        }
    }
}

// SAFETY: the chunk memory is owned by the allocator; its state is behind
// the spin lock.
unsafe impl<S: ChunkSource + Send> Send for AreaMap<S> {}
// SAFETY: as above.
unsafe impl<S: ChunkSource> Sync for AreaMap<S> {}

/// Marks `[off, off + size)` handed out in the per-page known-zero marks
/// and returns the end of the part that may be dirty (`off` if none).
fn dirty_end(clean_from: &mut [u16], off: usize, size: usize) -> usize {
    let end = off + size;
    let mut dirty = off;
    let mut p = off / PAGE_SIZE;
    while p * PAGE_SIZE < end {
        let pbase = p * PAGE_SIZE;
        let lo = off.max(pbase) - pbase;
        let hi = end.min(pbase + PAGE_SIZE) - pbase;
        let cf = clean_from[p] as usize;
        if cf > lo {
            dirty = dirty.max(pbase + cf.min(hi));
        }
        clean_from[p] = cf.max(hi) as u16;
        p += 1;
    }
    dirty
}

fn list_del(g: &mut Inner, ci: usize) {
    let (slot, prev, next) = {
        let c = &g.chunks[ci];
        (c.slot, c.prev, c.next)
    };
    if slot == NONE {
        return;
    }
    if prev == NONE {
        g.heads[slot] = next;
    } else {
        g.chunks[prev].next = next;
    }
    if next == NONE {
        g.tails[slot] = prev;
    } else {
        g.chunks[next].prev = prev;
    }
    let c = &mut g.chunks[ci];
    (c.prev, c.next, c.slot) = (NONE, NONE, NONE);
}

fn list_add_head(g: &mut Inner, ci: usize, slot: usize) {
    let head = g.heads[slot];
    {
        let c = &mut g.chunks[ci];
        (c.prev, c.next, c.slot) = (NONE, head, slot);
    }
    if head == NONE {
        g.tails[slot] = ci;
    } else {
        g.chunks[head].prev = ci;
    }
    g.heads[slot] = ci;
}

fn list_add_tail(g: &mut Inner, ci: usize, slot: usize) {
    let tail = g.tails[slot];
    {
        let c = &mut g.chunks[ci];
        (c.prev, c.next, c.slot) = (tail, NONE, slot);
    }
    if tail == NONE {
        g.heads[slot] = ci;
    } else {
        g.chunks[tail].next = ci;
    }
    g.tails[slot] = ci;
}

/// `pcpu_fit_in_area` (non-atomic requests: every page can be populated):
/// the head padding before an aligned fit of `size` in the free area
/// `[off, off + this_size)`, or `None`.
#[inline]
fn fit_in_area(off: usize, this_size: usize, size: usize, align: usize) -> Option<usize> {
    let head = off.next_multiple_of(align) - off;
    (this_size >= head + size).then_some(head)
}

/// `pcpu_alloc_area`: first fit from `first_free`, splitting by memmove.
/// The caller made room for two more entries.
fn alloc_area(c: &mut AmChunk, mut size: usize, align: usize) -> Option<usize> {
    let mut max_contig = 0usize;
    let mut seen_free = false;
    let mut i = c.first_free;
    while i < c.map_used {
        let mut off = c.map[i] as usize;
        if off & 1 != 0 {
            i += 1;
            continue;
        }
        let mut this_size = (c.map[i + 1] & !1) as usize - off;
        let Some(mut head) = fit_in_area(off, this_size, size, align) else {
            if !seen_free {
                c.first_free = i;
                seen_free = true;
            }
            max_contig = max_contig.max(this_size);
            i += 1;
            continue;
        };

        // If head is small or the previous area is free, merge them.
        if head != 0 && (head < INT || c.map[i - 1] & 1 == 0) {
            off += head;
            c.map[i] = off as i32;
            if c.map[i - 1] & 1 != 0 {
                c.free_size -= head;
            } else {
                max_contig = max_contig.max(c.map[i] as usize - c.map[i - 1] as usize);
            }
            this_size -= head;
            head = 0;
        }

        // If tail is small, just keep it around.
        let mut tail = this_size - head - size;
        if tail < INT {
            tail = 0;
            size = this_size - head;
        }

        // Split if warranted: insert the new entries (memmove).
        if head != 0 || tail != 0 {
            let nr_extra = usize::from(head != 0) + usize::from(tail != 0);
            c.map.copy_within(i + 1..c.map_used + 1, i + 1 + nr_extra);
            c.map_used += nr_extra;
            if head != 0 {
                if !seen_free {
                    c.first_free = i;
                    seen_free = true;
                }
                i += 1;
                off += head;
                c.map[i] = off as i32;
                max_contig = max_contig.max(head);
            }
            if tail != 0 {
                c.map[i + 1] = (off + size) as i32;
                max_contig = max_contig.max(tail);
            }
        }

        if !seen_free {
            c.first_free = i + 1;
        }
        // Update the hint and mark allocated.
        if i + 1 == c.map_used {
            c.contig_hint = max_contig; // fully scanned
        } else {
            c.contig_hint = c.contig_hint.max(max_contig);
        }
        c.free_size -= size;
        c.map[i] |= 1;
        return Some(off);
    }
    c.contig_hint = max_contig; // fully scanned
    None
}

/// `pcpu_free_area`: binary search, clear the flag, merge by memmove.
fn free_area(c: &mut AmChunk, off: usize) {
    let freeme = (off | 1) as i32;
    let (mut i, mut j) = (0usize, c.map_used);
    let mut found = 0i32;
    while i != j {
        let k = (i + j) / 2;
        found = c.map[k];
        match found.cmp(&freeme) {
            std::cmp::Ordering::Less => i = k + 1,
            std::cmp::Ordering::Greater => j = k,
            std::cmp::Ordering::Equal => (i, j) = (k, k),
        }
    }
    assert_eq!(found, freeme, "area map: bad free at offset {off:#x}");
    if i < c.first_free {
        c.first_free = i;
    }
    let off = (found & !1) as usize;
    c.map[i] = off as i32;
    c.free_size += (c.map[i + 1] & !1) as usize - off;

    let mut to_free = 0;
    // Merge with next?
    if c.map[i + 1] & 1 == 0 {
        to_free += 1;
    }
    // Merge with previous?
    if i > 0 && c.map[i - 1] & 1 == 0 {
        to_free += 1;
        i -= 1;
    }
    if to_free != 0 {
        c.map_used -= to_free;
        c.map
            .copy_within(i + 1 + to_free..c.map_used + 1 + to_free, i + 1);
    }
    c.contig_hint = c.contig_hint.max((c.map[i + 1] - c.map[i] - 1) as usize);
}

#[cfg(test)]
mod tests {
    use super::*;
    use percpu_bitmap::HeapSource;

    /// xorshift64.
    fn rng(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// Checks that live areas are disjoint, inside their chunk, aligned and
    /// as large as asked, against the map's own view.
    fn check(a: &AreaMap<HeapSource>, live: &[(usize, usize, usize)]) {
        let areas = a.areas();
        let used: Vec<_> = areas.iter().filter(|x| x.2).collect();
        assert_eq!(used.len(), live.len(), "one used area per live allocation");
        let mut sorted: Vec<_> = live.to_vec();
        sorted.sort_unstable();
        for w in sorted.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "overlap: {:?}", w);
        }
        for &(p, size, align) in live {
            assert_eq!(p % align, 0, "alignment");
            let area = used.iter().find(|x| x.0 == p).expect("live area in map");
            assert!(area.1 >= size);
        }
    }

    #[test]
    fn sequential_then_free_in_every_order() {
        for order in 0..3 {
            let a = AreaMap::new(HeapSource::new(), 32 << 10, 2, false);
            let n = 20_000;
            let v: Vec<_> = (0..n).map(|_| a.alloc(4, 4).unwrap()).collect();
            let live: Vec<_> = v.iter().map(|p| (p.as_ptr() as usize, 4, 4)).collect();
            check(&a, &live);
            let mut idx: Vec<usize> = (0..n).collect();
            match order {
                0 => {}
                1 => idx = (0..n).step_by(2).chain((1..n).step_by(2)).collect(),
                _ => idx.reverse(),
            }
            for &i in &idx {
                a.free(v[i]);
            }
            let s = a.stats();
            assert_eq!(s.free_bytes, s.chunks * (32 << 10));
            assert_eq!(s.map_entries, s.chunks, "every chunk one free area again");
        }
    }

    #[test]
    fn random_sizes_and_alignments_never_overlap() {
        let a = AreaMap::new(HeapSource::new(), 32 << 10, 2, false);
        let mut live: Vec<(usize, usize, usize)> = Vec::new();
        let mut x = 0x1234_5678_9abc_def1u64;
        for step in 0..6000 {
            if live.is_empty() || !rng(&mut x).is_multiple_of(3) {
                let size = 1 + (rng(&mut x) % 300) as usize;
                let align = 1usize << (rng(&mut x) % 7);
                let p = a.alloc(size, align).unwrap();
                // Every byte of both units reads zero (cleared on alloc).
                for u in 0..2 {
                    // SAFETY: the area is live, `size` bytes in each unit.
                    let s =
                        unsafe { std::slice::from_raw_parts(p.as_ptr().add(u * (32 << 10)), size) };
                    assert!(s.iter().all(|&b| b == 0), "area not cleared");
                    // Dirty it for the next user of these bytes.
                    // SAFETY: as above.
                    unsafe { p.as_ptr().add(u * (32 << 10)).write_bytes(0xa5, size) };
                }
                live.push((p.as_ptr() as usize, size, align.max(2)));
            } else {
                let k = (rng(&mut x) as usize) % live.len();
                let (p, _, _) = live.swap_remove(k);
                a.free(NonNull::new(p as *mut u8).unwrap());
            }
            if step % 97 == 0 {
                check(&a, &live);
            }
        }
        check(&a, &live);
        for (p, _, _) in live.drain(..) {
            a.free(NonNull::new(p as *mut u8).unwrap());
        }
        let s = a.stats();
        assert_eq!(s.free_bytes, s.chunks * (32 << 10));
    }

    #[test]
    fn aligned_small_areas_leave_holes_that_are_walked() {
        let a = AreaMap::new(HeapSource::new(), 32 << 10, 1, true);
        // 4-byte areas at 8-byte alignment: every other 4 bytes is a hole.
        let v: Vec<_> = (0..5000).map(|_| a.alloc(4, 8).unwrap()).collect();
        let live: Vec<_> = v.iter().map(|p| (p.as_ptr() as usize, 4, 8)).collect();
        check(&a, &live);
        let s = a.stats();
        assert_eq!(s.chunks, 2, "4096 areas of 8 bytes per 32 KiB chunk");
        for p in v {
            a.free(p);
        }
        assert_eq!(a.stats().map_entries, 2);
    }

    #[test]
    fn halffull_chunks_fill_their_first_half() {
        let a = AreaMap::new(HeapSource::new(), 32 << 10, 2, false);
        a.precreate_halffull(2, 16);
        let s = a.stats();
        assert_eq!((s.chunks, s.free_bytes), (2, 32 << 10));
        let v: Vec<_> = (0..2048).map(|_| a.alloc(16, 4).unwrap()).collect();
        assert_eq!(a.stats().chunks, 2, "the first halves took them all");
        let live: Vec<_> = v.iter().map(|p| (p.as_ptr() as usize, 16, 4)).collect();
        let areas = a.areas();
        assert_eq!(areas.iter().filter(|x| x.2).count(), 2 * 2048);
        for &(p, _, _) in &live {
            assert!(p % (32 << 10) < 16 << 10, "in a first half");
        }
        for p in v {
            a.free(p);
        }
        assert_eq!(a.stats().free_bytes, 32 << 10);
    }

    #[test]
    fn known_zero_marks() {
        let mut cf = vec![0u16, 0, 4096];
        assert_eq!(dirty_end(&mut cf, 0, 8), 0, "fresh: nothing to clear");
        assert_eq!(dirty_end(&mut cf, 4, 8), 8, "[4, 8) was handed out");
        assert_eq!(cf[0], 12);
        assert_eq!(dirty_end(&mut cf, 4090, 12), 4090, "both pages fresh there");
        assert_eq!(cf[1], 6);
        assert_eq!(dirty_end(&mut cf, 8190, 4), 8194, "page 2 unknown");
        assert_eq!(cf[2], 4096);
    }

    #[test]
    fn bad_requests_fail() {
        let a = AreaMap::new(HeapSource::new(), 32 << 10, 1, false);
        assert!(a.alloc(0, 4).is_none());
        assert!(a.alloc(MAX_ALLOC_SIZE + 1, 4).is_none());
        assert!(a.alloc(4, 3).is_none());
        assert!(a.alloc(MAX_ALLOC_SIZE, 4).is_some());
    }
}
