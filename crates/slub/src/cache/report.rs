//! Reports: statistics, the slabinfo line, and `validate`, which walks the
//! node partial list and every reachable CPU's state checking the frozen
//! rule and every freelist.

use core::fmt;
use core::sync::atomic::Ordering as CoreOrdering;

use local_lock::sync::atomic::Ordering;
use local_lock::Platform;

use crate::slab::{Slab, ON_PARTIAL};
use crate::source::SlabSource;
use crate::stats::SlubStats;

use super::node::NID_SHIFT;
use super::{CpuFast, CpuLocked, FreePtr, KmemCache, Mode};

/// A slabinfo line.
///
/// ```
/// use local_lock::std_platform::PerThread;
/// use slub::{GlobalPages, KmemCache, SlabFlags};
///
/// let c = KmemCache::<GlobalPages, PerThread>::create(
///     "obj64", 64, 8, SlabFlags::NONE, GlobalPages, PerThread).unwrap();
/// let p = c.alloc().unwrap();
/// let i = c.slabinfo();
/// assert_eq!((i.name, i.objsize, i.num_slabs, i.cpu_slabs), ("obj64", 64, 1, 1));
/// assert_eq!(i.objperslab * 64, i.pagesperslab * 4096);
/// // The CPU slab's objects count as allocated, as in `/proc/slabinfo`.
/// assert_eq!(i.active_objs, i.num_objs);
/// assert!(i.to_string().starts_with("obj64 "));
/// // SAFETY: ours, freed once.
/// unsafe { c.free(p) };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabInfo {
    /// Cache name.
    pub name: &'static str,
    /// Objects allocated (objects of CPU slabs count as allocated, as in
    /// `/proc/slabinfo`).
    pub active_objs: usize,
    /// Objects in all slabs.
    pub num_objs: usize,
    /// Stride of an object (`size`).
    pub objsize: usize,
    /// Objects per slab at the preferred order.
    pub objperslab: usize,
    /// Pages per slab at the preferred order.
    pub pagesperslab: usize,
    /// Slabs.
    pub num_slabs: usize,
    /// Slabs on the node partial list.
    pub partial_slabs: usize,
    /// Slabs on CPU partial lists.
    pub cpu_partial_slabs: usize,
    /// Slabs installed as CPU slabs.
    pub cpu_slabs: usize,
}

impl SlabInfo {
    /// The `/proc/slabinfo` header.
    pub const HEADER: &'static str = "# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : slabdata <active_slabs> <num_slabs> : partial <node> <cpu> <cpu_slabs>";
}

impl fmt::Display for SlabInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<17} {:>13} {:>10} {:>9} {:>12} {:>14} : slabdata {:>6} {:>6} : partial {:>4} {:>4} {:>4}",
            self.name,
            self.active_objs,
            self.num_objs,
            self.objsize,
            self.objperslab,
            self.pagesperslab,
            self.num_slabs,
            self.num_slabs,
            self.partial_slabs,
            self.cpu_partial_slabs,
            self.cpu_slabs
        )
    }
}

/// The cache's parameters for [`KmemCache::validate`]'s walks.
struct Validator {
    name: &'static str,
    size: usize,
    offset: usize,
    hardened: bool,
    random: usize,
}

impl Validator {
    fn walk(&self, s: Slab<'_>, fl: usize) -> usize {
        let (hardened, random) = (self.hardened, self.random);
        walk_freelist(
            self.size,
            self.offset,
            s,
            fl,
            self.name,
            move |v: FreePtr, slot: usize| {
                if hardened {
                    v.raw() ^ random ^ slot.swap_bytes()
                } else {
                    v.raw()
                }
            },
        )
    }

    /// One CPU's state: its slab frozen, off the node list, its freelist
    /// inside it; its partial chain frozen and counted.
    fn cpu(&self, i: usize, c: &CpuFast, l: &CpuLocked, lockless: bool) {
        let name = self.name;
        let slab = c.slab.load(Ordering::Relaxed);
        let fl = if lockless {
            c.fl_tid.load(Ordering::Relaxed).lo
        } else {
            l.freelist
        };
        if slab != 0 {
            // SAFETY: a CPU slab is held.
            let s = unsafe { Slab::from_addr(slab) };
            assert!(
                s.state().counters.frozen,
                "{name}: CPU {i}'s slab not frozen"
            );
            assert!(!s.on_partial(), "{name}: CPU {i}'s slab on the node list");
            self.walk(s, fl);
        } else {
            assert_eq!(fl, 0, "{name}: CPU {i} has a freelist but no slab");
        }
        let mut k = 0;
        let mut cur = l.partial;
        while cur != 0 {
            // SAFETY: chain members are held.
            let s = unsafe { Slab::from_addr(cur) };
            assert!(
                s.state().counters.frozen,
                "{name}: CPU {i} partial slab not frozen"
            );
            assert!(!s.on_partial(), "{name}: CPU partial slab on the node list");
            assert_ne!(cur, slab, "{name}: CPU slab also on the CPU partial list");
            k += 1;
            cur = s.next();
        }
        assert_eq!(k, l.partial_slabs, "{name}: CPU {i} partial_slabs");
    }
}

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// Statistics summed over the CPUs.
    pub fn stats(&self) -> SlubStats {
        let mut s = self.spill_stats.snapshot();
        for c in &self.fast {
            s.merge(&c.stats.snapshot());
        }
        s
    }

    /// One CPU's statistics.
    pub fn cpu_stats(&self, cpu: usize) -> SlubStats {
        self.fast_of(cpu).stats.snapshot()
    }

    /// Slabs allocated from the page allocator and not yet freed.
    /// The sum of every node's (see [`node_nr_slabs`](Self::node_nr_slabs)).
    pub fn nr_slabs(&self) -> usize {
        self.sum_nodes().0
    }

    /// The slabinfo line (a racy snapshot while the cache is in use).
    pub fn slabinfo(&self) -> SlabInfo {
        let (mut partial_slabs, mut partial_free) = (0, 0);
        for nid in 0..self.nr_nodes() {
            let n = self.lock_node(nid);
            let mut cur = n.head;
            while cur != 0 {
                // SAFETY: list members are held slabs.
                let s = unsafe { Slab::from_addr(cur) };
                let c = s.state().counters;
                partial_free += (c.objects - c.inuse) as usize;
                cur = s.next();
            }
            partial_slabs += n.nr_partial;
        }
        let (num_slabs, num_objs) = self.sum_nodes();
        let cpu_partial_slabs = self
            .fast
            .iter()
            .map(|c| c.partial_slabs.load(CoreOrdering::Relaxed))
            .sum();
        let cpu_slabs = self
            .fast
            .iter()
            .filter(|c| c.slab.load(Ordering::Relaxed) != 0)
            .count();
        SlabInfo {
            name: self.name,
            active_objs: num_objs.saturating_sub(partial_free),
            num_objs,
            objsize: self.lay.size,
            objperslab: self.lay.oo.objects as usize,
            pagesperslab: 1 << self.lay.oo.order,
            num_slabs,
            partial_slabs,
            cpu_partial_slabs,
            cpu_slabs,
        }
    }

    /// Checks the cache's invariants on a quiescent cache and panics with a
    /// description of the first violation:
    ///
    /// * node partial list: links consistent both ways, `nr_partial`
    ///   matches, every member tagged, unfrozen, of this cache, with
    ///   `inuse < objects` (or empty), its freelist inside the slab, on
    ///   object boundaries, without cycles, `objects - inuse` long;
    /// * the frozen rule: every CPU slab and CPU partial slab is frozen and
    ///   named by exactly one CPU, and no node partial slab is frozen;
    /// * CPU freelists lie inside their CPU slab.
    ///
    /// Through `&self`, so a `static` cache can be checked: the node lists
    /// under the list lock, and the CPU state of every slot the platform
    /// lets this context lock (its own, and remote ones where
    /// [`LocalLock::lock_remote`](local_lock::LocalLock::lock_remote) can:
    /// every slot of the test and rseq platforms, a per-thread slot whose
    /// thread has exited). [`validate_exclusive`](Self::validate_exclusive)
    /// reaches every slot through `&mut self`.
    ///
    /// ```
    /// use local_lock::std_platform::PerThread;
    /// use slub::{Geometry, GlobalPages, KmemCache, SlabFlags};
    /// static CACHE: KmemCache<GlobalPages, PerThread> = KmemCache::new(
    ///     "checked", 64, 8, SlabFlags::HARDENED, Geometry::new(PerThread::OWNED_SLOTS + 1), GlobalPages, PerThread);
    /// let a = CACHE.alloc().unwrap();
    /// CACHE.validate();
    /// // SAFETY: ours, freed once.
    /// unsafe { CACHE.free(a) };
    /// CACHE.validate();
    /// ```
    pub fn validate(&self) {
        self.validate_nodes();
        let lockless = self.mode.load(CoreOrdering::Relaxed) == Mode::Lockless as u8;
        let v = self.validator();
        {
            let g = self.lock_cpu();
            let i = g.cpu();
            v.cpu(i % N, self.fast_of(i), &g, lockless);
        }
        for i in 0..N {
            if let Some(g) = self.cpu.lock_remote(i) {
                v.cpu(i, &self.fast[i], &g, lockless);
            }
        }
    }

    /// [`validate`](Self::validate) of every CPU slot, through exclusive
    /// access (whatever the platform lets a context lock).
    ///
    /// ```
    /// use local_lock::std_platform::PerThread;
    /// use slub::{GlobalPages, KmemCache, SlabFlags};
    /// let mut c = KmemCache::<_, _>::create("mine", 64, 8, SlabFlags::NONE, GlobalPages, PerThread).unwrap();
    /// let a = c.alloc().unwrap();
    /// c.validate_exclusive();
    /// // SAFETY: ours, freed once.
    /// unsafe { c.free(a) };
    /// c.validate_exclusive();
    /// ```
    pub fn validate_exclusive(&mut self) {
        self.validate_nodes();
        let lockless = self.mode.load(CoreOrdering::Relaxed) == Mode::Lockless as u8;
        let v = self.validator();
        for (i, l) in self.cpu.iter_mut().enumerate() {
            v.cpu(i, &self.fast[i], l, lockless);
        }
    }

    /// [`validate`](Self::validate) (its name while `validate` took
    /// `&mut self`; kept for existing callers).
    ///
    /// ```
    /// use local_lock::std_platform::PerThread;
    /// use slub::{GlobalPages, KmemCache, SlabFlags};
    /// let c = KmemCache::<_, _>::create("old", 64, 8, SlabFlags::NONE, GlobalPages, PerThread).unwrap();
    /// c.validate_shared();
    /// ```
    pub fn validate_shared(&self) {
        self.validate()
    }

    /// What the freelist checks need of the cache.
    fn validator(&self) -> Validator {
        Validator {
            name: self.name,
            size: self.lay.size,
            offset: self.lay.offset,
            hardened: self.hardened(),
            random: self.random.load(CoreOrdering::Relaxed),
        }
    }

    /// The debug slabs and every node's partial list (under their locks).
    fn validate_nodes(&self) {
        if self.flags.is_debug() {
            self.validate_debug();
        }
        for nid in 0..self.nr_nodes() {
            self.validate_node(nid);
        }
    }

    /// Node `nid`'s partial list: as [`validate`](Self::validate) says,
    /// every member of this node.
    fn validate_node(&self, nid: usize) {
        let me = self.id();
        let tag = self.slab_tag() | ((nid as u32) << NID_SHIFT);
        let v = self.validator();
        let name = self.name;
        let n = self.lock_node(nid);
        let mut count = 0;
        let mut prev = 0;
        let mut cur = n.head;
        while cur != 0 {
            // SAFETY: list members are held slabs.
            let s = unsafe { Slab::from_addr(cur) };
            assert_eq!(s.prev(), prev, "{}: partial list prev link broken", name);
            assert_eq!(
                s.tag(),
                tag | ON_PARTIAL,
                "{}: partial slab tag (node {nid})",
                name
            );
            assert_eq!(s.cache_id(), me, "{}: partial slab of another cache", name);
            let st = s.state();
            assert!(
                !st.counters.frozen,
                "{}: frozen slab on the node list",
                name
            );
            assert!(
                st.counters.inuse < st.counters.objects || st.counters.inuse == 0,
                "{}: full slab on the partial list",
                name
            );
            let free = v.walk(s, st.freelist);
            assert_eq!(
                free,
                (st.counters.objects - st.counters.inuse) as usize,
                "{}: freelist length != objects - inuse",
                name
            );
            count += 1;
            prev = cur;
            cur = s.next();
        }
        assert_eq!(n.tail, prev, "{}: partial list tail", name);
        assert_eq!(count, n.nr_partial, "{}: nr_partial", name);
    }
}

/// Walks a freelist inside slab `s`, checking bounds and boundaries, and
/// returns its length.
fn walk_freelist(
    size: usize,
    offset: usize,
    s: Slab<'_>,
    fl: usize,
    name: &str,
    decode: impl Fn(FreePtr, usize) -> usize,
) -> usize {
    let base = s.base().addr();
    let objects = s.state().counters.objects as usize;
    let mut n = 0;
    let mut prev = 0;
    let mut p = fl;
    while p != 0 {
        assert!(
            p >= base && (p - base).is_multiple_of(size) && (p - base) / size < objects,
            "slub {name}: corrupted freelist in slab {base:#x}: entry {p:#x} (after {prev:#x}) \
             is outside the slab or off an object boundary"
        );
        n += 1;
        assert!(
            n <= objects,
            "slub {name}: corrupted freelist in slab {base:#x}: more than {objects} entries \
             (a cycle), {p:#x} reached again"
        );
        prev = p;
        let q = core::ptr::with_exposed_provenance::<usize>(p + offset);
        // SAFETY: inside the slab, word aligned.
        let raw = unsafe { core::sync::atomic::AtomicUsize::from_ptr(q as *mut usize) }
            .load(CoreOrdering::Relaxed);
        p = decode(FreePtr(raw), p + offset);
    }
    n
}
