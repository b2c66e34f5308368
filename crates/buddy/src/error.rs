//! Errors: bad frees (caught by the descriptor check every free does) and
//! rejected memory regions.

use core::fmt;

use crate::types::{Order, ZoneId};

/// A free the allocator refused. The allocator's state is untouched.
/// [`free_pages`](crate::Buddy::free_pages) panics with this as the message
/// (`buddy: bad free of 0x…: …`); [`try_free_pages`](crate::Buddy::try_free_pages)
/// returns it.
///
/// ```
/// use buddy::{AllocFlags, FreeErrorKind, FreeFlags, Order};
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB heap, as in `Buddy`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// let p = heap.alloc_pages(Order::new(1).unwrap(), AllocFlags::NONE).unwrap();
/// // SAFETY: a wrong order is refused by the check, nothing is freed.
/// let e = unsafe { heap.try_free_pages(p.ptr, Order::ZERO, FreeFlags::NONE) }.unwrap_err();
/// assert_eq!((e.addr, e.order), (p.addr(), 0));
/// assert_eq!(e.kind, FreeErrorKind::WrongOrder { actual: p.order });
/// assert!(e.to_string().starts_with("buddy: bad free of 0x"));
/// // SAFETY: our block, of its order, freed once.
/// unsafe { heap.try_free_pages(p.ptr, p.order, FreeFlags::NONE) }.unwrap();
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FreeError {
    /// The address passed to the free.
    pub addr: usize,
    /// The order passed to the free (raw: it may be out of range).
    pub order: u8,
    /// What is wrong.
    pub kind: FreeErrorKind,
}

/// What is wrong with a free.
///
/// ```
/// use buddy::{AllocFlags, FreeErrorKind, FreeFlags, Order};
/// use core::ptr::NonNull;
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB heap, as in `Buddy`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// let p = heap.alloc_pages(Order::new(1).unwrap(), AllocFlags::NONE).unwrap();
/// let second = NonNull::new(p.ptr.as_ptr().wrapping_add(4096)).unwrap();
/// // SAFETY (all three): refused frees change nothing.
/// let e = unsafe { heap.try_free_pages(second, Order::ZERO, FreeFlags::NONE) }.unwrap_err();
/// assert_eq!(e.kind, FreeErrorKind::NotHead { head: p.addr(), order: p.order });
/// let mut outside = [0u8; 16];
/// let stack = NonNull::new(outside.as_mut_ptr()).unwrap();
/// let e = unsafe { heap.try_free_pages(stack, Order::ZERO, FreeFlags::NONE) }.unwrap_err();
/// assert!(matches!(e.kind, FreeErrorKind::Misaligned | FreeErrorKind::NotOwned));
/// // SAFETY: our block, freed once.
/// unsafe { heap.free_pages(p.ptr, p.order) };
/// // SAFETY: a double free is caught by the descriptor check.
/// let e = unsafe { heap.try_free_pages(p.ptr, p.order, FreeFlags::NONE) }.unwrap_err();
/// assert!(matches!(e.kind, FreeErrorKind::DoubleFree { .. }));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FreeErrorKind {
    /// The order is above the allocator's `max_order`.
    BadOrder,
    /// The address is not aligned to the page size, or not to the block
    /// size of the order (no block of that order can start there).
    Misaligned,
    /// The address lies in no span of this allocator.
    NotOwned,
    /// The address is managed but lies in no allocated block (a hole, the
    /// memmap, or memory never handed out).
    NotAllocated,
    /// The address lies inside the allocated block at `head`, but is not
    /// its head.
    NotHead {
        /// The block's first byte.
        head: usize,
        /// The block's order.
        order: Order,
    },
    /// The address heads an allocated block of another order.
    WrongOrder {
        /// The block's real order.
        actual: Order,
    },
    /// The block is already free (double free): the address heads, or lies
    /// inside, the free block at `block`.
    DoubleFree {
        /// The free block's first byte.
        block: usize,
        /// The free block's order.
        order: Order,
    },
    /// Freed as still zero, but it does not read as zero (checked in test
    /// and `invariants` builds only).
    NotZero,
    /// The block heads an allocated block that sits on a per-CPU page list
    /// (its owner tag is [`PCP_TAG`](crate::PCP_TAG)): the pcp holds it, not
    /// the caller (a double free that has not reached the buddy yet).
    OnPcpList,
    /// A bulk free for one zone got a block of another zone.
    WrongZone {
        /// The zone the bulk free was for.
        expected: ZoneId,
        /// The block's zone.
        actual: ZoneId,
    },
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "buddy: bad free of {:#x} (order {}): ",
            self.addr, self.order
        )?;
        match self.kind {
            FreeErrorKind::BadOrder => f.write_str("order above max_order"),
            FreeErrorKind::Misaligned => {
                f.write_str("misaligned: not the start of a block of this order")
            }
            FreeErrorKind::NotOwned => f.write_str("address not owned by this allocator"),
            FreeErrorKind::NotAllocated => {
                f.write_str("not allocated: no allocated block contains this address")
            }
            FreeErrorKind::NotHead { head, order } => write!(
                f,
                "not a block head: inside the allocated block at {head:#x} ({order})"
            ),
            FreeErrorKind::WrongOrder { actual } => {
                write!(f, "wrong order: the block at this address is {actual}")
            }
            FreeErrorKind::DoubleFree { block, order } => write!(
                f,
                "double free: already in the free block at {block:#x} ({order})"
            ),
            FreeErrorKind::OnPcpList => f.write_str(
                "the page is on a per-CPU (pcp) list: the per-CPU lists hold it, not the caller (double free?)",
            ),
            FreeErrorKind::NotZero => f.write_str("freed as zero but does not read as zero"),
            FreeErrorKind::WrongZone { expected, actual } => write!(
                f,
                "wrong zone: block in zone {} freed in bulk to zone {}",
                actual.index(),
                expected.index()
            ),
        }
    }
}

/// Why a region or span was not added (nothing was added).
///
/// ```
/// use buddy::{Buddy, Config, RegionError};
/// use local_lock::std_platform::StdCpu;
/// // Memory declared first: it outlives the allocator.
/// let (mut mem, mut tiny) = (vec![0u8; 1 << 20], [0u8; 100]);
/// let heap = Buddy::new(StdCpu, Config::new(4096, 4));
/// // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// // SAFETY: refused, nothing is added.
/// let again = unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) };
/// assert_eq!(again, Err(RegionError::Overlap));
/// // SAFETY: as for `mem`; less than a page is refused.
/// let small = unsafe { heap.add_region(tiny.as_mut_ptr(), tiny.len(), true) };
/// assert_eq!(small, Err(RegionError::TooSmall));
/// assert_eq!(RegionError::Overlap.to_string().split(':').next(), Some("buddy"));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RegionError {
    /// After trimming to whole pages (and carving a memmap) nothing is
    /// left.
    TooSmall,
    /// The span table is full ([`MAX_SPANS`](crate::MAX_SPANS)).
    TooManySpans,
    /// The span overlaps an existing span, or the region overlaps memory
    /// added before (or a memmap).
    Overlap,
    /// The region lies in a span's reserved but not yet populated part.
    Unpopulated,
    /// A span start or length is not page aligned, or its memmap is not
    /// aligned for descriptors or too small.
    BadSpan,
    /// The region wraps around the address space.
    Overflow,
    /// The node id is at or above [`MAX_NUMNODES`](crate::MAX_NUMNODES), or
    /// the region lies in a span of another node (a span's pages are all of
    /// one node).
    BadNode,
}

impl fmt::Display for RegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RegionError::TooSmall => "buddy: region too small (nothing left after trimming)",
            RegionError::TooManySpans => "buddy: too many spans",
            RegionError::Overlap => {
                "buddy: overlap: the span or region overlaps an existing span, memory added before, or a memmap"
            }
            RegionError::Unpopulated => "buddy: region in an unpopulated part of a span",
            RegionError::BadSpan => "buddy: span or memmap misaligned or too small",
            RegionError::Overflow => "buddy: region wraps the address space",
            RegionError::BadNode => {
                "buddy: bad node: node id >= MAX_NUMNODES, or the region lies in another node's span"
            }
        })
    }
}

impl core::error::Error for FreeError {}

impl core::error::Error for RegionError {}
