//! `allocator_api2::alloc::Allocator` for `&Buddy` and `&GlobalBuddy`
//! (feature `allocator-api2`): page-granular, through their `GlobalAlloc`
//! impls (a layout is rounded up to a naturally aligned block; `realloc`
//! stays in place while the order is the same; `allocate_zeroed` takes a
//! known-zero block, cleared only when none is).
//!
//! ```
//! use allocator_api2::vec::Vec;
//! static HEAP: buddy::GlobalBuddy = buddy::GlobalBuddy::new();
//! // Vec growth: in place up to the block (4 KiB holds 512 u64s), then a
//! // larger block.
//! let mut v: Vec<u64, _> = Vec::with_capacity_in(10, &HEAP);
//! let first = v.as_ptr();
//! v.extend(0..500);
//! assert_eq!(v.as_ptr(), first);
//! v.extend(500..5_000);
//! assert_eq!(v[4_999], 4_999);
//! ```

local_lock::allocator_via_global_alloc!(impl[P: local_lock::Platform] for crate::buddy::Buddy<P>);

#[cfg(all(feature = "std", not(loom)))]
local_lock::allocator_via_global_alloc!(impl[] for crate::global::GlobalBuddy);
