//! The slab layer (`___slab_alloc`, `__slab_free` and what they use): the
//! CPU freelist and CPU slab under the local lock, the CPU and node
//! partial lists, new slabs from the page allocator and their discard,
//! deactivation, object lookup and validation (`virt_to_slab`), and
//! `do_slab_free`, the free of a detached chain onto the CPU freelist or
//! its slab. Nothing here calls up into the sheaves, bulk or fast paths.

use core::ptr::NonNull;
use core::sync::atomic::Ordering as CoreOrdering;

use buddy::{AllocFlags, Order};
use local_lock::sync::atomic::Ordering;
use local_lock::sync::DWord;
use local_lock::{this_cpu_cmpxchg_double, Platform};

use crate::error::FreeError;
use crate::error::FreeErrorKind;
use crate::slab::{Counters, Slab, SlabState, TAG_KIND, TAG_SLAB};
use crate::source::SlabSource;
use crate::stats::SlubStat;

use super::node::{NID_SHIFT, NUMA_NO_NODE};
use super::{Guard, KmemCache, Mode, NodeGuard};

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// The CPU freelist (either mode), under the local lock.
    #[inline(always)]
    pub(super) fn c_freelist(&self, g: &Guard<'_, P, N>) -> usize {
        if self.mode() == Mode::Lockless {
            self.fast_of(g.cpu()).fl_tid.load(Ordering::Acquire).lo
        } else {
            g.freelist
        }
    }

    /// Sets the CPU freelist and advances the tid, under the local lock of
    /// the CPU we run on (no fast path of this CPU can run meanwhile).
    #[inline(always)]
    pub(super) fn c_set_freelist(&self, g: &mut Guard<'_, P, N>, fl: usize) {
        let cpu = g.cpu();
        if self.mode() == Mode::Lockless {
            let c = self.fast_of(cpu);
            let d = c.fl_tid.load(Ordering::Relaxed);
            c.fl_tid
                .store(DWord::new(fl, Self::next_tid(d.hi, cpu)), Ordering::Release);
        } else {
            g.freelist = fl;
            g.tid = Self::next_tid(g.tid, cpu);
        }
    }

    /// Detaches the CPU freelist, advancing the tid. Safe against the
    /// CPU's own lockless fast paths running concurrently (a remote flush):
    /// a compare-exchange loop.
    pub(super) fn c_take_freelist(&self, g: &mut Guard<'_, P, N>) -> usize {
        let cpu = g.cpu();
        if self.mode() == Mode::Lockless {
            let c = self.fast_of(cpu);
            let mut d = c.fl_tid.load(Ordering::Acquire);
            loop {
                match c.fl_tid.compare_exchange(
                    d,
                    DWord::new(0, Self::next_tid(d.hi, cpu)),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return d.lo,
                    Err(now) => d = now,
                }
            }
        } else {
            let fl = g.freelist;
            g.freelist = 0;
            g.tid = Self::next_tid(g.tid, cpu);
            fl
        }
    }

    /// `load_freelist`: the CPU freelist becomes the rest of `fl`; returns
    /// its first object.
    #[inline(always)]
    pub(super) fn load_freelist(&self, g: &mut Guard<'_, P, N>, fl: usize) -> NonNull<u8> {
        let next = self.get_fp(fl);
        if self.hardened() {
            // `fl` heads the CPU slab's freelist (installed just before).
            let c = self.fast_of(g.cpu());
            let base = c.slab_base.load(CoreOrdering::Relaxed);
            let objects = c.slab_objects.load(CoreOrdering::Relaxed);
            if self.obj_index(fl.wrapping_sub(base), objects).is_none() {
                self.bad_freelist(base, fl, fl, "is not an object of the CPU slab");
            }
            if !self.fp_ok(next, base, objects) {
                self.bad_freelist(base, fl, next, "points outside its slab");
            }
            self.clear_fp(fl);
        }
        self.c_set_freelist(g, next);
        Self::obj_ptr(fl)
    }

    /// `___slab_alloc` with no gfp flags.
    #[inline(always)]
    pub(super) fn slab_alloc_slow<'a>(&'a self, g: Guard<'a, P, N>) -> Option<NonNull<u8>> {
        self.slab_alloc_slow_gfp(g, AllocFlags::NONE)
    }

    /// `___slab_alloc` of any node.
    #[inline(always)]
    pub(super) fn slab_alloc_slow_gfp<'a>(
        &'a self,
        g: Guard<'a, P, N>,
        gfp: AllocFlags,
    ) -> Option<NonNull<u8>> {
        self.slab_alloc_slow_node(g, gfp, NUMA_NO_NODE)
    }

    /// `___slab_alloc`: refill from the CPU slab's freelist, the CPU partial
    /// slabs, the node partial list, or a new slab (allocated with `gfp`).
    /// For a `node` (not [`NUMA_NO_NODE`]) a CPU slab or CPU partial slab
    /// of another node is given back first (`node_match`), and the partial
    /// list and a new slab are first tried on that node only, without
    /// reclaim (`try_thisnode`), then as `gfp` says.
    #[inline(always)]
    pub(super) fn slab_alloc_slow_node<'a>(
        &'a self,
        g: Guard<'a, P, N>,
        gfp: AllocFlags,
        node: usize,
    ) -> Option<NonNull<u8>> {
        let mut one = [core::ptr::null_mut()];
        if self.slab_alloc_slow_into(g, gfp, node, &mut one, true) == 0 {
            return None;
        }
        NonNull::new(one[0])
    }

    /// [`slab_alloc_slow_node`](Self::slab_alloc_slow_node) for up to
    /// `out.len()` objects (at least one; `out` not empty; `clear`: as
    /// [`link_objects`](Self::link_objects)'s): one object of
    /// the CPU slab, a CPU partial or node partial slab, or the first
    /// `out.len()` objects of a new slab taken without their free pointers
    /// ([`new_slab_into`](Self::new_slab_into): a sheaf refill takes a new
    /// slab's objects by address). Returns how many it wrote to `out` (0:
    /// none, allocation failed).
    #[inline(never)]
    pub(super) fn slab_alloc_slow_into<'a>(
        &'a self,
        mut g: Guard<'a, P, N>,
        gfp: AllocFlags,
        node: usize,
        out: &mut [*mut u8],
        clear: bool,
    ) -> usize {
        debug_assert!(!out.is_empty());
        self.stat_cpu(g.cpu(), SlubStat::ALLOC_SLOWPATH);
        let mut try_thisnode = true;
        loop {
            let cpu = g.cpu();
            let c = self.fast_of(cpu);
            let slab = c.slab.load(Ordering::Relaxed);
            // SAFETY: the CPU slab is held (frozen) by this CPU.
            if slab != 0 && !self.node_match(unsafe { Slab::from_addr(slab) }, node) {
                // deactivate_slab: the CPU slab is of another node.
                self.stat_cpu(cpu, SlubStat::ALLOC_NODE_MISMATCH);
                self.set_cpu_slab(c, 0);
                let fl = self.c_take_freelist(&mut g);
                drop(g);
                // SAFETY: we detached it from the CPU; it is frozen for us.
                self.deactivate_slab(unsafe { Slab::from_addr(slab) }, fl);
                g = self.lock_cpu();
                continue;
            }
            if slab != 0 {
                let fl = self.c_freelist(&g);
                if fl != 0 {
                    out[0] = self.load_freelist(&mut g, fl).as_ptr();
                    return 1;
                }
                // SAFETY: the CPU slab is held (frozen) by this CPU.
                let s = unsafe { Slab::from_addr(slab) };
                let fl = self.get_freelist(s);
                if fl != 0 {
                    self.stat_cpu(cpu, SlubStat::ALLOC_REFILL);
                    out[0] = self.load_freelist(&mut g, fl).as_ptr();
                    return 1;
                }
                // Full: it leaves the CPU (unfrozen, on no list).
                self.set_cpu_slab(c, 0);
                self.c_set_freelist(&mut g, 0);
                self.stat_cpu(cpu, SlubStat::DEACTIVATE_BYPASS);
            }
            // new_slab: the CPU partial list first.
            if g.partial != 0 {
                // SAFETY: chain members are held (frozen) slabs.
                let s = unsafe { Slab::from_addr(g.partial) };
                g.partial = s.next();
                g.partial_slabs -= 1;
                c.partial_slabs
                    .store(g.partial_slabs, CoreOrdering::Relaxed);
                s.set_next(0);
                if !self.node_match(s, node) {
                    // `__put_partials` of the one slab: to its node.
                    drop(g);
                    self.unfreeze_partials(s.addr());
                    g = self.lock_cpu();
                    continue;
                }
                self.set_cpu_slab(c, s.addr());
                self.stat_cpu(cpu, SlubStat::CPU_PARTIAL_ALLOC);
                continue;
            }
            // new_objects: outside the local lock (list_lock ranks above
            // it; the page allocator may take long). A node without
            // THISNODE: first that node only, without reclaim or a report,
            // the request's other flags dropped (the kernel's `pc.flags =
            // GFP_NOWAIT | __GFP_THISNODE`; its zone limit kept, which the
            // kernel's caches add back as `s->allocflags`), then as asked.
            drop(g);
            let thisnode = node != NUMA_NO_NODE && !gfp.contains(AllocFlags::THISNODE);
            let pc = if thisnode && try_thisnode {
                let nowait = AllocFlags::THISNODE | AllocFlags::NONBLOCK | AllocFlags::NOWARN;
                match gfp.max_zone() {
                    Some(z) => nowait.zone_max(z),
                    None => nowait,
                }
            } else {
                gfp
            };
            let got = match self.get_partial(node, pc) {
                Some((s, fl)) => Some((s, fl, 0)),
                None => self.new_slab_into(pc, node, out, clear),
            };
            let (slab, fl, taken) = match got {
                Some(x) => x,
                None if thisnode && try_thisnode => {
                    try_thisnode = false;
                    g = self.lock_cpu();
                    continue;
                }
                None => return 0,
            };
            g = self.lock_cpu();
            // retry_load_slab: another context may have installed a slab.
            loop {
                let c = self.fast_of(g.cpu());
                let old = c.slab.load(Ordering::Relaxed);
                if old == 0 {
                    break;
                }
                self.set_cpu_slab(c, 0);
                let ofl = self.c_take_freelist(&mut g);
                drop(g);
                // SAFETY: we detached it from the CPU; it is frozen for us.
                self.deactivate_slab(unsafe { Slab::from_addr(old) }, ofl);
                self.stat_here(SlubStat::CPUSLAB_FLUSH);
                g = self.lock_cpu();
            }
            self.set_cpu_slab(self.fast_of(g.cpu()), slab.addr());
            if taken != 0 {
                // The new slab's first objects were taken by address; the
                // rest (`fl`, maybe none) is the CPU freelist.
                self.c_set_freelist(&mut g, fl);
                return taken;
            }
            out[0] = self.load_freelist(&mut g, fl).as_ptr();
            return 1;
        }
    }

    /// `get_freelist`: takes the CPU slab's whole freelist; the slab stays
    /// frozen if there was one, else it is full and unfrozen.
    fn get_freelist(&self, s: Slab<'_>) -> usize {
        let mut old = s.state();
        loop {
            let mut new = old;
            new.counters.inuse = old.counters.objects;
            new.counters.frozen = old.freelist != 0;
            new.freelist = 0;
            match s.cas(old, new) {
                Ok(()) => return old.freelist,
                Err(now) => {
                    self.stat_here(SlubStat::CMPXCHG_DOUBLE_FAIL);
                    old = now
                }
            }
        }
    }

    /// `acquire_slab`: freezes a node partial slab and takes it off the
    /// list; for the CPU slab (`take`) also takes its freelist.
    pub(super) fn acquire_slab(&self, n: &mut NodeGuard<'_, P>, s: Slab<'_>, take: bool) -> usize {
        let mut old = s.state();
        loop {
            debug_assert!(!old.counters.frozen);
            let mut new = old;
            if take {
                new.counters.inuse = old.counters.objects;
                new.freelist = 0;
            }
            new.counters.frozen = true;
            match s.cas(old, new) {
                Ok(()) => break,
                Err(now) => {
                    self.stat_here(SlubStat::CMPXCHG_DOUBLE_FAIL);
                    old = now
                }
            }
        }
        n.remove(s);
        old.freelist
    }

    /// `allocate_slab`: at the preferred order, else at the minimum order
    /// (`ORDER_FALLBACK`); the objects are linked in address order and the
    /// slab is returned frozen with its freelist taken. As the kernel, the
    /// preferred order is a light attempt (`gfp | NOWARN | NORETRY`, not
    /// `NOFAIL`; no reclaim and no reserves when the request could block:
    /// `NONBLOCK | NOMEMALLOC`), the minimum order gets `gfp` as given.
    /// The block comes from `node` ([`alloc_slab_block`](Self::alloc_slab_block));
    /// the slab records the node it got.
    ///
    /// A young cache's slabs are of the minimum order (a divergence: the
    /// kernel starts at the preferred one; see [`young`](Self::young)): a
    /// process that uses a few objects of a class of large objects pays a
    /// page or two, not eight (1 KiB objects: 4 in an order-0 slab instead
    /// of 32 in an order-3 one).
    pub(super) fn new_slab(&self, gfp: AllocFlags, node: usize) -> Option<(Slab<'static>, usize)> {
        self.new_slab_into(gfp, node, &mut [], true)
            .map(|(s, head, _)| (s, head))
    }

    /// [`new_slab`](Self::new_slab) whose first objects (up to
    /// `take.len()`) are handed out into `take` rather than linked
    /// ([`link_objects`](Self::link_objects)): returns the slab (frozen,
    /// every object counted in use), the first linked object (0 if all
    /// were taken) and the number taken. `clear`: as
    /// [`link_objects`](Self::link_objects)'s.
    pub(super) fn new_slab_into(
        &self,
        gfp: AllocFlags,
        node: usize,
        take: &mut [*mut u8],
        clear: bool,
    ) -> Option<(Slab<'static>, usize, usize)> {
        let oo = if self.young(self.sum_nodes().1) {
            self.lay.min
        } else {
            self.lay.oo
        };
        let gfp = gfp.difference(AllocFlags::ZEROED) | AllocFlags::COMP;
        let mut objects = oo.objects as usize;
        let mut page = if self.lay.min.order == oo.order {
            self.alloc_slab_block(Order::new(oo.order)?, gfp, node)
        } else {
            let mut light =
                (gfp | AllocFlags::NOWARN | AllocFlags::NORETRY).difference(AllocFlags::NOFAIL);
            if !gfp.contains(AllocFlags::NONBLOCK) {
                light = light | AllocFlags::NONBLOCK | AllocFlags::NOMEMALLOC;
            }
            self.alloc_slab_block(Order::new(oo.order)?, light, node)
        };
        if page.is_none() && self.lay.min.order != oo.order {
            page = self.alloc_slab_block(Order::new(self.lay.min.order)?, gfp, node);
            objects = self.lay.min.objects as usize;
            if page.is_some() {
                self.stat_here(SlubStat::ORDER_FALLBACK);
            }
        }
        let block = page?;
        let page = block.page;
        self.map_slab(page.ptr, page.order);
        // SAFETY: descriptors live as long as the page allocator, which
        // outlives every slab of this cache.
        let s: Slab<'static> = Slab(unsafe { &*(block.owner as *const buddy::Owner) });
        s.0.data().store(self.id(), Ordering::Relaxed);
        s.set_next(0);
        s.set_prev(0);
        let nid = self.block_nid(page.ptr);
        s.set_tag(self.slab_tag() | ((nid as u32) << NID_SHIFT));
        let base = page.ptr.as_ptr();
        let size = self.lay.size;
        self.slab_lo.fetch_min(base.addr(), CoreOrdering::Relaxed);
        self.slab_hi
            .fetch_max(base.addr() + objects * size, CoreOrdering::Relaxed);
        let _ = self.slab_ref.compare_exchange(
            0,
            base.addr(),
            CoreOrdering::Relaxed,
            CoreOrdering::Relaxed,
        );
        let r = self.slab_ref.load(CoreOrdering::Relaxed);
        for a in [base.addr(), base.addr() + objects * size - 1] {
            let k = usize::BITS - (a ^ r).leading_zeros();
            let high = if k >= usize::BITS {
                0
            } else {
                !((1usize << k) - 1)
            };
            self.slab_mask.fetch_and(
                high | (core::mem::size_of::<usize>() - 1),
                CoreOrdering::Relaxed,
            );
        }
        let (head, taken) = self.link_objects(base, objects, take, clear);
        if self.ctor.is_some() {
            // `setup_object`: the constructor on every object, which no
            // one else can reach yet (the free pointers lie after the
            // objects; debug caches initialise only what is outside them).
            for i in 0..objects {
                self.run_ctor(base.addr() + i * size + self.lay.red_left_pad);
            }
        }
        s.store_state(SlabState {
            freelist: 0,
            counters: Counters {
                inuse: objects as u16,
                objects: objects as u16,
                frozen: true,
            },
        });
        let n = self.get_node(nid);
        n.nr_slabs.fetch_add(1, CoreOrdering::Relaxed);
        n.total_objects.fetch_add(objects, CoreOrdering::Relaxed);
        self.stat_here(SlubStat::ALLOC_SLAB);
        self.note_active();
        Some((s, head, taken))
    }

    /// Returns an empty, unlisted, unfrozen slab to the page allocator.
    pub(super) fn discard_slab(&self, s: Slab<'_>) {
        let st = s.state();
        debug_assert_eq!(st.counters.inuse, 0);
        let order = s.0.order().expect("a slab is an allocated block");
        let base = s.base();
        let n = self.get_node(self.slab_nid(s));
        s.set_tag(0);
        s.0.data().store(0, Ordering::Relaxed);
        // SAFETY: a slab's base is its block's first byte, never null.
        self.unmap_slab(unsafe { NonNull::new_unchecked(base) }, order);
        // Invalidates every CPU's validated range (sheaf frees).
        self.fcheck.gen.fetch_add(1, CoreOrdering::Relaxed);
        n.nr_slabs.fetch_sub(1, CoreOrdering::Relaxed);
        n.total_objects
            .fetch_sub(st.counters.objects as usize, CoreOrdering::Relaxed);
        self.note_active();
        // SAFETY: we held the block since new_slab and nothing uses it.
        unsafe { self.source.free_block(NonNull::new_unchecked(base), order) };
    }

    /// Finds and validates the slab of an object of this cache.
    #[inline(always)]
    pub(super) fn slab_of(&self, ptr: NonNull<u8>) -> Result<(Slab<'_>, usize), FreeError> {
        self.slab_block_of(ptr).map(|(s, obj, _)| (s, obj))
    }

    /// [`slab_of`](Self::slab_of) with the slab's block.
    #[inline(always)]
    pub(super) fn slab_block_of(
        &self,
        ptr: NonNull<u8>,
    ) -> Result<(Slab<'_>, usize, buddy::BlockRef<'_>), FreeError> {
        let a = ptr.as_ptr().addr();
        let b = self
            .source
            .block_of(ptr.as_ptr())
            .ok_or(FreeError::new(a, FreeErrorKind::NotAllocated))?;
        let (s, obj) = self.check_object(Slab(b.owner), b.head, b.order, ptr)?;
        Ok((s, obj, b))
    }

    /// Validates `ptr` as an object of slab `s` (headed at `head`) of this
    /// cache.
    #[inline(always)]
    pub(crate) fn check_object<'s>(
        &self,
        s: Slab<'s>,
        head: NonNull<u8>,
        order: Order,
        ptr: NonNull<u8>,
    ) -> Result<(Slab<'s>, usize), FreeError> {
        let a = ptr.as_ptr().addr();
        if s.tag() & TAG_KIND != TAG_SLAB {
            return Err(FreeError::new(a, FreeErrorKind::NotSlab));
        }
        if s.cache_id() != self.id() {
            return Err(FreeError::new(
                a,
                FreeErrorKind::WrongCache("another cache"),
            ));
        }
        let off = a - head.as_ptr().addr();
        // Objects per slab from the block's order (no double-word load);
        // the index by reciprocal multiplication (`obj_to_index`), no
        // division on the free path.
        if self.obj_index(off, self.objects_of(order)).is_none() {
            return Err(FreeError::new(a, FreeErrorKind::NotObjectStart(off)));
        }
        Ok((s, ptr.as_ptr().expose_provenance()))
    }

    /// The free after validation (`do_slab_free` of one object).
    ///
    /// # Safety
    ///
    /// `obj` is an allocated object of slab `s` of this cache.
    #[inline]
    pub(crate) unsafe fn free_validated(&self, s: Slab<'_>, obj: usize) -> Result<(), FreeError> {
        if self.hardened() {
            let span = s.state().counters.objects as usize * self.lay.size;
            if self.looks_free(obj, s.base().addr(), span) {
                return Err(FreeError::new(obj, FreeErrorKind::DoubleFree));
            }
        }
        // SAFETY: a chain of one validated object.
        unsafe { self.do_slab_free(s, obj, obj, 1) }
    }

    /// `__slab_free`: pushes the chain `head..tail` (`cnt` objects of slab
    /// `s`) onto the slab's freelist by compare-exchange, taking the list
    /// lock only when the slab changes lists.
    pub(crate) fn slab_free_slow(
        &self,
        s: Slab<'_>,
        head: usize,
        tail: usize,
        cnt: usize,
    ) -> Result<(), FreeError> {
        self.stat_here(SlubStat::FREE_SLOWPATH);
        let has_cpu_partial = self.lay.cpu_partial != 0;
        // The slab's own node, whoever frees (a remote-node free included).
        let nid = self.slab_nid(s);
        let mut n: Option<NodeGuard<'_, P>> = None;
        let mut old = s.state();
        let (was_frozen, new) = loop {
            if n.is_some() {
                n = None;
                old = s.state();
            }
            let prior = old.freelist;
            if prior == tail {
                return Err(FreeError::new(tail, FreeErrorKind::DoubleFree));
            }
            self.set_fp(tail, prior);
            let mut new = old;
            new.freelist = head;
            new.counters.inuse = old.counters.inuse.wrapping_sub(cnt as u16);
            let was_frozen = old.counters.frozen;
            if (new.counters.inuse == 0 || prior == 0) && !was_frozen {
                if has_cpu_partial && prior == 0 {
                    // A full slab: freeze it onto this CPU's partial list.
                    new.counters.frozen = true;
                } else {
                    n = Some(self.lock_node(nid));
                }
            }
            match s.cas(old, new) {
                Ok(()) => break (was_frozen, new),
                Err(now) => {
                    self.stat_here(SlubStat::CMPXCHG_DOUBLE_FAIL);
                    old = now;
                }
            }
        };
        let Some(mut n) = n else {
            if new.counters.frozen && !was_frozen {
                self.put_cpu_partial(s, true);
                self.stat_here(SlubStat::CPU_PARTIAL_FREE);
            }
            if was_frozen {
                self.stat_here(SlubStat::FREE_FROZEN);
            }
            return Ok(());
        };
        let prior = old.freelist;
        if new.counters.inuse == 0 && n.nr_partial >= self.lay.min_partial {
            // slab_empty
            if prior != 0 {
                n.remove(s);
                self.stat_here(SlubStat::FREE_REMOVE_PARTIAL);
            }
            self.set_nr_partial(nid, &n);
            drop(n);
            self.stat_here(SlubStat::FREE_SLAB);
            self.discard_slab(s);
            return Ok(());
        }
        // Full -> partial (only without CPU partial lists).
        if !has_cpu_partial && prior == 0 {
            n.add(s, true);
            self.set_nr_partial(nid, &n);
            self.stat_here(SlubStat::FREE_ADD_PARTIAL);
        }
        Ok(())
    }

    /// `put_cpu_partial`: pushes a frozen slab onto this CPU's partial
    /// list; with `drain`, a full list is first moved to the node list.
    pub(super) fn put_cpu_partial(&self, s: Slab<'_>, drain: bool) {
        let mut g = self.lock_cpu();
        let cpu = g.cpu();
        let mut to_unfreeze = 0;
        let mut slabs = 0;
        if g.partial != 0 {
            if drain && g.partial_slabs >= self.lay.cpu_partial_slabs {
                to_unfreeze = g.partial;
                g.partial = 0;
                g.partial_slabs = 0;
                self.stat_cpu(cpu, SlubStat::CPU_PARTIAL_DRAIN);
            } else {
                slabs = g.partial_slabs;
            }
        }
        s.set_next(g.partial);
        g.partial = s.addr();
        g.partial_slabs = slabs + 1;
        self.fast_of(cpu)
            .partial_slabs
            .store(g.partial_slabs, CoreOrdering::Relaxed);
        drop(g);
        if to_unfreeze != 0 {
            self.unfreeze_partials(to_unfreeze);
        }
    }

    /// `__unfreeze_partials`: moves a detached CPU partial chain to the
    /// lists of its slabs' nodes (one list lock at a time, switched when
    /// the node changes); empty slabs beyond `min_partial` go back to the
    /// page allocator.
    pub(super) fn unfreeze_partials(&self, mut chain: usize) {
        let mut discard = 0;
        let mut nid = if chain == 0 {
            0
        } else {
            // SAFETY: chain members are slabs frozen for this CPU.
            self.slab_nid(unsafe { Slab::from_addr(chain) })
        };
        let mut n = self.lock_node(nid);
        while chain != 0 {
            // SAFETY: chain members are slabs frozen for this CPU.
            let s = unsafe { Slab::from_addr(chain) };
            chain = s.next();
            let snid = self.slab_nid(s);
            if snid != nid {
                self.set_nr_partial(nid, &n);
                drop(n);
                nid = snid;
                n = self.lock_node(nid);
            }
            let mut old = s.state();
            let new = loop {
                let mut new = old;
                new.counters.frozen = false;
                match s.cas(old, new) {
                    Ok(()) => break new,
                    Err(now) => {
                        self.stat_here(SlubStat::CMPXCHG_DOUBLE_FAIL);
                        old = now
                    }
                }
            };
            if new.counters.inuse == 0 && n.nr_partial >= self.lay.min_partial {
                s.set_next(discard);
                discard = s.addr();
            } else {
                n.add(s, true);
                self.stat_here(SlubStat::FREE_ADD_PARTIAL);
            }
        }
        self.set_nr_partial(nid, &n);
        drop(n);
        while discard != 0 {
            // SAFETY: collected above, unlisted and empty.
            let s = unsafe { Slab::from_addr(discard) };
            discard = s.next();
            self.stat_here(SlubStat::DEACTIVATE_EMPTY);
            self.discard_slab(s);
            self.stat_here(SlubStat::FREE_SLAB);
        }
    }

    /// `deactivate_slab`: gives a CPU slab back, splicing the CPU freelist
    /// `fl` into the slab's; the slab goes to the node partial list (head,
    /// or tail if it received remote frees), stays full on no list, or is
    /// freed when empty beyond `min_partial`.
    pub(super) fn deactivate_slab(&self, s: Slab<'_>, fl: usize) {
        let mut tail_pos = false;
        if s.state().freelist != 0 {
            self.stat_here(SlubStat::DEACTIVATE_REMOTE_FREES);
            tail_pos = true;
        }
        // Stage one: count the CPU freelist and find its tail; every entry
        // must be an object of the slab, at most `objects` of them.
        let base = s.base().addr();
        let objects = s.state().counters.objects as usize;
        let mut free_delta = 0usize;
        let mut tail = 0;
        let mut p = fl;
        while p != 0 {
            if self.obj_index(p.wrapping_sub(base), objects).is_none() {
                self.bad_freelist(base, tail, p, "points outside its slab");
            }
            if free_delta == objects {
                self.bad_freelist(
                    base,
                    p,
                    p,
                    "is reached again: the CPU freelist is longer than the slab (a cycle)",
                );
            }
            free_delta += 1;
            tail = p;
            p = self.get_fp(p);
        }
        // Stage two: unfreeze with the spliced freelist.
        #[derive(PartialEq)]
        enum M {
            Free,
            Partial,
            Full,
        }
        let nid = self.slab_nid(s);
        let node = self.get_node(nid);
        let mut n: Option<NodeGuard<'_, P>> = None;
        let mut old = s.state();
        let mode = loop {
            let mut new = old;
            if fl != 0 {
                self.set_fp(tail, old.freelist);
                new.freelist = fl;
            }
            new.counters.inuse = old.counters.inuse - free_delta as u16;
            new.counters.frozen = false;
            let mode = if new.counters.inuse == 0
                && node.nr_partial.load(CoreOrdering::Relaxed) >= self.lay.min_partial
            {
                M::Free
            } else if new.freelist != 0 {
                M::Partial
            } else {
                M::Full
            };
            if mode == M::Partial {
                if n.is_none() {
                    n = Some(self.lock_node(nid));
                }
            } else {
                n = None;
            }
            match s.cas(old, new) {
                Ok(()) => break mode,
                Err(now) => {
                    self.stat_here(SlubStat::CMPXCHG_DOUBLE_FAIL);
                    old = now
                }
            }
        };
        match mode {
            M::Partial => {
                let mut n = n.expect("list lock held for a partial slab");
                n.add(s, tail_pos);
                self.set_nr_partial(nid, &n);
                drop(n);
                self.stat_here(if tail_pos {
                    SlubStat::DEACTIVATE_TO_TAIL
                } else {
                    SlubStat::DEACTIVATE_TO_HEAD
                });
            }
            M::Free => {
                self.stat_here(SlubStat::DEACTIVATE_EMPTY);
                self.discard_slab(s);
                self.stat_here(SlubStat::FREE_SLAB);
            }
            M::Full => self.stat_here(SlubStat::DEACTIVATE_FULL),
        }
    }

    /// `do_slab_free` of a detached chain `head..tail` of `cnt` objects of
    /// slab `s`: onto the CPU freelist if `s` is the CPU slab, else
    /// `__slab_free`.
    ///
    /// # Safety
    ///
    /// The chain links `cnt` allocated objects of `s` ending at `tail`.
    pub(super) unsafe fn do_slab_free(
        &self,
        s: Slab<'_>,
        head: usize,
        tail: usize,
        cnt: usize,
    ) -> Result<(), FreeError> {
        if self.mode() == Mode::Lockless {
            let p = self.cpu.platform();
            loop {
                let cpu = p.current_cpu();
                let c = &self.fast[cpu];
                let d = c.fl_tid.load(Ordering::Acquire);
                if c.slab.load(Ordering::Relaxed) != s.addr() {
                    return self.slab_free_slow(s, head, tail, cnt);
                }
                if d.lo == tail {
                    return Err(FreeError::new(tail, FreeErrorKind::DoubleFree));
                }
                self.set_fp(tail, d.lo);
                if this_cpu_cmpxchg_double(
                    p,
                    cpu,
                    &c.fl_tid,
                    d,
                    DWord::new(head, Self::next_tid(d.hi, cpu)),
                ) {
                    c.stats.inc(SlubStat::FREE_FASTPATH);
                    return Ok(());
                }
                c.stats.inc(SlubStat::CMPXCHG_DOUBLE_CPU_FAIL);
            }
        } else {
            let mut g = self.lock_cpu();
            let cpu = g.cpu();
            if self.fast_of(cpu).slab.load(Ordering::Relaxed) == s.addr() {
                if g.freelist == tail {
                    return Err(FreeError::new(tail, FreeErrorKind::DoubleFree));
                }
                self.set_fp(tail, g.freelist);
                g.freelist = head;
                g.tid = g.tid.wrapping_add(Self::TID_STEP);
                self.stat_cpu(cpu, SlubStat::FREE_FASTPATH);
                return Ok(());
            }
            drop(g);
            self.slab_free_slow(s, head, tail, cnt)
        }
    }
}
