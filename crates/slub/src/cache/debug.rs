//! `slub_debug`: red zones, poisoning, owner tracking and consistency
//! checks; debug caches allocate and free one object at a time under the
//! list lock (`alloc_debug`, `free_debug`), reporting a corruption with
//! the cache, the object, what was expected and found, and the recorded
//! owners.

use core::fmt;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize as CoreAtomicUsize, Ordering as CoreOrdering};

use buddy::AllocFlags;
use local_lock::Platform;

use crate::error::FreeError;
use crate::error::FreeErrorKind;
use crate::layout::SlabFlags;
use crate::slab::{Counters, Slab, SlabState};
use crate::source::SlabSource;
use crate::stats::SlubStat;

use super::node::NUMA_NO_NODE;
use super::KmemCache;

/// An owner record for reports.
struct Track(Option<(&'static core::panic::Location<'static>, usize, usize)>);

impl fmt::Display for Track {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((loc, cpu, when)) => write!(f, "at {loc} on CPU {cpu}, t={when}"),
            None => write!(f, "(not recorded)"),
        }
    }
}

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// The object of a slot (`fixup_red_left`).
    #[inline(always)]
    fn slot_to_obj(&self, slot: usize) -> usize {
        slot + self.lay.red_left_pad
    }

    /// Byte `i` of a slot, as an atomic cell (objects may be shared with a
    /// buggy user; these checks read and write bytewise).
    #[inline(always)]
    fn byte(slot: usize, i: usize) -> &'static core::sync::atomic::AtomicU8 {
        let p = core::ptr::with_exposed_provenance_mut::<u8>(slot + i);
        // SAFETY: inside the slot, which lies in slab memory that stays
        // mapped.
        unsafe { core::sync::atomic::AtomicU8::from_ptr(p) }
    }

    fn fill(slot: usize, from: usize, to: usize, v: u8) {
        for i in from..to {
            Self::byte(slot, i).store(v, CoreOrdering::Relaxed);
        }
    }

    /// The first byte of `slot[from..to]` that is not `v`: (offset, found).
    fn find_not(slot: usize, from: usize, to: usize, v: u8) -> Option<(usize, u8)> {
        (from..to).find_map(|i| {
            let b = Self::byte(slot, i).load(CoreOrdering::Relaxed);
            (b != v).then_some((i, b))
        })
    }

    /// The byte ranges of a slot: (left red zone end, object end, right red
    /// zone end, tracks start, tracks end).
    fn debug_ranges(&self) -> (usize, usize, usize, usize, usize) {
        let pad = self.lay.red_left_pad;
        let tracks = if self.flags.contains(SlabFlags::STORE_USER) {
            2 * crate::layout::TRACK_WORDS * core::mem::size_of::<usize>()
        } else {
            0
        };
        (
            pad,
            pad + self.lay.object_size,
            pad + self.lay.inuse,
            pad + self.lay.track_offset,
            pad + self.lay.track_offset + tracks,
        )
    }

    /// `init_object`: red zones (0xbb free / 0xcc allocated), the poisoned
    /// body of a free object (0x6b, last byte 0xa5; not with a constructor,
    /// whose objects stay constructed: the kernel's `__OBJECT_POISON` is
    /// off for them), padding (0x5a).
    fn init_object(&self, slot: usize, active: bool) {
        let (l, o, r, _ts, te) = self.debug_ranges();
        if self.flags.contains(SlabFlags::RED_ZONE) {
            let v = if active { 0xcc } else { 0xbb };
            Self::fill(slot, 0, l, v);
            Self::fill(slot, o, r, v);
        }
        if self.flags.contains(SlabFlags::POISON) {
            if !active && o > l && self.ctor.is_none() {
                Self::fill(slot, l, o - 1, 0x6b);
                Self::byte(slot, o - 1).store(0xa5, CoreOrdering::Relaxed);
            }
            Self::fill(
                slot,
                te.max(self.lay.offset + core::mem::size_of::<usize>()),
                self.lay.size,
                0x5a,
            );
        }
    }

    /// `check_object`: verifies what `init_object` wrote; a mismatch is a
    /// corruption report (and a panic).
    fn check_debug_object(&self, slot: usize, active: bool, what: &str) {
        let (l, o, r, _ts, te) = self.debug_ranges();
        if self.flags.contains(SlabFlags::RED_ZONE) {
            let v = if active { 0xcc } else { 0xbb };
            if let Some((i, b)) =
                Self::find_not(slot, 0, l, v).or_else(|| Self::find_not(slot, o, r, v))
            {
                self.corruption(slot, what, "red zone overwritten", i, v, b);
            }
        }
        if self.flags.contains(SlabFlags::POISON) {
            if !active && o > l && self.ctor.is_none() {
                if let Some((i, b)) = Self::find_not(slot, l, o - 1, 0x6b) {
                    self.corruption(
                        slot,
                        what,
                        "poison overwritten (use after free)",
                        i,
                        0x6b,
                        b,
                    );
                }
                let b = Self::byte(slot, o - 1).load(CoreOrdering::Relaxed);
                if b != 0xa5 {
                    self.corruption(slot, what, "poison end marker overwritten", o - 1, 0xa5, b);
                }
            }
            let pstart = te.max(self.lay.offset + core::mem::size_of::<usize>());
            if let Some((i, b)) = Self::find_not(slot, pstart, self.lay.size, 0x5a) {
                self.corruption(slot, what, "object padding overwritten", i, 0x5a, b);
            }
        }
    }

    /// `set_track`: records the owner (call site, CPU, time) of an
    /// allocation (`free = false`) or a free.
    fn set_track(&self, slot: usize, free: bool, loc: &'static core::panic::Location<'static>) {
        if !self.flags.contains(SlabFlags::STORE_USER) {
            return;
        }
        static TICK: CoreAtomicUsize = CoreAtomicUsize::new(1);
        let (_, _, _, ts, _) = self.debug_ranges();
        let w = core::mem::size_of::<usize>();
        let base = slot
            + ts
            + if free {
                crate::layout::TRACK_WORDS * w
            } else {
                0
            };
        let vals = [
            (loc as *const core::panic::Location<'static>).expose_provenance(),
            self.cpu.platform().current_cpu(),
            TICK.fetch_add(1, CoreOrdering::Relaxed),
        ];
        for (k, v) in vals.into_iter().enumerate() {
            let p = core::ptr::with_exposed_provenance_mut::<usize>(base + k * w);
            // SAFETY: the track words of a slot we hold, word aligned.
            unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }.store(v, CoreOrdering::Relaxed);
        }
    }

    /// One owner record, printable.
    fn track(&self, slot: usize, free: bool) -> Track {
        if !self.flags.contains(SlabFlags::STORE_USER) {
            return Track(None);
        }
        let (_, _, _, ts, _) = self.debug_ranges();
        let w = core::mem::size_of::<usize>();
        let base = slot
            + ts
            + if free {
                crate::layout::TRACK_WORDS * w
            } else {
                0
            };
        let get = |k: usize| {
            let p = core::ptr::with_exposed_provenance_mut::<usize>(base + k * w);
            // SAFETY: as in `set_track`.
            unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }.load(CoreOrdering::Relaxed)
        };
        let loc = get(0);
        if loc == 0 {
            return Track(None);
        }
        // SAFETY: only `set_track` writes a nonzero value here: the address
        // of a `'static` Location.
        let loc: &'static core::panic::Location<'static> =
            unsafe { &*core::ptr::with_exposed_provenance(loc) };
        Track(Some((loc, get(1), get(2))))
    }

    /// Reports a corruption (the cache, the object, what was expected and
    /// found, the owners) and panics.
    #[cold]
    fn corruption(
        &self,
        slot: usize,
        when: &str,
        what: &str,
        off: usize,
        expected: u8,
        found: u8,
    ) -> ! {
        let obj = self.slot_to_obj(slot);
        panic!(
            "slub {}: {what} in object {obj:#x} (slot {slot:#x}, byte {off} of the slot; {when}): \
             expected {expected:#04x}, found {found:#04x}; allocated {}; freed {}",
            self.name,
            self.track(slot, false),
            self.track(slot, true)
        )
    }

    /// A new slab for a debug cache: unfrozen, every object free and
    /// initialised, on no list yet.
    fn new_debug_slab(&self, gfp: AllocFlags, node: usize) -> Option<Slab<'static>> {
        let (s, head) = self.new_slab(gfp, node)?;
        let objects = s.state().counters.objects;
        let base = s.base().addr();
        for i in 0..objects as usize {
            self.init_object(base + i * self.lay.size, false);
        }
        s.store_state(SlabState {
            freelist: head,
            counters: Counters {
                inuse: 0,
                objects,
                frozen: false,
            },
        });
        Some(s)
    }

    /// Allocation for debug caches (`alloc_debug_processing`): under the
    /// list lock, from the first partial slab (or a new one), checking the
    /// object is intact before handing it out.
    pub(super) fn alloc_debug(
        &self,
        loc: &'static core::panic::Location<'static>,
        gfp: AllocFlags,
    ) -> Option<NonNull<u8>> {
        self.alloc_debug_node(loc, gfp, NUMA_NO_NODE)
    }

    /// [`alloc_debug`](Self::alloc_debug) from node `node`'s partial list
    /// (the local node's for [`NUMA_NO_NODE`]), else a new slab of that
    /// node (as the page allocator falls back), listed on its own node.
    pub(super) fn alloc_debug_node(
        &self,
        loc: &'static core::panic::Location<'static>,
        gfp: AllocFlags,
        node: usize,
    ) -> Option<NonNull<u8>> {
        self.mode();
        self.stat_here(SlubStat::ALLOC_SLOWPATH);
        let mut nid = if node == NUMA_NO_NODE {
            self.local_node()
        } else {
            node
        };
        let mut n = self.lock_node(nid);
        let s = if n.head != 0 {
            // SAFETY: list members are held slabs.
            unsafe { Slab::from_addr(n.head) }
        } else {
            drop(n);
            let s = self.new_debug_slab(gfp, node)?;
            nid = self.slab_nid(s);
            n = self.lock_node(nid);
            n.add(s, false);
            s
        };
        let st = s.state();
        let slot = st.freelist;
        let base = s.base().addr();
        // Always (not only with CONSISTENCY_CHECKS): the checks below read
        // the slot.
        if self
            .obj_index(slot.wrapping_sub(base), st.counters.objects as usize)
            .is_none()
        {
            drop(n);
            self.bad_freelist(
                base,
                slot,
                slot,
                "heads the slab's freelist but is not an object of it",
            );
        }
        self.check_debug_object(slot, false, "allocation");
        let next = self.get_fp(slot);
        s.store_state(SlabState {
            freelist: next,
            counters: Counters {
                inuse: st.counters.inuse + 1,
                ..st.counters
            },
        });
        if next == 0 {
            n.remove(s);
            self.get_node(nid).full.lock().add(s, true);
        }
        self.set_nr_partial(nid, &n);
        drop(n);
        self.init_object(slot, true);
        self.set_track(slot, false, loc);
        Some(Self::obj_ptr(self.slot_to_obj(slot)))
    }

    /// Free for debug caches (`free_debug_processing`): the object must be
    /// an allocated object of this cache (with `CONSISTENCY_CHECKS`, not on
    /// its slab's freelist: a full walk) whose red zones are intact; it is
    /// poisoned and its owner recorded. Corruption panics with a report.
    pub(super) fn free_debug(
        &self,
        ptr: NonNull<u8>,
        loc: &'static core::panic::Location<'static>,
    ) -> Result<(), FreeError> {
        self.mode();
        let a = ptr.as_ptr().addr();
        let pad = self.lay.red_left_pad;
        if a < pad {
            return Err(FreeError::new(a, FreeErrorKind::NotAllocated));
        }
        let slot_ptr = ptr.as_ptr().wrapping_sub(pad);
        let (s, slot) = self.slab_of(
            NonNull::new(slot_ptr).ok_or(FreeError::new(a, FreeErrorKind::NotAllocated))?,
        )?;
        self.stat_here(SlubStat::FREE_SLOWPATH);
        let nid = self.slab_nid(s);
        let mut n = self.lock_node(nid);
        let st = s.state();
        if self.flags.contains(SlabFlags::CONSISTENCY_CHECKS) {
            let mut p = st.freelist;
            let mut k = 0;
            let base = s.base().addr();
            let objects = st.counters.objects as usize;
            while p != 0 && k <= objects {
                if self.obj_index(p.wrapping_sub(base), objects).is_none() {
                    drop(n);
                    self.bad_freelist(base, slot, p, "is on a freelist that leaves its slab");
                }
                if p == slot {
                    drop(n);
                    panic!(
                        "slub {}: double free of object {:#x}: it is already on its slab's freelist; allocated {}; freed {}",
                        self.name,
                        a,
                        self.track(slot, false),
                        self.track(slot, true)
                    );
                }
                p = self.get_fp(p);
                k += 1;
            }
        }
        self.check_debug_object(slot, true, "free");
        self.set_track(slot, true, loc);
        self.init_object(slot, false);
        self.set_fp(slot, st.freelist);
        let inuse = st.counters.inuse - 1;
        s.store_state(SlabState {
            freelist: slot,
            counters: Counters {
                inuse,
                ..st.counters
            },
        });
        if st.freelist == 0 {
            self.get_node(nid).full.lock().remove(s);
            n.add(s, true);
        }
        let discard = inuse == 0 && n.nr_partial > self.lay.min_partial;
        if discard {
            n.remove(s);
        }
        self.set_nr_partial(nid, &n);
        drop(n);
        if discard {
            self.discard_slab(s);
            self.stat_here(SlubStat::FREE_SLAB);
        }
        Ok(())
    }

    /// `validate_slab` of every slab of a debug cache: each object's state
    /// (free objects poisoned and with inactive red zones, allocated ones
    /// with active red zones) and the free count; panics on corruption.
    pub(super) fn validate_debug(&self) {
        for nid in 0..self.nr_nodes() {
            self.validate_debug_node(nid);
        }
    }

    /// [`validate_debug`](Self::validate_debug) of node `nid`'s slabs.
    fn validate_debug_node(&self, nid: usize) {
        let n = self.lock_node(nid);
        let full = self.get_node(nid).full.lock();
        for head in [n.head, full.head] {
            let mut cur = head;
            while cur != 0 {
                // SAFETY: list members are held slabs.
                let s = unsafe { Slab::from_addr(cur) };
                let st = s.state();
                let base = s.base().addr();
                let mut free = [0u64; 512];
                let mut p = st.freelist;
                let mut k = 0;
                let objects = st.counters.objects as usize;
                let mut prev = 0;
                while p != 0 {
                    if self.obj_index(p.wrapping_sub(base), objects).is_none() {
                        self.bad_freelist(base, prev, p, "points outside its slab");
                    }
                    prev = p;
                    let i = (p - base) / self.lay.size;
                    if i < 32768 {
                        free[(i / 64) % 512] |= 1 << (i % 64);
                    }
                    self.check_debug_object(p, false, "validate (free object)");
                    p = self.get_fp(p);
                    k += 1;
                    assert!(
                        k <= st.counters.objects as usize,
                        "{}: freelist cycle",
                        self.name
                    );
                }
                assert_eq!(
                    k,
                    (st.counters.objects - st.counters.inuse) as usize,
                    "{}: free count of slab {base:#x}",
                    self.name
                );
                for i in 0..st.counters.objects as usize {
                    if free[(i / 64) % 512] & (1 << (i % 64)) == 0 {
                        self.check_debug_object(
                            base + i * self.lay.size,
                            true,
                            "validate (allocated object)",
                        );
                    }
                }
                cur = s.next();
            }
        }
    }

    /// Debug caches: whether `slot` is on slab `s`'s freelist (a bounded
    /// walk under the list lock).
    pub(super) fn debug_on_freelist(&self, s: Slab<'_>, slot: usize) -> bool {
        let n = self.lock_node(self.slab_nid(s));
        let st = s.state();
        let base = s.base().addr();
        let objects = st.counters.objects as usize;
        let mut p = st.freelist;
        let mut k = 0;
        while p != 0 && k <= objects {
            if p == slot {
                return true;
            }
            if self.obj_index(p.wrapping_sub(base), objects).is_none() {
                drop(n);
                self.bad_freelist(base, slot, p, "is on a freelist that leaves its slab");
            }
            p = self.get_fp(p);
            k += 1;
        }
        false
    }
}
