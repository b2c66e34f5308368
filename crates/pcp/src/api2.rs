//! `allocator_api2::alloc::Allocator` for `&GlobalPcp` (feature
//! `allocator-api2`): page-granular, through its `GlobalAlloc` impl (the
//! per-CPU lists first, then the buddy; `allocate_zeroed` takes the zero
//! list's pages).
//!
//! ```
//! use allocator_api2::boxed::Box;
//! static PAGES: pcp::GlobalPcp = pcp::GlobalPcp::new();
//! let page = Box::new_in([0u8; 4096], &PAGES);
//! assert_eq!(page.as_ptr() as usize % 4096, 0, "a page is page aligned");
//! ```

#[cfg(all(feature = "std", not(loom)))]
local_lock::allocator_via_global_alloc!(impl[] for crate::global::GlobalPcp);
