//! Known-zero tracking (PG_zero) at the edges of the allocator: which part
//! of a block a zeroed request must clear, and the checked builds'
//! verification that blocks handed out or freed as zero read as zero. The
//! bits themselves are kept by the zone's free lists (`crate::zone`).

#[cfg(any(test, feature = "invariants"))]
use core::ptr::NonNull;

use local_lock::Platform;

use super::Buddy;
use crate::desc::ZERO_FULL;
use crate::desc::{ZERO_HI, ZERO_LO};
#[cfg(any(test, feature = "invariants"))]
use crate::error::{FreeError, FreeErrorKind};
use crate::types::Order;

/// The range `(offset, len)` of an order-`order` block to clear for a
/// zeroed request, given which halves are known zero: only the non-zero
/// part.
#[inline(always)]
pub(super) fn clear_range(zero: u32, order: Order, page_shift: u32) -> (usize, usize) {
    let size = order.pages() << page_shift;
    match zero {
        ZERO_FULL => (0, 0),
        ZERO_LO if order > Order::ZERO => (size / 2, size / 2),
        ZERO_HI if order > Order::ZERO => (0, size / 2),
        _ => (0, size),
    }
}

impl<P: Platform> Buddy<P> {
    /// Checked builds: the parts of a block handed out as known zero really
    /// read as zero.
    #[cfg(any(test, feature = "invariants"))]
    pub(super) fn verify_known_zero(&self, p: *mut u8, zero: u32, order: Order) {
        let size = self.cfg.block_size(order);
        let (off, len) = match zero {
            ZERO_FULL => (0, size),
            ZERO_LO if order > Order::ZERO => (0, size / 2),
            ZERO_HI if order > Order::ZERO => (size / 2, size / 2),
            _ => return,
        };
        // SAFETY: the block is ours and `[off, off + len)` lies in it.
        let s = unsafe { core::slice::from_raw_parts(p.add(off), len) };
        assert!(
            s.iter().all(|&b| b == 0),
            "buddy: block at {p:p} ({order}) marked zero (bits {zero:#x}) holds non-zero bytes"
        );
    }

    #[cfg(any(test, feature = "invariants"))]
    pub(super) fn verify_zero_free(&self, ptr: NonNull<u8>, order: Order) -> Result<(), FreeError> {
        let size = self.cfg.block_size(order);
        // SAFETY: the caller holds the block (validated as allocated).
        let s = unsafe { core::slice::from_raw_parts(ptr.as_ptr(), size) };
        if s.iter().all(|&b| b == 0) {
            Ok(())
        } else {
            Err(FreeError {
                addr: ptr.as_ptr() as usize,
                order: order.get(),
                kind: FreeErrorKind::NotZero,
            })
        }
    }
}
