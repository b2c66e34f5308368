//! Page descriptors (`struct page`) and the owner words.
//!
//! One [`PageDesc`] per page, 64 bytes on 64-bit targets (one cache line, so
//! an owner's compare-exchange on one block never false-shares with its
//! neighbour's), laid out so that **all-zero bytes are a valid descriptor of
//! a page nobody manages**: a memmap in fresh `mmap` memory needs no
//! initialisation and costs memory only where it is touched.
//!
//! ```text
//!  0 pair   AtomicDWord    owner ┐ belong to whoever holds the allocated
//! 16 data   AtomicUsize    owner │ block (head descriptor only)
//! 24 link   AtomicUsize    owner │
//! 32 state  AtomicU32      buddy │ kind | order | zero bits (see below)
//! 36 tag    AtomicU32      owner ┘
//! 40 next   *mut PageDesc  buddy: free-list links, zone lock only
//! 48 prev   AtomicUsize    buddy while free (free-list link); owner while
//!                          allocated (SLUB: partial-list prev link)
//! 56 aux    AtomicPtr<u8>  buddy: head: the block's pointer; stamped tail: its head's
//! ```
//!
//! The owner words read zero on every page of a free block: a free clears
//! what the holder left (`clear_owner_for_free`, loads only when it left
//! nothing), the decay scan's `AGED` stamp is cleared when its block leaves
//! the list, so an allocation hands them out zero without a store.
//!
//! `state` flags of a free head: PG_zero (two bits, one per half),
//! `PURGED` (given back to the OS), `AGED` (seen by the decay scan).
//!
//! `state` kinds: `NONE` (0: a tail, a hole, the memmap itself, or never
//! managed), `FREE` (head of a block on a free list: order and PG_zero bits
//! valid), `ALLOC` (head of an allocated block: order valid), `TAIL` (a tail
//! of a block allocated with [`COMP`](crate::AllocFlags::COMP): `aux` points
//! at its head; may be stale once that block is freed, so readers verify
//! the head). The kind changes only under the zone lock (and tails of a
//! `COMP` block right after its allocation, by its new holder).

use core::ptr::{self, NonNull};

use local_lock::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use local_lock::sync::{AtomicDWord, DWord, UnsafeCell};

use crate::types::Order;

// --- state word -------------------------------------------------------------

pub(crate) const KIND_MASK: u32 = 0b11;
/// Not a block head (0, so a zeroed descriptor is valid).
pub(crate) const KIND_NONE: u32 = 0;
/// Head of a free block on a free list.
pub(crate) const KIND_FREE: u32 = 1;
/// Head of an allocated block.
pub(crate) const KIND_ALLOC: u32 = 2;
/// Tail of a block allocated with `COMP`; `aux` points at the head.
pub(crate) const KIND_TAIL: u32 = 3;
pub(crate) const ORDER_SHIFT: u32 = 2;
pub(crate) const ORDER_MASK: u32 = 0x1f << ORDER_SHIFT;
/// PG_zero for the lower half of a free block.
pub(crate) const ZERO_LO: u32 = 1 << 8;
/// PG_zero for the upper half of a free block.
pub(crate) const ZERO_HI: u32 = 1 << 9;
/// PG_zero: the whole free block reads as zero.
pub(crate) const ZERO_FULL: u32 = ZERO_LO | ZERO_HI;
/// The whole free block was given back to the OS (purged: `madvise`), so
/// it costs no resident memory and reads as zero (always set with
/// `ZERO_FULL`). Splitting passes it to both halves; a merge keeps it only
/// if both halves had it (a block half resident counts as resident, the
/// purged half's pages leave the zone's `purged` count); handing a block
/// out clears it. The kernel's `PG_reported` (free page reporting).
pub(crate) const PURGED: u32 = 1 << 10;
/// The decay scan has seen this free block (its first sighting's time is
/// in the head's `data` word, an owner word the buddy may use while the
/// block is free). Any new state (a free, a merge, a split) clears it.
pub(crate) const AGED: u32 = 1 << 11;
/// The flag bits a state word carries besides kind and order.
const FLAGS: u32 = ZERO_FULL | PURGED | AGED;

#[inline(always)]
pub(crate) const fn kind(state: u32) -> u32 {
    state & KIND_MASK
}
#[inline(always)]
pub(crate) const fn order_of(state: u32) -> Order {
    match Order::new(((state & ORDER_MASK) >> ORDER_SHIFT) as u8) {
        Some(o) => o,
        None => Order::ZERO,
    }
}
/// Whether `state` is a head of `kind` and `order` (one mask and compare:
/// the hot checks of a free and a merge).
#[inline(always)]
pub(crate) const fn is_head(state: u32, kind: u32, order: Order) -> bool {
    state & (KIND_MASK | ORDER_MASK) == kind | ((order.get() as u32) << ORDER_SHIFT)
}
#[inline(always)]
pub(crate) const fn make_state(kind: u32, order: Order, zero: u32) -> u32 {
    kind | ((order.get() as u32) << ORDER_SHIFT) | (zero & FLAGS)
}

/// The owner tag of a block on a per-CPU page list (pcp): `tag &
/// PCP_TAG_MASK == PCP_TAG` (the low byte is the list's id). A block so
/// tagged is allocated in the buddy's eyes but held by the per-CPU lists,
/// not by any caller: the buddy refuses to free it
/// ([`FreeErrorKind::OnPcpList`](crate::FreeErrorKind::OnPcpList)). The
/// pcp stamps it when it links the page (its list id, a store it does
/// anyway) and clears it when it hands the page out; other owners never use
/// tags of this form.
pub const PCP_TAG: u32 = 0x5043_0000;
/// The mask of [`PCP_TAG`] (the low byte is free for a list id).
pub const PCP_TAG_MASK: u32 = 0xffff_ff00;

/// Whether an owner tag says "on a per-CPU list" ([`PCP_TAG`]).
#[inline(always)]
pub const fn is_pcp_tag(tag: u32) -> bool {
    tag & PCP_TAG_MASK == PCP_TAG
}

/// The per-page descriptor. See the module docs for the layout and the
/// meaning of each word.
///
/// Invariants (zone lock held, checked by `check_invariants`):
/// `kind == FREE` ⇔ the descriptor heads a block on the free list of its
/// zone for `order`; `kind == ALLOC` ⇔ it heads an allocated block of
/// `order`; every other page of a free block has kind `NONE` or `TAIL`.
#[repr(C, align(64))]
pub(crate) struct PageDesc {
    /// Owner: double word (SLUB: `freelist`, `counters`).
    pub(crate) pair: AtomicDWord,
    /// Owner: a word (SLUB: the cache's id). Buddy, while the block is
    /// free and `AGED`: the decay scan's first sighting of it (ms).
    pub(crate) data: AtomicUsize,
    /// Owner: a word (SLUB, pcp: a list link).
    pub(crate) link: AtomicUsize,
    /// Buddy: kind, order, PG_zero, purged and aged bits.
    pub(crate) state: AtomicU32,
    /// Owner: a small tag (block kind: slab, large kmalloc, ...).
    pub(crate) tag: AtomicU32,
    /// Buddy: next block on the free list (zone lock).
    next: UnsafeCell<*mut PageDesc>,
    /// Buddy, while the block is free: previous block on the free list
    /// (zone lock), as an exposed address. Owner, while the block is
    /// allocated: a third owner word ([`Owner::prev`]).
    prev: AtomicUsize,
    /// Buddy: for a head, the block's pointer; for a stamped tail, its
    /// head's pointer.
    pub(crate) aux: AtomicPtr<u8>,
}

// SAFETY: every field but the list links is atomic; the links are only read
// or written under the lock of the zone that owns the page (see
// `next`/`prev`).
unsafe impl Sync for PageDesc {}
// SAFETY: as above.
unsafe impl Send for PageDesc {}

#[cfg(all(not(loom), target_pointer_width = "64"))]
const _: () = assert!(core::mem::size_of::<PageDesc>() == 64);
// The offsets `PageDesc::owner_clean`'s word loads rely on.
#[cfg(all(not(loom), target_pointer_width = "64"))]
const _: () = assert!(
    core::mem::offset_of!(PageDesc, pair) == 0
        && core::mem::offset_of!(PageDesc, data) == 16
        && core::mem::offset_of!(PageDesc, link) == 24
        && core::mem::offset_of!(PageDesc, tag) == 36
);

impl PageDesc {
    /// A descriptor of an unmanaged page (the all-zero value).
    #[allow(dead_code)] // loom builds and tests construct descriptors
    pub(crate) fn new() -> PageDesc {
        PageDesc {
            pair: AtomicDWord::new(DWord::new(0, 0)),
            data: AtomicUsize::new(0),
            link: AtomicUsize::new(0),
            state: AtomicU32::new(0),
            tag: AtomicU32::new(0),
            next: UnsafeCell::new(ptr::null_mut()),
            prev: AtomicUsize::new(0),
            aux: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Initialises `n` descriptors at `mm` to the unmanaged state.
    ///
    /// # Safety
    ///
    /// `mm` is valid for writes of `n` descriptors, aligned, and nobody else
    /// uses them.
    pub(crate) unsafe fn init_range(mm: *mut PageDesc, n: usize) {
        #[cfg(not(loom))]
        // SAFETY: caller's contract; all-zero bytes are a valid descriptor.
        unsafe {
            ptr::write_bytes(mm, 0, n)
        };
        #[cfg(loom)]
        for i in 0..n {
            // SAFETY: caller's contract; loom's types must be constructed.
            unsafe { ptr::write(mm.add(i), PageDesc::new()) };
        }
    }

    #[inline(always)]
    pub(crate) fn load_state(&self) -> u32 {
        self.state.load(Ordering::Relaxed)
    }

    /// The next block on the free list.
    ///
    /// # Safety
    ///
    /// The caller holds the lock of the zone whose free list holds this
    /// descriptor.
    #[inline(always)]
    pub(crate) unsafe fn next(&self) -> *mut PageDesc {
        // SAFETY: the zone lock serialises all link accesses.
        self.next.with(|p| unsafe { *p })
    }
    /// The previous block on the free list.
    ///
    /// # Safety
    ///
    /// As for [`next`](Self::next).
    #[inline(always)]
    pub(crate) unsafe fn prev(&self) -> *mut PageDesc {
        ptr::with_exposed_provenance_mut(self.prev.load(Ordering::Relaxed))
    }
    /// Sets the next link.
    ///
    /// # Safety
    ///
    /// As for [`next`](Self::next).
    #[inline(always)]
    pub(crate) unsafe fn set_next(&self, n: *mut PageDesc) {
        // SAFETY: the zone lock serialises all link accesses.
        self.next.with_mut(|p| unsafe { *p = n })
    }
    /// Sets the previous link.
    ///
    /// # Safety
    ///
    /// As for [`next`](Self::next).
    #[inline(always)]
    pub(crate) unsafe fn set_prev(&self, n: *mut PageDesc) {
        self.prev.store(n.expose_provenance(), Ordering::Relaxed)
    }

    /// Clears the owner words for a new holder.
    #[inline(always)]
    pub(crate) fn reset_owner(&self) {
        self.prev.store(0, Ordering::Relaxed);
        self.reset_owner_but_prev();
    }

    /// Whether the owner words but `prev` (`pair`, `data`, `link`, `tag`)
    /// read zero: what every free block head and every page inside a free
    /// block keeps (`ZoneInner::free_one` clears a holder's words as the
    /// block comes back), so an allocation hands them out zero without
    /// storing them (issue #22). `prev` is a free-list link while the block
    /// is free; `ZoneInner::take` leaves it null.
    ///
    /// On x86-64 (not loom, not miri) five word loads OR'ed together, each
    /// a relaxed load of its own (aligned 8- and 4-byte loads are
    /// single-copy atomic there): the pair is read as its two halves, which
    /// is enough for "both zero" (a pair that changes between the two loads
    /// is being written while its block is freed or handed out: a caller
    /// bug, about which this check decides nothing). No CPU check and no
    /// branch per word (issue #22: 16 instructions of every free, now 7).
    #[inline(always)]
    pub(crate) fn owner_clean(&self) -> bool {
        #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
        {
            let any: u64;
            // SAFETY: `self` is a valid, 64-byte aligned descriptor; the
            // loads stay inside its first 40 bytes (`pair`, `data`, `link`
            // at 0..32, `tag` at 36: the layout assertion below), every one
            // aligned to its size.
            unsafe {
                core::arch::asm!(
                    "mov {a}, qword ptr [{p}]",
                    "or {a}, qword ptr [{p} + 8]",
                    "or {a}, qword ptr [{p} + 16]",
                    "or {a}, qword ptr [{p} + 24]",
                    "mov {b:e}, dword ptr [{p} + 36]",
                    "or {a}, {b}",
                    p = in(reg) self as *const PageDesc,
                    a = out(reg) any,
                    b = out(reg) _,
                    options(nostack, readonly),
                );
            }
            any == 0
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
        {
            self.pair.load(Ordering::Relaxed) == DWord::new(0, 0)
                && self.data.load(Ordering::Relaxed) | self.link.load(Ordering::Relaxed) == 0
                && self.tag.load(Ordering::Relaxed) == 0
        }
    }

    /// The owner words' reset of a block coming back to the free lists
    /// (`free_one`): stores only if the holder left a word set (a plain
    /// page user never does; SLUB and pcp do). [Linux differs]: the kernel
    /// clears `page->private` when it hands a page out (`post_alloc_hook`)
    /// and trusts the holder to have left the rest clean at free
    /// (`free_page_is_bad` when page checks are on); here the free clears
    /// what its holder left, and the allocation stores nothing.
    #[inline(always)]
    pub(crate) fn clear_owner_for_free(&self) {
        if !self.owner_clean() {
            self.reset_owner_but_prev();
        }
    }

    /// The owner words' reset but for `prev`.
    #[inline(always)]
    pub(crate) fn reset_owner_but_prev(&self) {
        clear_pair(&self.pair);
        self.data.store(0, Ordering::Relaxed);
        self.link.store(0, Ordering::Relaxed);
        self.tag.store(0, Ordering::Relaxed);
    }

    /// The owner view of this descriptor.
    #[inline(always)]
    pub(crate) fn owner(&self) -> &Owner {
        // SAFETY: `Owner` is `repr(transparent)` over `PageDesc`.
        unsafe { &*(self as *const PageDesc as *const Owner) }
    }
}

/// Stores `(0, 0)` into `pair`, relaxed: the owner words' reset of every
/// allocation. On x86-64 with SSE registers (not loom, not miri; not
/// `x86_64-unknown-none`, whose code keeps off them) and AVX, where a 16-byte
/// aligned `vmovdqa` is single-copy atomic (Intel, AMD and Zhaoxin
/// guarantee it, and portable-atomic's 128-bit store is this instruction
/// there), one inline store behind one load of a cached CPU check, instead
/// of portable-atomic's dispatch through a function pointer (issue #22:
/// about 9 instructions of an order-0 alloc + free); elsewhere, and on
/// x86-64 without AVX, portable-atomic's store.
#[inline(always)]
fn clear_pair(pair: &AtomicDWord) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(loom), not(miri)))]
    if x86_avx::known_atomic() {
        // SAFETY: `pair` is 16-byte aligned (`AtomicDWord` is `align(16)`,
        // its value at offset 0) and valid for writes through its atomic;
        // with AVX the aligned 16-byte store is one atomic access, as
        // portable-atomic's own store of an `AtomicU128` (the same
        // instruction), so it races with nothing the atomic API allows.
        unsafe {
            core::arch::asm!(
                "vpxor {z}, {z}, {z}",
                "vmovdqa xmmword ptr [{p}], {z}",
                p = in(reg) pair as *const AtomicDWord,
                z = out(xmm_reg) _,
                options(nostack, preserves_flags),
            );
        }
        return;
    }
    clear_pair_slow(pair);
}

/// [`clear_pair`] before the CPU check or without AVX: checks (once), then
/// stores. `extern "C"`: it cannot unwind (a panic would abort; nothing
/// here panics), so the allocation that calls it under the zone lock needs
/// no unwinding path that drops the zone guard, and keeps the guard in
/// registers (issue #22: four stores of every allocation).
#[cold]
#[inline(never)]
extern "C" fn clear_pair_slow(pair: &AtomicDWord) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(loom), not(miri)))]
    if x86_avx::detect() {
        return clear_pair(pair);
    }
    pair.store(DWord::new(0, 0), Ordering::Relaxed);
}

/// Whether this x86-64 CPU (and OS) supports AVX, checked once: the
/// condition under which portable-atomic stores an `AtomicU128` with one
/// `vmovdqa` (CPUID.1:ECX.AVX, OSXSAVE and XCR0's SSE and AVX state).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(loom), not(miri)))]
mod x86_avx {
    use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

    /// 0: not checked yet; 1: no; 2: yes.
    static AVX: AtomicU8 = AtomicU8::new(0);

    /// Whether a 16-byte aligned `vmovdqa` store is known to be atomic
    /// here (false: not checked yet, or no AVX; then [`detect`]).
    #[inline(always)]
    pub(super) fn known_atomic() -> bool {
        AVX.load(Relaxed) == 2
    }

    /// Whether a 16-byte aligned `vmovdqa` store is atomic here, checked
    /// with `cpuid` and `xgetbv` the first time.
    #[cold]
    pub(super) fn detect() -> bool {
        match AVX.load(Relaxed) {
            2 => return true,
            1 => return false,
            _ => {}
        }
        let ecx: u32;
        // SAFETY: `cpuid` exists on every x86-64 CPU (outside SGX
        // enclaves, which portable-atomic's detection does not support
        // either); rbx, reserved by LLVM, is saved in a scratch register.
        unsafe {
            core::arch::asm!(
                "mov {t}, rbx",
                "cpuid",
                "mov rbx, {t}",
                t = out(reg) _,
                inout("eax") 1u32 => _,
                inout("ecx") 0u32 => ecx,
                out("edx") _,
                options(nostack, preserves_flags),
            );
        }
        let bit = |b: u32| ecx & (1 << b) != 0;
        // XSAVE and OSXSAVE: `xgetbv` is available; then XCR0 must enable
        // the SSE and AVX state.
        let avx = bit(26) && bit(27) && bit(28) && {
            let xcr0: u32;
            // SAFETY: OSXSAVE is set, so `xgetbv` with ECX = 0 is allowed.
            unsafe {
                core::arch::asm!(
                    "xgetbv",
                    in("ecx") 0u32,
                    out("eax") xcr0,
                    out("edx") _,
                    options(nostack, nomem, preserves_flags),
                );
            }
            xcr0 & 6 == 6
        };
        AVX.store(if avx { 2 } else { 1 }, Relaxed);
        avx
    }
}

/// The owner words of an allocated block: room in its head descriptor for
/// whoever holds the block, reachable from any address inside it
/// ([`Buddy::owner_of`](crate::Buddy::owner_of)).
///
/// # Ownership rule
///
/// **The owner words belong to whoever holds the allocated block**, from
/// the allocation that handed it out to the free that returns it. The buddy
/// clears them (all zero, tag 0) when it hands a block out and never writes
/// them while the block is allocated (it reads one thing: on a free, a tag
/// of the form [`PCP_TAG`] means the block sits on a per-CPU list, and the
/// free is refused); after the free they are the
/// buddy's again and their contents are lost. A holder that passes the block
/// on (pcp handing a page to SLUB) passes the words with it; the next holder
/// must not assume them zero unless the previous holder promised so
/// ([`reset`](Self::reset)).
///
/// Uses in this crate family:
///
/// | user | `pair` (16-byte aligned) | `data` | `link` | `prev` | `tag` |
/// |---|---|---|---|---|---|
/// | pcp, while a page sits on a per-CPU list | — | prev link | next link | — | list id ([`PCP_TAG`] form) |
/// | SLUB slab | `freelist`, `counters` (double-word CAS) | the cache's id | partial-list next link | partial-list prev link | "slab" |
/// | SLUB large kmalloc | — | size | — | — | "large" |
/// | SLUB sheaf page (its contents hold the object pointers) | — | — | — | — | "sheaf" |
///
/// Everything is atomic, so sharing `&Owner` is always memory safe; the rule
/// above is about meaning, not soundness.
///
/// ```
/// use buddy::{AllocFlags, Order};
/// use core::sync::atomic::Ordering::Relaxed;
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB heap, as in `Buddy`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// let b = heap.alloc_block(Order::new(1).unwrap(), AllocFlags::NONE).unwrap();
/// let o = b.owner;
/// assert_eq!(o.block(), Some(b.page.ptr));
/// assert_eq!(o.order(), b.page.order.into());
/// // A slab-style use: a tag for the kind, a word for the owner's id.
/// o.tag().store(0x51ab, Relaxed);
/// o.data().store(7, Relaxed);
/// // Found again from an address in the block's second page.
/// let again = heap.owner_of(b.page.ptr.as_ptr().wrapping_add(4096)).unwrap().owner;
/// assert_eq!((again.tag().load(Relaxed), again.data().load(Relaxed)), (0x51ab, 7));
/// o.reset();
/// assert_eq!(o.tag().load(Relaxed), 0);
/// // SAFETY: our block, freed once.
/// unsafe { heap.free_pages(b.page.ptr, b.page.order) };
/// ```
#[repr(transparent)]
pub struct Owner(PageDesc);

impl Owner {
    /// The 16-byte-aligned double word (SLUB: `freelist`, `counters`),
    /// updated by [`AtomicDWord::compare_exchange`].
    #[inline(always)]
    pub fn pair(&self) -> &AtomicDWord {
        &self.0.pair
    }
    /// A word (SLUB: the cache's id; pcp: the prev link).
    #[inline(always)]
    pub fn data(&self) -> &AtomicUsize {
        &self.0.data
    }
    /// A word (SLUB, pcp: a list link).
    #[inline(always)]
    pub fn link(&self) -> &AtomicUsize {
        &self.0.link
    }
    /// A third word (SLUB: the partial-list prev link). The buddy uses it
    /// as a free-list link while the block is free.
    #[inline(always)]
    pub fn prev(&self) -> &AtomicUsize {
        &self.0.prev
    }
    /// A small tag for the block's kind (0 as handed out), so e.g. `kfree`
    /// can tell a slab from a large allocation.
    #[inline(always)]
    pub fn tag(&self) -> &AtomicU32 {
        &self.0.tag
    }
    /// The first byte of the block these words describe (set by the buddy
    /// when the block was handed out).
    #[inline(always)]
    pub fn block(&self) -> Option<NonNull<u8>> {
        NonNull::new(self.0.aux.load(Ordering::Acquire))
    }
    /// The order of the block while it is allocated (`None` if the
    /// descriptor does not head an allocated block).
    #[inline(always)]
    pub fn order(&self) -> Option<Order> {
        let s = self.0.state.load(Ordering::Acquire);
        if kind(s) == KIND_ALLOC {
            Some(order_of(s))
        } else {
            None
        }
    }
    /// Clears all owner words and the tag.
    #[inline(always)]
    pub fn reset(&self) {
        self.0.reset_owner()
    }
}

impl core::fmt::Debug for Owner {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Owner")
            .field("block", &self.block())
            .field("order", &self.order())
            .field("pair", &self.pair().load(Ordering::Relaxed))
            .field("data", &self.data().load(Ordering::Relaxed))
            .field("link", &self.link().load(Ordering::Relaxed))
            .field("prev", &self.prev().load(Ordering::Relaxed))
            .field("tag", &self.tag().load(Ordering::Relaxed))
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// `owner_clean` sees every owner word (both halves of `pair`, `data`,
    /// `link`, `tag`) and none of the buddy's (`state`, `next`, `prev`,
    /// `aux`): its word loads (issue #22) at the right offsets.
    #[test]
    fn owner_clean_sees_each_owner_word_and_only_those() {
        let d = PageDesc::new();
        assert!(d.owner_clean());
        type Set<'a> = &'a dyn Fn(&PageDesc, bool);
        let owner: [Set<'_>; 5] = [
            &|d, on| {
                d.pair
                    .store(DWord::new(usize::from(on), 0), Ordering::Relaxed)
            },
            &|d, on| {
                d.pair
                    .store(DWord::new(0, usize::from(on) << 63), Ordering::Relaxed)
            },
            &|d, on| d.data.store(usize::from(on), Ordering::Relaxed),
            &|d, on| d.link.store(usize::from(on) << 40, Ordering::Relaxed),
            &|d, on| d.tag.store(u32::from(on) << 31, Ordering::Relaxed),
        ];
        for (i, set) in owner.iter().enumerate() {
            set(&d, true);
            assert!(!d.owner_clean(), "owner word {i} set, yet clean");
            set(&d, false);
            assert!(d.owner_clean(), "owner word {i} cleared, yet not clean");
        }
        d.state.store(u32::MAX, Ordering::Relaxed);
        d.aux.store(ptr::dangling_mut(), Ordering::Relaxed);
        // SAFETY: a local descriptor on no list.
        unsafe {
            d.set_next(ptr::dangling_mut());
            d.set_prev(ptr::dangling_mut());
        }
        assert!(d.owner_clean(), "the buddy's words are not owner words");
        d.reset_owner_but_prev();
        assert!(d.owner_clean());
    }
}
