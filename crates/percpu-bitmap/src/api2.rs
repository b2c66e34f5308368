//! `allocator_api2::alloc::Allocator` for `&GlobalBitmap` (feature
//! `allocator-api2`), through its `GlobalAlloc` impl.
//!
//! ```
//! use allocator_api2::vec::Vec;
//! static HEAP: percpu_bitmap::GlobalBitmap = percpu_bitmap::GlobalBitmap::new();
//! let mut v: Vec<u16, _> = Vec::new_in(&HEAP);
//! v.extend(0..1000);
//! assert_eq!(v[999], 999);
//! ```

#[cfg(all(feature = "std", not(loom)))]
local_lock::allocator_via_global_alloc!(impl[] for crate::global::GlobalBitmap);
