//! Freelist randomisation (`CONFIG_SLAB_FREELIST_RANDOM`,
//! [`SlabFlags::RANDOM_FREELIST`](crate::SlabFlags::RANDOM_FREELIST)): the
//! cache's pre-computed random sequence (`init_cache_random_seq`: a
//! Fisher-Yates shuffle of the object indices of a slab of the preferred
//! order, `freelist_randomize`), kept in a page block, and the walk of it
//! from a random position that links a new slab's objects
//! (`shuffle_freelist`, `next_freelist_entry`).

use core::sync::atomic::Ordering as CoreOrdering;

use buddy::{AllocFlags, Order};
use local_lock::sync::atomic::Ordering;
use local_lock::Platform;

use crate::layout::SlabFlags;
use crate::source::SlabSource;

use super::{FreePtr, KmemCache};

/// Owner tag of the page block holding a cache's random sequence.
pub(crate) const TAG_RANDOM_SEQ: u32 = 0x5e90_0000;

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// A step of the cache's xorshift64* state (seeded from the platform's
    /// random seed at first use; racy updates only lose randomness).
    fn next_random(&self) -> u64 {
        let mut x = self.shuffle.load(CoreOrdering::Relaxed) as u64 | 1;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.shuffle.store(x as usize, CoreOrdering::Relaxed);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// `get_random_u32_below(n)`, `n <= 2^32`.
    fn random_below(&self, n: usize) -> usize {
        (((self.next_random() >> 32) * n as u64) >> 32) as usize
    }

    /// The cache's random sequence (`s->random_seq`) of `oo.objects`
    /// object indices, made at its first need (the kernel makes it when
    /// the cache is created; a cache here may be a `static`). `None` if its
    /// block cannot be had: that slab is linked in address order, as the
    /// kernel's `shuffle_freelist` does without a sequence.
    fn random_seq(&self) -> Option<*const u16> {
        let seq = self.random_seq.load(CoreOrdering::Acquire);
        if seq != 0 {
            return Some(core::ptr::with_exposed_provenance(seq));
        }
        self.init_random_seq()
    }

    /// `init_cache_random_seq` / `freelist_randomize`.
    #[cold]
    #[inline(never)]
    fn init_random_seq(&self) -> Option<*const u16> {
        let count = self.lay.oo.objects as usize;
        let bytes = count * core::mem::size_of::<u16>();
        let order = Order::new(crate::layout::get_order(bytes, self.geometry.page_size))?;
        let b = self.source.alloc_block(order, AllocFlags::NONE)?;
        b.owner.tag().store(TAG_RANDOM_SEQ, Ordering::Relaxed);
        let seq = b.page.ptr.as_ptr().cast::<u16>();
        // SAFETY: the block is ours and holds `count` u16 (aligned: a
        // page); nobody sees it before the release below.
        unsafe {
            for i in 0..count {
                seq.add(i).write(i as u16);
            }
            // Fisher-Yates shuffle.
            for i in (1..count).rev() {
                let r = self.random_below(i + 1);
                core::ptr::swap(seq.add(i), seq.add(r));
            }
        }
        match self.random_seq.compare_exchange(
            0,
            seq.expose_provenance(),
            CoreOrdering::AcqRel,
            CoreOrdering::Acquire,
        ) {
            Ok(_) => Some(seq),
            Err(other) => {
                // Another context made one first: everyone uses it.
                self.free_seq_block(seq.expose_provenance());
                Some(core::ptr::with_exposed_provenance(other))
            }
        }
    }

    fn free_seq_block(&self, addr: usize) {
        let p = core::ptr::with_exposed_provenance_mut::<u8>(addr);
        if let Some(b) = self.source.block_of(p) {
            b.owner.tag().store(0, Ordering::Relaxed);
            // SAFETY: the block was allocated by `init_random_seq` and
            // nobody reads it any more.
            unsafe { self.source.free_block(b.head, b.order) };
        }
    }

    /// Gives the random sequence's block back (cache destruction, with
    /// exclusive access: no slab is being made).
    pub(super) fn free_random_seq(&mut self) {
        let seq = self.random_seq.swap(0, CoreOrdering::Relaxed);
        if seq != 0 {
            self.free_seq_block(seq);
        }
    }

    /// Links the `objects` objects of a new slab at `base` through their
    /// free pointers and returns the first: in address order, or with
    /// `RANDOM_FREELIST` in the order of the cache's random sequence from a
    /// random position, skipping indices beyond a smaller (minimum-order)
    /// slab (`shuffle_freelist`, `next_freelist_entry`).
    ///
    /// The first `take.len()` objects of that order (at most `objects`)
    /// are not linked but written to `take`, as the caller's allocations
    /// (with `clear`, their free-pointer words cleared in hardened caches,
    /// as `load_freelist` clears an object it hands out; without, for a
    /// caller that writes every word itself, a sheaf refill marking them
    /// free): a bulk allocation
    /// that wants a whole new slab's objects takes them without a free
    /// pointer written and read back for each. Returns the first linked
    /// object (0 if all were taken) and the number taken.
    pub(super) fn link_objects(
        &self,
        base: *mut u8,
        objects: usize,
        take: &mut [*mut u8],
        clear: bool,
    ) -> (usize, usize) {
        let size = self.lay.size;
        let addr = |i: usize| {
            // SAFETY: `i < objects`: inside the block.
            unsafe { base.add(i * size) }.expose_provenance()
        };
        let seq = if self.flags.contains(SlabFlags::RANDOM_FREELIST) && objects >= 2 {
            self.random_seq()
        } else {
            None
        };
        let count = self.lay.oo.objects as usize;
        let mut pos = if seq.is_some() {
            self.random_below(count)
        } else {
            0
        };
        // The sequence's next index below `objects`.
        let in_seq = |seq: *const u16, pos: &mut usize| loop {
            // SAFETY: `pos < count`, the sequence's length.
            let i = unsafe { seq.add(*pos).read() } as usize;
            *pos = if *pos + 1 >= count { 0 } else { *pos + 1 };
            if i < objects {
                break i;
            }
        };
        let k = take.len().min(objects);
        // (The cache's words read once: `FpKeys`.)
        let (keys, clear) = (self.fp_keys(), clear && self.hardened());
        let put = |i: usize| {
            let p = addr(i);
            if clear {
                keys.word(p).store(FreePtr::NULL.0, CoreOrdering::Relaxed);
            }
            core::ptr::with_exposed_provenance_mut::<u8>(p)
        };
        match seq {
            None => {
                for (i, t) in take[..k].iter_mut().enumerate() {
                    *t = put(i);
                }
                pos = k;
            }
            Some(seq) => {
                for t in &mut take[..k] {
                    *t = put(in_seq(seq, &mut pos));
                }
            }
        }
        let mut next = || match seq {
            None => {
                pos += 1;
                pos - 1
            }
            Some(seq) => in_seq(seq, &mut pos),
        };
        if k == objects {
            return (0, k);
        }
        let head = addr(next());
        let mut cur = head;
        for _ in k + 1..objects {
            let n = addr(next());
            self.set_fp(cur, n);
            cur = n;
        }
        self.set_fp(cur, 0);
        (head, k)
    }
}
