//! The pcp's error types: a refused `(batch, high)` pair, a refused drain,
//! a rejected free.

use core::fmt;
use core::ptr::NonNull;

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
        }
    }
}

/// Why a drain of a CPU did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainError {
    /// The platform does not let this CPU touch that CPU's lists (pinned
    /// kernel CPUs, live per-thread slots): drain it on that CPU.
    NotAllowed,
}

/// A rejected free: the block and what its descriptor says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadFree {
    /// The address freed.
    pub ptr: NonNull<u8>,
    /// The order it was freed with.
    pub order: Order,
    /// The allocated block containing it (head, order), if any.
    pub found: Option<(NonNull<u8>, Order)>,
}

impl fmt::Display for BadFree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (ptr, order) = (self.ptr, self.order);
        match self.found {
            None => write!(
                f,
                "pcp: bad free of {ptr:p} ({order}): not an allocated block of this allocator (foreign, or already free in the buddy)"
            ),
            Some((head, o)) if head != ptr => {
                write!(f, "pcp: bad free of {ptr:p} ({order}): not a block head (inside the block at {head:p}, {o})")
            }
            Some((_, o)) if o != order => write!(f, "pcp: bad free of {ptr:p}: freed as {order} but allocated as {o}"),
            Some(_) => write!(f, "pcp: double free of {ptr:p} ({order}): the page is already on a per-CPU list"),
        }
    }
}
