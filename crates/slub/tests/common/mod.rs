//! Helpers shared by slub's RSS tests (`trim.rs`, `idle_shrink.rs`).

use std::alloc::{GlobalAlloc, Layout};

use slub::GlobalSlub;

/// Allocates `per_size` bytes of each of 64 B, 512 B, 2 KiB and 8 KiB
/// objects from `h`, each written, and returns them with their layouts.
pub fn fill(h: &GlobalSlub, per_size: usize) -> Vec<(*mut u8, Layout)> {
    let mut v = Vec::new();
    for size in [64usize, 512, 2048, 8192] {
        let l = Layout::from_size_align(size, 8).unwrap();
        for _ in 0..per_size / size {
            // SAFETY: a valid layout.
            let p = unsafe { h.alloc(l) };
            assert!(!p.is_null());
            // SAFETY: ours.
            unsafe { p.write_bytes(0x5a, size) };
            v.push((p, l));
        }
    }
    v
}

/// Frees what [`fill`] returned.
pub fn free_all(h: &GlobalSlub, v: Vec<(*mut u8, Layout)>) {
    for (p, l) in v {
        // SAFETY: from `alloc` with this layout, freed once.
        unsafe { h.dealloc(p, l) };
    }
}
