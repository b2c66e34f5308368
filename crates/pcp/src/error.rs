//! The pcp's error types: a refused `(batch, high)` pair, a refused drain,
//! a rejected free.

use core::fmt;

use buddy::Order;

use crate::sizing::MAX_HIGH;

/// Why [`Pcp::set_batch_high`](crate::Pcp::set_batch_high) refused a `(batch, high)` pair.
///
/// ```
/// use pcp::{BatchHighError, MAX_HIGH};
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB buddy and per-thread lists over it (batch 8, high 32), as in
/// # // `Pcp`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// # let pcp = pcp::Pcp::<_, local_lock::std_platform::PerThread>::new_tuned(
/// #     &heap,
/// #     buddy::ZoneId::new(0),
/// #     local_lock::std_platform::PerThread,
/// #     pcp::Policy::Trylock,
/// #     Some((8, 32)),
/// # );
/// assert_eq!(pcp.set_batch_high(Some((0, 16))), Err(BatchHighError::ZeroBatch));
/// assert_eq!(
///     pcp.set_batch_high(Some((16, 8))),
///     Err(BatchHighError::BatchAboveHigh { batch: 16, high: 8 })
/// );
/// assert_eq!(
///     pcp.set_batch_high(Some((1, MAX_HIGH + 1))),
///     Err(BatchHighError::HighTooLarge { high: MAX_HIGH + 1 })
/// );
/// assert!(matches!(pcp.set_high_range(4, 64, 32), Err(BatchHighError::HighMinAboveMax { .. })));
/// assert_eq!(pcp.batch_high(), (8, 32), "nothing changed");
/// // `high` is raised to two batches.
/// pcp.set_batch_high(Some((16, 20))).unwrap();
/// assert_eq!(pcp.batch_high(), (16, 32));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchHighError {
    /// `batch` is 0: a refill would bring nothing.
    ZeroBatch,
    /// `batch` is above `high`: a refill alone would overflow the list.
    BatchAboveHigh {
        /// The batch asked for.
        batch: usize,
        /// The high asked for.
        high: usize,
    },
    /// `high` (at least `2 * batch`) is above [`MAX_HIGH`].
    HighTooLarge {
        /// The high asked for (after raising it to `2 * batch`).
        high: usize,
    },
    /// [`Pcp::set_high_range`](crate::Pcp::set_high_range): `high_max` is
    /// below `high_min` (after raising it to `2 * batch`).
    HighMinAboveMax {
        /// The high_min asked for (after the rounding).
        high_min: usize,
        /// The high_max asked for.
        high_max: usize,
    },
}

impl fmt::Display for BatchHighError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BatchHighError::ZeroBatch => f.write_str("pcp: set_batch_high: batch 0 refused"),
            BatchHighError::BatchAboveHigh { batch, high } => write!(
                f,
                "pcp: set_batch_high: batch {batch} above high {high} refused"
            ),
            BatchHighError::HighTooLarge { high } => write!(
                f,
                "pcp: set_batch_high: high {high} above the most a CPU's lists may hold ({MAX_HIGH} pages) refused"
            ),
            BatchHighError::HighMinAboveMax { high_min, high_max } => write!(
                f,
                "pcp: set_high_range: high_max {high_max} below high_min {high_min} refused"
            ),
        }
    }
}

impl core::error::Error for BatchHighError {}

/// Why a drain of a CPU did not happen. Only under `IrqSafe` and
/// `TaskOnly`: `Trylock`'s lists are behind real per-CPU spin locks that
/// any CPU takes (Linux 6.0+).
///
/// ```
/// use buddy::{AllocFlags, FreeFlags, Order};
/// use local_lock::Platform;
/// use pcp::DrainError;
/// use std::sync::mpsc;
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB buddy and per-thread lists over it (batch 8, high 32), as in
/// # // `Pcp`'s example, under `IrqSafe`.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// # let pcp = pcp::Pcp::<_, local_lock::std_platform::PerThread>::new_tuned(
/// #     &heap,
/// #     buddy::ZoneId::new(0),
/// #     local_lock::std_platform::PerThread,
/// #     pcp::Policy::IrqSafe,
/// #     Some((8, 32)),
/// # );
/// let (slot_tx, slot_rx) = mpsc::channel();
/// let (drain_tx, drain_rx) = mpsc::channel::<()>();
/// let pcp = &pcp;
/// std::thread::scope(|s| {
///     let worker = s.spawn(move || {
///         // Leaves pages on this thread's lists, then waits.
///         let p = pcp.alloc(Order::ZERO, AllocFlags::NONE).unwrap();
///         // SAFETY: our page, freed once.
///         unsafe { pcp.free(p.ptr, p.order, FreeFlags::NONE) };
///         slot_tx.send(pcp.platform().current_cpu()).unwrap();
///         drain_rx.recv().unwrap();
///         pcp.drain_local()
///     });
///     // A live thread's lists are its own: ask it to drain them itself.
///     let slot = slot_rx.recv().unwrap();
///     assert_eq!(pcp.drain_cpu(slot), Err(DrainError::NotAllowed));
///     drain_tx.send(()).unwrap();
///     assert_eq!(worker.join().unwrap(), 8, "the batch the worker's refill took");
/// });
/// assert_eq!(heap.total_free_pages(), heap.total_managed_pages());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainError {
    /// The platform does not let this CPU touch that CPU's lists (pinned
    /// kernel CPUs, live per-thread slots, under `IrqSafe` or `TaskOnly`):
    /// drain it on that CPU.
    NotAllowed,
}

impl fmt::Display for DrainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DrainError::NotAllowed => f.write_str(
                "pcp: drain refused: this CPU may not reach that CPU's lists (drain it on that CPU)",
            ),
        }
    }
}

impl core::error::Error for DrainError {}

/// A rejected free, in the buddy's shape ([`buddy::FreeError`]): the
/// address, the order it was freed with, and what its descriptor says.
/// Nothing changed.
///
/// ```
/// use buddy::{AllocFlags, FreeFlags, Order};
/// use pcp::BadFreeKind;
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB buddy and per-thread lists over it (batch 8, high 32), as in
/// # // `Pcp`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// # let pcp = pcp::Pcp::<_, local_lock::std_platform::PerThread>::new_tuned(
/// #     &heap,
/// #     buddy::ZoneId::new(0),
/// #     local_lock::std_platform::PerThread,
/// #     pcp::Policy::Trylock,
/// #     Some((8, 32)),
/// # );
/// let p = pcp.alloc(Order::ZERO, AllocFlags::NONE).unwrap();
/// // SAFETY: our page, freed once.
/// unsafe { pcp.free(p.ptr, p.order, FreeFlags::NONE) };
/// // SAFETY: a double free is caught (the page sits on this CPU's list);
/// // nothing changes.
/// let e = unsafe { pcp.try_free(p.ptr, p.order, FreeFlags::NONE) }.unwrap_err();
/// assert_eq!((e.addr, e.order, e.kind), (p.addr(), p.order, BadFreeKind::OnPcpList));
/// assert!(e.to_string().starts_with("pcp: double free of 0x"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadFree {
    /// The address freed.
    pub addr: usize,
    /// The order it was freed with.
    pub order: Order,
    /// What is wrong.
    pub kind: BadFreeKind,
}

/// What is wrong with a pcp free (what the block's descriptor says).
///
/// ```
/// use buddy::{AllocFlags, FreeFlags, Order};
/// use core::ptr::NonNull;
/// use pcp::BadFreeKind;
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB buddy and per-thread lists over it (batch 8, high 32), as in
/// # // `Pcp`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// # let pcp = pcp::Pcp::<_, local_lock::std_platform::PerThread>::new_tuned(
/// #     &heap,
/// #     buddy::ZoneId::new(0),
/// #     local_lock::std_platform::PerThread,
/// #     pcp::Policy::Trylock,
/// #     Some((8, 32)),
/// # );
/// let p = pcp.alloc(Order::new(1).unwrap(), AllocFlags::NONE).unwrap();
/// let inside = NonNull::new(p.ptr.as_ptr().wrapping_add(4096)).unwrap();
/// let mut local = [0u64; 2];
/// let foreign = NonNull::from(&mut local).cast::<u8>();
/// // SAFETY (all three): refused frees change nothing.
/// unsafe {
///     let e = pcp.try_free(inside, Order::ZERO, FreeFlags::NONE).unwrap_err();
///     assert_eq!(e.kind, BadFreeKind::NotHead { head: p.addr(), order: p.order });
///     let e = pcp.try_free(p.ptr, Order::ZERO, FreeFlags::NONE).unwrap_err();
///     assert_eq!(e.kind, BadFreeKind::WrongOrder { actual: p.order });
///     let e = pcp.try_free(foreign, Order::ZERO, FreeFlags::NONE).unwrap_err();
///     assert_eq!(e.kind, BadFreeKind::NotAllocated);
/// }
/// // SAFETY: our block, of its order, freed once.
/// unsafe { pcp.try_free(p.ptr, p.order, FreeFlags::NONE) }.unwrap();
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadFreeKind {
    /// No allocated block of this allocator contains the address (foreign,
    /// or already free in the buddy).
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
    /// The page is already on a per-CPU list (a double free that has not
    /// reached the buddy yet).
    OnPcpList,
}

impl fmt::Display for BadFree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (addr, order) = (self.addr, self.order);
        match self.kind {
            BadFreeKind::NotAllocated => write!(
                f,
                "pcp: bad free of {addr:#x} ({order}): not an allocated block of this allocator (foreign, or already free in the buddy)"
            ),
            BadFreeKind::NotHead { head, order: o } => {
                write!(f, "pcp: bad free of {addr:#x} ({order}): not a block head (inside the block at {head:#x}, {o})")
            }
            BadFreeKind::WrongOrder { actual } => write!(f, "pcp: bad free of {addr:#x}: freed as {order} but allocated as {actual}"),
            BadFreeKind::OnPcpList => write!(f, "pcp: double free of {addr:#x} ({order}): the page is already on a per-CPU list"),
        }
    }
}

impl core::error::Error for BadFree {}
