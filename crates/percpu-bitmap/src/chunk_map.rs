//! Address -> chunk lookup for the free path (the kernel reads the chunk
//! pointer from the `struct page` of the address, `pcpu_get_page_chunk`).
//!
//! Every dynamic chunk's unit 0 starts at an address aligned to
//! `chunk_align = next_power_of_two(unit_size)`, so all of unit 0 shares one
//! key `addr >> log2(chunk_align)` and no two chunks share a key. The keys
//! live in an open-addressing table (linear probing, backward-shift
//! deletion, load factor <= 1/2) whose memory comes from the chunk source.
//! A lookup never dereferences the address, so a foreign pointer is
//! detected, not followed.
//!
//! Mutations happen under the alloc mutex *and* `pcpu_lock`; growth
//! allocates the new table with only the mutex held and swaps it in under
//! `pcpu_lock`. Lookups need `pcpu_lock`.

use core::ptr::{null_mut, NonNull};

use crate::chunk::Chunk;
use crate::types::PAGE_SIZE;

/// One slot: `key == 0` is empty (key 0 would be address 0).
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Entry {
    key: usize,
    chunk: *mut Chunk,
}

/// Capacity of the first table: one page of entries.
const INITIAL_CAP: usize = PAGE_SIZE / core::mem::size_of::<Entry>();

/// The table. `len <= cap / 2`.
pub(crate) struct ChunkMap {
    table: *mut Entry,
    cap: usize,
    len: usize,
}

impl ChunkMap {
    /// An empty map without a table.
    pub const fn new() -> Self {
        ChunkMap {
            table: null_mut(),
            cap: 0,
            len: 0,
        }
    }

    /// Number of chunks registered.
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn home(&self, key: usize) -> usize {
        let h = (key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> (64 - self.cap.trailing_zeros())) as usize
    }

    #[inline(always)]
    fn slot(&self, i: usize) -> &Entry {
        // SAFETY: `i < cap` (callers mask with cap - 1) and the table holds
        // `cap` initialised entries.
        unsafe { &*self.table.add(i) }
    }

    #[inline(always)]
    fn slot_mut(&mut self, i: usize) -> &mut Entry {
        // SAFETY: as in `slot`, and `&mut self` is exclusive.
        unsafe { &mut *self.table.add(i) }
    }

    /// The chunk registered under `key`.
    #[inline]
    pub fn lookup(&self, key: usize) -> Option<NonNull<Chunk>> {
        if self.cap == 0 || key == 0 {
            return None;
        }
        let mask = self.cap - 1;
        let mut i = self.home(key);
        loop {
            let e = self.slot(i);
            if e.key == key {
                return NonNull::new(e.chunk);
            }
            if e.key == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// Whether one more insertion needs a larger table.
    pub fn needs_grow(&self) -> bool {
        (self.len + 1) * 2 > self.cap
    }

    /// Capacity of the next table.
    pub fn grown_cap(&self) -> usize {
        (self.cap * 2).max(INITIAL_CAP)
    }

    /// Pages of a table of `cap` entries.
    pub fn table_pages(cap: usize) -> usize {
        (cap * core::mem::size_of::<Entry>()).div_ceil(PAGE_SIZE)
    }

    /// Moves every entry into `table` (of `cap` entries, power of two,
    /// larger than twice `len`) and returns the old table and capacity.
    ///
    /// # Safety
    ///
    /// `table` points to `table_pages(cap)` writable pages, page aligned.
    pub unsafe fn rehash_into(&mut self, table: NonNull<u8>, cap: usize) -> (*mut Entry, usize) {
        debug_assert!(cap.is_power_of_two() && cap >= 2 * (self.len + 1));
        let new = table.as_ptr().cast::<Entry>();
        // SAFETY: the caller gives `cap` entries' worth of writable memory.
        unsafe { core::ptr::write_bytes(new, 0, cap) };
        let old = core::mem::replace(
            self,
            ChunkMap {
                table: new,
                cap,
                len: 0,
            },
        );
        for i in 0..old.cap {
            let e = *old.slot(i);
            if e.key != 0 {
                self.insert(e.key, e.chunk);
            }
        }
        (old.table, old.cap)
    }

    /// Registers `chunk` under `key` (the table must have room).
    pub fn insert(&mut self, key: usize, chunk: *mut Chunk) {
        assert!(
            !self.needs_grow() && key != 0,
            "ChunkMap: insert without room"
        );
        let mask = self.cap - 1;
        let mut i = self.home(key);
        while self.slot(i).key != 0 {
            debug_assert_ne!(self.slot(i).key, key, "ChunkMap: key registered twice");
            i = (i + 1) & mask;
        }
        *self.slot_mut(i) = Entry { key, chunk };
        self.len += 1;
    }

    /// Unregisters `key`; returns whether it was there.
    pub fn remove(&mut self, key: usize) -> bool {
        if self.cap == 0 {
            return false;
        }
        let mask = self.cap - 1;
        let mut i = self.home(key);
        loop {
            let k = self.slot(i).key;
            if k == key {
                break;
            }
            if k == 0 {
                return false;
            }
            i = (i + 1) & mask;
        }
        // Backward-shift deletion: pull later entries of the probe run
        // into the hole unless their home lies cyclically in (hole, j].
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let e = *self.slot(j);
            if e.key == 0 {
                break;
            }
            let h = self.home(e.key);
            let stays = if i <= j {
                i < h && h <= j
            } else {
                i < h || h <= j
            };
            if !stays {
                *self.slot_mut(i) = e;
                i = j;
            }
        }
        *self.slot_mut(i) = Entry {
            key: 0,
            chunk: null_mut(),
        };
        self.len -= 1;
        true
    }

    /// The table's memory and capacity (for freeing it at the end).
    pub fn take_table(&mut self) -> (*mut Entry, usize) {
        let old = core::mem::replace(self, ChunkMap::new());
        (old.table, old.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::vec;

    #[test]
    fn matches_a_hashmap_under_churn() {
        let cap = 64usize;
        let mut mem = vec![0u8; ChunkMap::table_pages(cap) * PAGE_SIZE + PAGE_SIZE];
        let off = mem.as_ptr().align_offset(PAGE_SIZE);
        let table = NonNull::new(mem[off..].as_mut_ptr()).unwrap();
        let mut map = ChunkMap::new();
        // SAFETY: `table` has room for `cap` entries.
        let (old, old_cap) = unsafe { map.rehash_into(table, cap) };
        assert!(old.is_null() && old_cap == 0);
        let mut model = HashMap::new();
        let mut x = 7u64;
        for step in 0..if cfg!(miri) { 400 } else { 5000usize } {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Keys shaped like aligned chunk bases: clustered.
            let key = 0x1000 + (x % 40) as usize;
            if x.is_multiple_of(3) || map.needs_grow() {
                assert_eq!(map.remove(key), model.remove(&key).is_some(), "step {step}");
            } else if let std::collections::hash_map::Entry::Vacant(v) = model.entry(key) {
                map.insert(key, core::ptr::without_provenance_mut(step + 1));
                v.insert(step);
            }
            assert_eq!(map.len(), model.len());
            for k in 0x1000..0x1000 + 40usize {
                assert_eq!(
                    map.lookup(k).map(|p| p.as_ptr().addr()),
                    model.get(&k).map(|s| s + 1),
                    "step {step} key {k}"
                );
            }
        }
    }
}
