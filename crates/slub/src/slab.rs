//! Per-slab state in the buddy's owner words (`struct slab` overlaying
//! `struct page`):
//!
//! | owner word | SLUB |
//! |---|---|
//! | `pair.lo` | `freelist`: first free object (exposed address), 0 if none |
//! | `pair.hi` | `counters`: `inuse:16 \| objects:15 \| frozen:1` |
//! | `data` | the cache's id (`KmemCache::id`, drawn at first use: not its address, so a cache may move) |
//! | `link` | next slab on the node partial list, or on a CPU partial chain |
//! | `prev` | previous slab on the node partial list |
//! | `tag` | [`TAG_SLAB`] (+ [`ON_PARTIAL`] while on the node partial list) |
//!
//! `freelist` and `counters` change together by one double-word
//! compare-exchange, which is what lets frees from other CPUs skip every
//! lock unless the slab changes lists.

use local_lock::sync::atomic::Ordering;
use local_lock::sync::DWord;

use buddy::Owner;

/// Tag of a slab's head descriptor.
pub const TAG_SLAB: u32 = 0x51ab_0000;
/// Tag of a large kmalloc block's head descriptor (`data` holds the size).
pub const TAG_LARGE: u32 = 0x1a60_0000;
/// Tag of a sheaf's page (an array of object pointers, not objects).
pub const TAG_SHEAF: u32 = 0x54ea_0000;
/// Tag bit: the slab is on its cache's node partial list (list lock).
pub const ON_PARTIAL: u32 = 1;
/// Tag bit: the slab is on a debug cache's full list (list lock).
pub const ON_FULL: u32 = 2;
/// The kind part of a tag (the low 16 bits are the kind's own).
pub const TAG_KIND: u32 = 0xffff_0000;

/// The kmalloc class + 1 recorded in a slab's tag (0: not a kmalloc cache).
#[inline(always)]
pub const fn tag_kmalloc_index(tag: u32) -> usize {
    ((tag >> 8) & 0xff) as usize
}

/// Most objects a slab can hold (15 bits).
pub const MAX_OBJS_PER_SLAB: usize = 32767;

/// `inuse:16 | objects:15 | frozen:1`.
///
/// ```
/// use slub::slab::Counters;
///
/// let c = Counters { inuse: 3, objects: 32, frozen: true };
/// assert_eq!(c.pack(), 3 | 32 << 16 | 1 << 31);
/// assert_eq!(Counters::unpack(c.pack()), c);
/// assert_eq!(Counters::unpack(0), Counters::default());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Counters {
    /// Objects not on the slab's freelist (allocated, or on a CPU freelist).
    pub inuse: u16,
    /// Objects in the slab.
    pub objects: u16,
    /// Owned by a CPU (its CPU slab or on its CPU partial list): other CPUs
    /// may push frees onto the freelist, only the owner takes from it.
    pub frozen: bool,
}

impl Counters {
    /// Packs into the `counters` word.
    #[inline(always)]
    pub const fn pack(self) -> usize {
        self.inuse as usize | ((self.objects as usize) << 16) | ((self.frozen as usize) << 31)
    }
    /// Unpacks the `counters` word.
    #[inline(always)]
    pub const fn unpack(v: usize) -> Counters {
        Counters {
            inuse: v as u16,
            objects: ((v >> 16) & 0x7fff) as u16,
            frozen: (v >> 31) & 1 != 0,
        }
    }
}

/// A slab's (freelist, counters) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlabState {
    pub(crate) freelist: usize,
    pub(crate) counters: Counters,
}

impl SlabState {
    #[inline(always)]
    fn to_dword(self) -> DWord {
        DWord::new(self.freelist, self.counters.pack())
    }
    #[inline(always)]
    fn from_dword(d: DWord) -> Self {
        SlabState {
            freelist: d.lo,
            counters: Counters::unpack(d.hi),
        }
    }
}

/// A slab: its head descriptor's owner words.
#[derive(Clone, Copy)]
pub(crate) struct Slab<'a>(pub(crate) &'a Owner);

impl<'a> Slab<'a> {
    /// The slab whose descriptor address is `addr` (as stored in lists).
    ///
    /// # Safety
    ///
    /// `addr` came from [`addr`](Self::addr) of a slab that is still held.
    #[inline(always)]
    pub(crate) unsafe fn from_addr(addr: usize) -> Slab<'a> {
        // SAFETY: caller's contract; descriptors live as long as the buddy.
        Slab(unsafe { &*core::ptr::with_exposed_provenance::<Owner>(addr) })
    }

    /// The descriptor's address (exposed), for lists and the CPU slab word.
    #[inline(always)]
    pub(crate) fn addr(self) -> usize {
        (self.0 as *const Owner).expose_provenance()
    }

    #[inline(always)]
    pub(crate) fn state(self) -> SlabState {
        SlabState::from_dword(self.0.pair().load(Ordering::Acquire))
    }

    /// `cmpxchg_double_slab`: replaces `old` by `new` if unchanged.
    #[inline(always)]
    pub(crate) fn cas(self, old: SlabState, new: SlabState) -> Result<(), SlabState> {
        self.0
            .pair()
            .compare_exchange(
                old.to_dword(),
                new.to_dword(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map(|_| ())
            .map_err(SlabState::from_dword)
    }

    #[inline(always)]
    pub(crate) fn store_state(self, s: SlabState) {
        self.0.pair().store(s.to_dword(), Ordering::Release);
    }

    #[inline(always)]
    pub(crate) fn cache_id(self) -> usize {
        self.0.data().load(Ordering::Relaxed)
    }

    #[inline(always)]
    pub(crate) fn next(self) -> usize {
        self.0.link().load(Ordering::Relaxed)
    }
    #[inline(always)]
    pub(crate) fn set_next(self, v: usize) {
        self.0.link().store(v, Ordering::Relaxed)
    }
    #[inline(always)]
    pub(crate) fn prev(self) -> usize {
        self.0.prev().load(Ordering::Relaxed)
    }
    #[inline(always)]
    pub(crate) fn set_prev(self, v: usize) {
        self.0.prev().store(v, Ordering::Relaxed)
    }
    #[inline(always)]
    pub(crate) fn tag(self) -> u32 {
        self.0.tag().load(Ordering::Relaxed)
    }
    #[inline(always)]
    pub(crate) fn set_tag(self, v: u32) {
        self.0.tag().store(v, Ordering::Relaxed)
    }
    #[inline(always)]
    pub(crate) fn on_partial(self) -> bool {
        self.tag() & ON_PARTIAL != 0
    }

    /// The slab's first byte.
    #[inline(always)]
    pub(crate) fn base(self) -> *mut u8 {
        match self.0.block() {
            Some(p) => p.as_ptr(),
            None => core::ptr::null_mut(),
        }
    }
}

/// The node partial list (`kmem_cache_node`): doubly linked through the
/// slabs' `link`/`prev` words, under the cache's `list_lock`. `BIT` is the
/// tag bit of membership ([`ON_PARTIAL`], or [`ON_FULL`] for a debug
/// cache's full list): a type parameter, not a field, so that an empty
/// list is all zero bytes (a cache in `.bss` then gives back the pages of
/// the nodes it never uses: 15 of 16, a page, in every process).
#[derive(Debug, Default)]
pub(crate) struct PartialList<const BIT: u32> {
    pub(crate) head: usize,
    pub(crate) tail: usize,
    pub(crate) nr_partial: usize,
}

impl<const BIT: u32> PartialList<BIT> {
    pub(crate) const fn new() -> Self {
        PartialList {
            head: 0,
            tail: 0,
            nr_partial: 0,
        }
    }

    /// `add_partial`: at the head, or at the tail.
    pub(crate) fn add(&mut self, s: Slab<'_>, tail: bool) {
        debug_assert!(s.tag() & (ON_PARTIAL | ON_FULL) == 0);
        let a = s.addr();
        if self.head == 0 {
            s.set_next(0);
            s.set_prev(0);
            self.head = a;
            self.tail = a;
        } else if tail {
            s.set_next(0);
            s.set_prev(self.tail);
            // SAFETY: list members are held slabs.
            unsafe { Slab::from_addr(self.tail) }.set_next(a);
            self.tail = a;
        } else {
            s.set_prev(0);
            s.set_next(self.head);
            // SAFETY: as above.
            unsafe { Slab::from_addr(self.head) }.set_prev(a);
            self.head = a;
        }
        s.set_tag(s.tag() | BIT);
        self.nr_partial += 1;
    }

    /// `remove_partial`.
    pub(crate) fn remove(&mut self, s: Slab<'_>) {
        debug_assert!(s.tag() & BIT != 0);
        let (p, n) = (s.prev(), s.next());
        if p == 0 {
            self.head = n;
        } else {
            // SAFETY: list members are held slabs.
            unsafe { Slab::from_addr(p) }.set_next(n);
        }
        if n == 0 {
            self.tail = p;
        } else {
            // SAFETY: as above.
            unsafe { Slab::from_addr(n) }.set_prev(p);
        }
        s.set_next(0);
        s.set_prev(0);
        s.set_tag(s.tag() & !BIT);
        self.nr_partial -= 1;
    }
}
