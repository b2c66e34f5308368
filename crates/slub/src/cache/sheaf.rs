//! Sheaves and the barn (seed 004): per-CPU main and spare arrays of
//! object pointers behind the local trylock, the sheaf slow paths
//! (swap, trade at the barn, refill from and flush to slabs through the
//! slab-level bulk operations), and the barn's bounded lists of full and
//! empty sheaves.

use core::ptr::NonNull;
use core::sync::atomic::Ordering as CoreOrdering;

use buddy::{AllocFlags, Order};
use local_lock::sync::atomic::Ordering;
use local_lock::Platform;

use crate::error::FreeError;
use crate::error::FreeErrorKind;
use crate::source::SlabSource;
use crate::stats::SlubStat;

use super::bulk::{Chains, LastSlab};
use super::freeptr::FpKeys;
use super::{Barn, CpuLocked, Guard, KmemCache, Sheaf};

/// Bytes between a private sheaf's block and the sheaf (see
/// `KmemCache::sheaf_color`).
pub(super) const PRIVATE_SHEAF_COLOR: usize = 8;

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// Stores `obj` as sheaf entry `i`: hardened caches store it encoded
    /// (`obj ^ secret`), so a write into a freed block that became a sheaf
    /// cannot name an address kmalloc would return.
    #[inline(always)]
    pub(super) fn sheaf_set(&self, sh: Sheaf, i: usize, obj: usize) {
        if self.hardened() {
            sh.set(i, obj ^ self.entry_key())
        } else {
            sh.set(i, obj)
        }
    }

    /// Sheaf entry `i`, decoded; a hardened cache reports (and panics on)
    /// an entry outside its slabs instead of returning it (`None`: the
    /// caller unlocks, then calls [`bad_sheaf`](Self::bad_sheaf) with the
    /// `Err` value).
    #[inline(always)]
    pub(super) fn sheaf_get(&self, sh: Sheaf, i: usize) -> Result<usize, usize> {
        let o = sh.get(i);
        if self.hardened() {
            let o = o ^ self.entry_key();
            if !self.in_slabs(o) {
                return Err(o);
            }
            return Ok(o);
        }
        Ok(o)
    }

    /// Hardened caches: marks an object pushed onto a sheaf as free (its
    /// free-pointer word holds the secret, see
    /// [`looks_free`](Self::looks_free)).
    #[inline(always)]
    pub(super) fn mark_free(&self, obj: usize) {
        if self.hardened() {
            self.fp_word(obj).store(
                self.random.load(CoreOrdering::Relaxed),
                CoreOrdering::Relaxed,
            );
        }
    }

    /// Hardened caches: whether the free-pointer word `w` of an object
    /// being freed holds the free marker `r` (the object is already in a
    /// sheaf: a double free).
    ///
    /// The first byte is compared first, the whole word only when it
    /// matches (about 1 in 256 live objects; the marker's first byte is
    /// kept out of the common byte values, see `init_mode`). A program
    /// often writes an object with narrow stores just before freeing it:
    /// a word load that overlaps a narrower recent store cannot be
    /// forwarded from the store buffer and waits until the store commits
    /// (on this project's machine a 64 B pair after a one-byte write took
    /// 11.9 ns instead of 7.8 ns), while a byte load is always contained
    /// in the store that last wrote its byte, so it forwards.
    #[inline(always)]
    pub(super) fn marked_free(w: &core::sync::atomic::AtomicUsize, r: usize) -> bool {
        // SAFETY: the first byte of the aligned word `w`, read plainly (an
        // atomic byte access to an atomic word is a mixed-size access,
        // which Rust's memory model leaves out and miri rejects): the
        // object is the caller's (being freed), so nothing writes it
        // concurrently (a racing double free is the caller's undefined
        // behaviour), and this thread's earlier atomic stores to it happen
        // before the read.
        let b = unsafe { w.as_ptr().cast::<u8>().read() };
        b == r as u8 && w.load(CoreOrdering::Relaxed) == r
    }

    /// Reports a sheaf whose size word is beyond its capacity.
    #[cold]
    #[inline(never)]
    pub(super) fn bad_sheaf_size(&self, sh: Sheaf, n: usize) -> ! {
        panic!(
            "slub {}: corrupted sheaf {:#x}: size {n} above its capacity {} (a write after free)",
            self.name, sh.0, self.sheaf_capacity
        )
    }

    /// Reports a sheaf entry that decodes outside the cache's slabs.
    #[cold]
    #[inline(never)]
    pub(super) fn bad_sheaf(&self, sh: Sheaf, i: usize, o: usize) -> ! {
        panic!(
            "slub {}: corrupted sheaf {:#x}: entry {i} (at {:#x}) decodes to {o:#x}, \
             which is not an object of the cache (slabs within {:#x}..{:#x}; a write after free)",
            self.name,
            sh.0,
            sh.entry_addr(i),
            self.slab_lo.load(CoreOrdering::Relaxed),
            self.slab_hi.load(CoreOrdering::Relaxed)
        )
    }

    /// `local_trylock` of the CPU's slot for the sheaves (interrupts saved
    /// where there are any): a context that interrupted the holder gets
    /// `None` and takes the slab path.
    #[inline(always)]
    pub(super) fn try_lock_cpu(&self) -> Option<Guard<'_, P, N>> {
        if P::HAS_IRQS {
            self.cpu.try_lock_irqsave()
        } else {
            self.cpu.try_lock()
        }
    }

    /// The bytes of a sheaf (its header and entries).
    pub(super) fn sheaf_bytes(&self) -> usize {
        (self.sheaf_capacity + Sheaf::HDR) * core::mem::size_of::<usize>()
    }

    /// The bytes of a private sheaf block: the sheaf and its color, to the
    /// power of two (the private pool's sizes). A whole page each before:
    /// every process that uses a class holds two to four sheaves of it per
    /// CPU, and a page each was the largest part of a shell's heap under
    /// mm-malloc (measured, the main `bash` of `scripts/programs.sh`'s
    /// fork loop: 39 sheaves, 156 KiB resident of its 4.4 MiB peak; now
    /// 2 KiB for 128 entries, 256 B for 4). (Packed eight to a page with
    /// no color, 512 B for 32 entries, the unhardened 1024-object batches
    /// of `slub-debug` were about 10% slower; the color keeps the size
    /// word, which every push and pop stores, off the 16-byte grid of the
    /// objects as it was.)
    pub(super) fn private_sheaf_bytes(&self) -> usize {
        (self.sheaf_bytes() + PRIVATE_SHEAF_COLOR).next_power_of_two()
    }

    /// Where a private sheaf starts in its block: 8 bytes in, when the
    /// block has room. Its size word, which every push and pop stores,
    /// then never shares its address modulo 4 KiB with an object of 16
    /// bytes or more (slabs are page aligned, such objects 16-byte
    /// aligned): at offset 0, a hot object at a page boundary made every
    /// load of its free marker wait on the size store before it (4 KiB
    /// aliasing; `slub-debug`'s hardened 64 B pair measured 3.50 ns with
    /// the sheaf moved, 4.2-4.7 ns at offset 0, plain 3.45).
    fn sheaf_color(&self) -> usize {
        if self.private_sheaf_bytes() - self.sheaf_bytes() >= PRIVATE_SHEAF_COLOR {
            PRIVATE_SHEAF_COLOR
        } else {
            0
        }
    }

    /// The order of a sheaf's page block.
    fn sheaf_order(&self) -> Option<Order> {
        Order::new(crate::layout::get_order(
            self.sheaf_bytes(),
            self.geometry.page_size,
        ))
    }

    /// `alloc_empty_sheaf`: a block for a sheaf, from the source's private
    /// memory where it has it ([`SlabSource::PRIVATE_META`]: no user
    /// pointer reaches it, so entries are stored plain; a page at least,
    /// see [`private_sheaf_bytes`](Self::private_sheaf_bytes)), else a
    /// page block tagged `TAG_SHEAF`.
    ///
    /// [`SlabSource::PRIVATE_META`]: buddy::PageAlloc::PRIVATE_META
    pub(super) fn new_sheaf(&self) -> Option<Sheaf> {
        let p = if S::PRIVATE_META {
            let b = self.source.alloc_private(self.private_sheaf_bytes())?;
            // SAFETY: within the block (`sheaf_color` leaves room for the
            // sheaf after it); not null.
            unsafe { NonNull::new_unchecked(b.as_ptr().add(self.sheaf_color())) }
        } else {
            let b = self
                .source
                .alloc_block(self.sheaf_order()?, AllocFlags::NONE)?;
            b.owner
                .tag()
                .store(crate::slab::TAG_SHEAF, Ordering::Relaxed);
            b.page.ptr
        };
        let sh = Sheaf(p.as_ptr().expose_provenance());
        sh.set_size(0);
        sh.set_next(0);
        self.stat_here(SlubStat::SHEAF_ALLOC);
        Some(sh)
    }

    /// Frees an empty sheaf's block.
    pub(super) fn free_sheaf(&self, sh: Sheaf) {
        debug_assert_eq!(sh.size(), 0);
        let p = core::ptr::with_exposed_provenance_mut::<u8>(sh.0);
        if S::PRIVATE_META {
            if let Some(p) = NonNull::new(p.wrapping_sub(self.sheaf_color())) {
                // SAFETY: `new_sheaf`'s private block of this size, empty.
                unsafe { self.source.free_private(p, self.private_sheaf_bytes()) };
                self.stat_here(SlubStat::SHEAF_FREE);
            }
            return;
        }
        if let Some(b) = self.source.block_of(p) {
            b.owner.tag().store(0, Ordering::Relaxed);
            // SAFETY: the block was allocated by `new_sheaf` and is empty.
            unsafe { self.source.free_block(b.head, b.order) };
            self.stat_here(SlubStat::SHEAF_FREE);
        }
    }

    /// `sheaf_flush`: returns a sheaf's objects to their slabs (bulk free).
    pub(super) fn flush_sheaf(&self, sh: Sheaf) {
        let n = sh.size();
        if n == 0 {
            return;
        }
        if n > self.sheaf_capacity {
            self.bad_sheaf_size(sh, n);
        }
        if self.hardened() {
            self.flush_entries::<true>(sh, n)
        } else {
            self.flush_entries::<false>(sh, n)
        }
        sh.set_size(0);
        self.stat_here(SlubStat::SHEAF_FLUSH);
    }

    /// [`flush_sheaf`](Self::flush_sheaf)'s pass over its `n` entries
    /// (`H`: the cache is hardened), from the top: each entry decoded and
    /// checked, its free marker checked (a second copy of an object is
    /// found: the first one's marker is gone, overwritten by its link, or
    /// cleared when it opened a chain), its slab found (once per run of
    /// one slab: an object start of the last slab found needs no lookup)
    /// and the object added to its slab's chain. A bad entry panics
    /// (nothing to hand back).
    ///
    /// The cache's words it needs are read once, before the loop
    /// ([`FpKeys`]).
    #[inline(always)]
    fn flush_entries<const H: bool>(&self, sh: Sheaf, n: usize) {
        let r = self.random.load(CoreOrdering::Relaxed);
        let key = self.entry_key();
        let (slab_ref, slab_mask) = (
            self.slab_ref.load(CoreOrdering::Relaxed),
            self.slab_mask.load(CoreOrdering::Relaxed),
        );
        let lay = self.lay;
        // (From the same copies: `H` known to the compiler in the loop,
        // the offset one value with the layout's.)
        let k = FpKeys {
            offset: lay.offset,
            secret: r,
            hardened: H,
        };
        let mut last = LastSlab::new();
        let mut chains = Chains::new();
        let first = sh.objects();
        let mut at = first.wrapping_add(n);
        while at != first {
            // An entry that starts a run (not an object of the slab
            // `last` holds: the first entry, or the one the run below
            // stopped at): checked against the heap, its slab looked up
            // and its chain opened or taken back.
            at = at.wrapping_sub(1);
            // SAFETY: an entry below the sheaf's size (checked by the
            // caller against its capacity).
            let e = unsafe { at.read() }.addr();
            let o = if H { e ^ key } else { e };
            if H && (o ^ slab_ref) & slab_mask != 0 {
                // SAFETY: `at` is within the sheaf's entries.
                self.bad_sheaf(sh, unsafe { at.offset_from(first) } as usize, o)
            }
            if H {
                let w = k.word(o).load(CoreOrdering::Relaxed);
                if w != r {
                    self.bad_marker(o, w)
                }
            }
            let slab = match NonNull::new(o as *mut u8)
                .ok_or(FreeError::new(o, FreeErrorKind::NotAllocated))
                .and_then(|p| self.find_slab(&mut last, p))
            {
                Ok(s) => s,
                Err(e) => self.bad_flush(e),
            };
            if let Err(e) = self.chain_add(&mut chains, slab, o) {
                self.bad_flush(e)
            }
            let (_, mut head, mut len) = chains.current();
            if H && len == 1 {
                // It opened a chain (its tail, whose word is written when
                // the chain is freed): cleared, so that a second copy of
                // it in this sheaf is found.
                k.word(o).store(0, CoreOrdering::Relaxed);
            }
            // The rest of the run: the entries below that are object
            // starts of the same slab (in it: no heap check, no lookup),
            // linked onto the current chain with everything in locals.
            let (base, objects) = (last.base(), last.objects());
            while at != first {
                // SAFETY: as above.
                let e = unsafe { at.wrapping_sub(1).read() }.addr();
                let o = if H { e ^ key } else { e };
                if lay.object_index(o.wrapping_sub(base), objects).is_none() {
                    break;
                }
                at = at.wrapping_sub(1);
                if H {
                    let w = k.word(o).load(CoreOrdering::Relaxed);
                    if w != r {
                        self.bad_marker(o, w)
                    }
                }
                if o == head {
                    self.bad_flush(FreeError::new(o, FreeErrorKind::DoubleFree))
                }
                k.word(o).store(k.encode(head, o), CoreOrdering::Relaxed);
                head = o;
                len += 1;
            }
            chains.set_current(head, len);
        }
        if let Err(e) = self.chains_free(&chains) {
            self.bad_flush(e)
        }
    }

    /// Reports a sheaf whose flush found a bad entry.
    #[cold]
    #[inline(never)]
    fn bad_flush(&self, e: FreeError) -> ! {
        panic!("{}: corrupted sheaf: {e}", self.name)
    }

    /// Restartable sheaves (user space): moves the top `k` entries of the
    /// detached sheaf `from` onto the detached sheaf `to`, in order (the
    /// most recently freed stay on top). Entries are position independent
    /// (plain, or `obj ^ key`), so they move as stored.
    ///
    /// The kernel swaps whole sheaves at a full main (free) or an empty one
    /// (alloc), which leaves the new main at its edge: a program whose
    /// objects of a class swing around that edge (`slub-threads`'s mixed
    /// sizes) then takes a slow path every few operations. A swap is a few
    /// instructions under the kernel's local lock, but four restartable
    /// sections and two calls here; so the restartable slow paths split
    /// the two sheaves to leave the main half full instead (see
    /// `half_main_after_free` / `half_main_after_alloc`).
    pub(super) fn sheaf_move_top(&self, from: Sheaf, to: Sheaf, k: usize) {
        let (n, m) = (from.size(), to.size());
        if k > n || m + k > self.sheaf_capacity {
            self.bad_sheaf_size(if k > n { from } else { to }, if k > n { n } else { m });
        }
        for i in 0..k {
            to.set(m + i, from.get(n - k + i));
        }
        to.set_size(m + k);
        from.set_size(n - k);
    }

    /// The free's slow path found the main sheaf `full` and will continue
    /// on `room` (the spare with room, or an empty sheaf): tops `room` up
    /// to half a sheaf with `full`'s most recent entries, so that the new
    /// main is not at the edge the program's frees and allocations swing
    /// around. A spare already half full is swapped in as it is (the
    /// kernel's swap).
    pub(super) fn half_main_after_free(&self, full: Sheaf, room: Sheaf) {
        let half = self.sheaf_capacity / 2;
        let (n, m) = (full.size(), room.size());
        if m < half && n == self.sheaf_capacity {
            self.sheaf_move_top(full, room, half - m);
        }
    }

    /// The allocation's slow path found the main sheaf `empty` and will
    /// continue on `spare` (which holds objects): when `spare` is more than
    /// half full, its most recent half sheaf moves to `empty`, which
    /// becomes the main (half full) while `spare` keeps the rest.
    /// `true` when moved (then `empty` is the new main).
    pub(super) fn half_main_after_alloc(&self, empty: Sheaf, spare: Sheaf) -> bool {
        let half = self.sheaf_capacity / 2;
        let n = spare.size();
        if half > 0 && n > half && n <= self.sheaf_capacity && empty.size() == 0 {
            self.sheaf_move_top(spare, empty, half);
            return true;
        }
        false
    }

    /// `refill_sheaf`: fills an empty sheaf by bulk allocation
    /// ([`refill_count`](Self::refill_count) objects); false if the page
    /// allocator ran out.
    pub(super) fn refill_sheaf(&self, sh: Sheaf) -> bool {
        let want = self.refill_count();
        // SAFETY: the sheaf's object area holds `sheaf_capacity >= want`
        // pointers and is ours.
        let out = unsafe { core::slice::from_raw_parts_mut(sh.objects(), want) };
        if self.alloc_bulk_slab(out) == want {
            if self.hardened() {
                // Marked free and encoded in place (the cache's words read
                // once: `FpKeys`), the entries written back only when
                // encoding changes them.
                let (k, key) = (self.fp_keys(), self.entry_key());
                for e in out.iter_mut() {
                    let o = e.addr();
                    k.word(o).store(k.secret, CoreOrdering::Relaxed);
                    if key != 0 {
                        *e = core::ptr::with_exposed_provenance_mut(o ^ key);
                    }
                }
            }
            sh.set_size(want);
            self.stat_here(SlubStat::SHEAF_REFILL);
            true
        } else {
            false
        }
    }

    /// How many objects a sheaf refill takes: the sheaf's capacity, except
    /// while the cache's slabs together hold fewer objects than that (a
    /// young cache): then one slab's worth, so the cache grows a slab per
    /// refill up to a sheaf's worth of objects instead of starting with
    /// them all. The kernel fills the sheaf (`refill_sheaf` asks for
    /// `sheaf_capacity - size`); a process whose caches are all young pays
    /// for that in memory touched: a C program under mm-malloc using a few
    /// objects of each of a dozen classes started with four slabs of each
    /// small class (a 128-object sheaf of 128-byte objects is four pages).
    /// A partial sheaf is a valid sheaf (frees fill it up).
    /// While the slabs hold fewer objects than one slab of the preferred
    /// order, they are of the minimum order ([`young`](Self::young)), and
    /// a refill takes what one of those holds.
    pub(super) fn refill_count(&self) -> usize {
        let cap = self.sheaf_capacity;
        let objects = self.sum_nodes().1;
        let per_slab = usize::from(if self.young(objects) {
            self.lay.min.objects
        } else {
            self.lay.oo.objects
        });
        if per_slab < cap && objects < cap {
            per_slab
        } else {
            cap
        }
    }

    /// Whether a cache whose slabs hold `objects` objects is young: its
    /// minimum order is below the preferred one and its slabs hold fewer
    /// objects than one slab of the preferred order. A young cache's new
    /// slabs are of the minimum order ([`new_slab`](Self::new_slab)), so a
    /// class of which a process uses a few objects costs it a page or two
    /// per slab, not a preferred slab's eight: measured, a `bash` running
    /// a fork loop under mm-malloc held 2 KiB, 4 KiB and 8 KiB objects in
    /// one page then one 32 KiB slab each (every object of a new slab is
    /// written: its free pointer), 112 of its 220 KiB of slab pages, for
    /// 5 to 18 objects of each (issue #18).
    pub(super) fn young(&self, objects: usize) -> bool {
        self.lay.min.order != self.lay.oo.order && objects < usize::from(self.lay.oo.objects)
    }

    /// `barn_replace_empty_sheaf`: a full sheaf for our empty one, which
    /// the barn keeps whatever its empty limit: the number of sheaves does
    /// not change (the kernel's comment).
    pub(super) fn barn_get_full(&self, empty: Sheaf) -> Option<Sheaf> {
        let mut b = self.get_barn();
        if b.full == 0 {
            drop(b);
            self.stat_here(SlubStat::BARN_GET_FAIL);
            return None;
        }
        let full = Sheaf(b.full);
        b.full = full.next();
        b.nr_full -= 1;
        empty.set_next(b.empty);
        b.empty = empty.0;
        b.nr_empty += 1;
        drop(b);
        self.stat_here(SlubStat::BARN_GET);
        Some(full)
    }

    /// An empty sheaf nobody will use: to the barn while it holds fewer
    /// than its limit of empty sheaves (`barn_put_empty_sheaf` under the
    /// `MAX_EMPTY_SHEAVES` check of `rcu_free_sheaf`), else freed.
    pub(super) fn put_empty(&self, sh: Sheaf) {
        let mut b = self.get_barn();
        if b.nr_empty < Barn::MAX_EMPTY {
            sh.set_next(b.empty);
            b.empty = sh.0;
            b.nr_empty += 1;
            return;
        }
        drop(b);
        self.free_sheaf(sh);
    }

    /// `barn_get_empty_sheaf`: an empty sheaf from the barn, if it has one.
    pub(super) fn barn_get_empty(&self) -> Option<Sheaf> {
        let mut b = self.get_barn();
        if b.empty == 0 {
            return None;
        }
        let e = Sheaf(b.empty);
        b.empty = e.next();
        b.nr_empty -= 1;
        Some(e)
    }

    /// `barn_replace_full_sheaf`: gives the barn our full sheaf for an
    /// empty one (from the barn, or new); `Err(full)` when the barn already
    /// holds its limit of full sheaves (or no empty sheaf can be had).
    pub(super) fn barn_put_full(&self, full: Sheaf) -> Result<Sheaf, Sheaf> {
        let mut b = self.get_barn();
        if b.nr_full >= Barn::MAX_FULL {
            drop(b);
            self.stat_here(SlubStat::BARN_PUT_FAIL);
            return Err(full);
        }
        let empty = if b.empty != 0 {
            let e = Sheaf(b.empty);
            b.empty = e.next();
            b.nr_empty -= 1;
            Some(e)
        } else {
            None
        };
        let empty = match empty {
            Some(e) => e,
            None => {
                drop(b);
                let Some(e) = self.new_sheaf() else {
                    self.stat_here(SlubStat::BARN_PUT_FAIL);
                    return Err(full);
                };
                b = self.get_barn();
                if b.nr_full >= Barn::MAX_FULL {
                    drop(b);
                    self.free_sheaf(e);
                    self.stat_here(SlubStat::BARN_PUT_FAIL);
                    return Err(full);
                }
                e
            }
        };
        full.set_next(b.full);
        b.full = full.0;
        b.nr_full += 1;
        drop(b);
        self.stat_here(SlubStat::BARN_PUT);
        Some(empty).ok_or(full)
    }

    #[inline(never)]
    pub(super) fn alloc_from_pcs_slow<'a>(&'a self, mut g: Guard<'a, P, N>) -> Option<NonNull<u8>> {
        loop {
            if g.main != 0 {
                let main = Sheaf(g.main);
                let n = main.size();
                if n > self.sheaf_capacity {
                    drop(g);
                    self.bad_sheaf_size(main, n);
                }
                if n > 0 {
                    let o = match self.sheaf_get(main, n - 1) {
                        Ok(o) => o,
                        Err(o) => {
                            drop(g);
                            self.bad_sheaf(main, n - 1, o)
                        }
                    };
                    main.set_size(n - 1);
                    self.stat_cpu(g.cpu(), SlubStat::ALLOC_PCS);
                    drop(g);
                    self.clear_fp(o);
                    return Some(Self::obj_ptr(o));
                }
                if g.spare != 0 && Sheaf(g.spare).size() > 0 {
                    let c: &mut CpuLocked = &mut g;
                    core::mem::swap(&mut c.main, &mut c.spare);
                    self.stat_cpu(g.cpu(), SlubStat::SHEAF_SWAP);
                    continue;
                }
            }
            // Detach the (empty or missing) main sheaf and get a full one
            // outside the lock.
            let empty = core::mem::take(&mut g.main);
            drop(g);
            let empty = if empty != 0 {
                Sheaf(empty)
            } else {
                self.new_sheaf()?
            };
            let full = match self.barn_get_full(empty) {
                Some(f) => f,
                None => {
                    if !self.refill_sheaf(empty) {
                        self.free_sheaf(empty);
                        return None;
                    }
                    empty
                }
            };
            // Install it; another context may have installed a main sheaf
            // meanwhile (or we moved): then give ours to the barn/slabs.
            match self.try_lock_cpu() {
                Some(g2) => {
                    g = g2;
                    if g.main == 0 {
                        g.main = full.0;
                    } else {
                        drop(g);
                        self.retire_sheaf(full);
                        g = self.try_lock_cpu()?;
                    }
                }
                None => {
                    self.retire_sheaf(full);
                    return None;
                }
            }
        }
    }

    /// A detached sheaf nobody will use: to the barn if it is full and the
    /// barn has room, else its objects back to slabs and the sheaf freed.
    pub(super) fn retire_sheaf(&self, sh: Sheaf) {
        if sh.size() == self.sheaf_capacity {
            if let Ok(e) = self.barn_put_full(sh) {
                self.free_sheaf(e);
                return;
            }
        }
        self.flush_sheaf(sh);
        self.free_sheaf(sh);
    }

    /// Free into the per-CPU sheaves beyond the inline push: a full main
    /// is swapped with a spare that has room (with no spare, one is taken
    /// from the barn's empty sheaves, or allocated), traded at the barn for
    /// an empty sheaf, or flushed to slabs by bulk free. `Ok(false)` sends the
    /// caller to the slab path (a failed trylock; no memory for a sheaf).
    #[inline(never)]
    pub(super) fn free_to_pcs_slow<'a>(
        &'a self,
        mut g: Guard<'a, P, N>,
        obj: usize,
    ) -> Result<bool, FreeError> {
        let cap = self.sheaf_capacity;
        loop {
            if g.main != 0 {
                let main = Sheaf(g.main);
                let n = main.size();
                if n > cap {
                    drop(g);
                    self.bad_sheaf_size(main, n);
                }
                if n < cap {
                    if !self.hardened() && n > 0 && main.get(n - 1) == obj {
                        return Err(FreeError::new(obj, FreeErrorKind::DoubleFree));
                    }
                    self.mark_free(obj);
                    self.sheaf_set(main, n, obj);
                    main.set_size(n + 1);
                    self.stat_cpu(g.cpu(), SlubStat::FREE_PCS);
                    return Ok(true);
                }
                // __pcs_replace_full_main: swap with a spare that has room
                // (not only an empty one); with no spare, an empty sheaf
                // from the barn first, then a new one.
                if g.spare == 0 || Sheaf(g.spare).size() < cap {
                    if g.spare == 0 {
                        drop(g);
                        let sp = self.barn_get_empty().or_else(|| self.new_sheaf());
                        g = match self.try_lock_cpu() {
                            Some(g) => g,
                            None => {
                                if let Some(sp) = sp {
                                    self.put_empty(sp);
                                }
                                return Ok(false);
                            }
                        };
                        match sp {
                            Some(sp) if g.spare == 0 => g.spare = sp.0,
                            Some(sp) => {
                                drop(g);
                                self.put_empty(sp);
                                g = match self.try_lock_cpu() {
                                    Some(g) => g,
                                    None => return Ok(false),
                                };
                            }
                            None => return Ok(false),
                        }
                        continue;
                    }
                    let c: &mut CpuLocked = &mut g;
                    core::mem::swap(&mut c.main, &mut c.spare);
                    self.stat_cpu(g.cpu(), SlubStat::SHEAF_SWAP);
                    continue;
                }
            }
            // Detach the full (or missing) main and get an empty one.
            let full = core::mem::take(&mut g.main);
            drop(g);
            let empty = if full == 0 {
                match self.new_sheaf() {
                    Some(e) => e,
                    None => return Ok(false),
                }
            } else {
                match self.barn_put_full(Sheaf(full)) {
                    Ok(e) => e,
                    Err(f) => {
                        self.flush_sheaf(f);
                        f
                    }
                }
            };
            match self.try_lock_cpu() {
                Some(g2) => {
                    g = g2;
                    if g.main == 0 {
                        g.main = empty.0;
                    } else {
                        drop(g);
                        self.put_empty(empty);
                        g = match self.try_lock_cpu() {
                            Some(g) => g,
                            None => return Ok(false),
                        };
                    }
                }
                None => {
                    self.put_empty(empty);
                    return Ok(false);
                }
            }
        }
    }

    /// Detaches and returns a CPU's sheaves (under its lock).
    pub(super) fn take_sheaves(g: &mut Guard<'_, P, N>) -> [usize; 2] {
        [core::mem::take(&mut g.main), core::mem::take(&mut g.spare)]
    }

    /// Flushes detached sheaves to slabs and frees them.
    pub(super) fn drop_sheaves(&self, sheaves: [usize; 2]) {
        for sh in sheaves {
            if sh != 0 {
                self.flush_sheaf(Sheaf(sh));
                self.free_sheaf(Sheaf(sh));
            }
        }
    }

    /// Empties the barn: full sheaves' objects back to slabs, every sheaf
    /// freed (part of shrink).
    pub(super) fn flush_barn(&self) {
        for nid in 0..self.nr_nodes() {
            self.flush_node_barn(nid);
        }
    }

    /// Empties node `nid`'s barn.
    fn flush_node_barn(&self, nid: usize) {
        let (mut full, mut empty) = {
            let mut b = self.lock_barn(nid);
            let r = (b.full, b.empty);
            *b = Barn::new();
            r
        };
        while full != 0 {
            let sh = Sheaf(full);
            full = sh.next();
            self.flush_sheaf(sh);
            self.free_sheaf(sh);
        }
        while empty != 0 {
            let sh = Sheaf(empty);
            empty = sh.next();
            self.free_sheaf(sh);
        }
    }

    /// Full and empty sheaves in the barns of every node (a racy
    /// snapshot; [`node_barn_sheaves`](Self::node_barn_sheaves) per node).
    pub fn barn_sheaves(&self) -> (usize, usize) {
        (0..self.nr_nodes())
            .map(|nid| self.node_barn_sheaves(nid))
            .fold((0, 0), |(f, e), (a, b)| (f + a, e + b))
    }
}
