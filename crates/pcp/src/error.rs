//! The pcp's error types: a refused `(batch, high)` pair, a refused drain,
//! a rejected free.

use core::fmt;

use buddy::Order;

use crate::sizing::MAX_HIGH;

/// Why [`Pcp::set_batch_high`](crate::Pcp::set_batch_high) refused a `(batch, high)` pair.
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

/// Why a drain of a CPU did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainError {
    /// The platform does not let this CPU touch that CPU's lists (pinned
    /// kernel CPUs, live per-thread slots): drain it on that CPU.
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
