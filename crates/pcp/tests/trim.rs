//! `GlobalPcp::trim`: pages freed through the per-CPU lists go back to the
//! buddy and its free blocks back to the OS (issue #17).

use std::alloc::{GlobalAlloc, Layout};

use pcp::GlobalPcp;

#[test]
fn trim_drains_and_purges() {
    let h = GlobalPcp::new();
    // The trim alone: the automatic purges (decay, resident cap) paused.
    h.pcp().source().set_decay_paused(true);
    let mut v = Vec::new();
    // 32 MiB in 16 KiB blocks (the per-CPU lists' orders) and 8 x 4 MiB.
    for (size, n) in [(16 << 10, 2048), (4 << 20, 8)] {
        let l = Layout::from_size_align(size, 4096).unwrap();
        for _ in 0..n {
            // SAFETY: a valid layout.
            let p = unsafe { h.alloc(l) };
            assert!(!p.is_null());
            // SAFETY: ours.
            unsafe { p.write_bytes(0x5a, size) };
            v.push((p, l));
        }
    }
    for (p, l) in v {
        // SAFETY: from `alloc` with this layout.
        unsafe { h.dealloc(p, l) };
    }
    let purged = h.trim();
    assert!(purged >= 64 << 20, "purged {purged}");
    // The report shows the memory returned.
    let report = format!("{}", h.pcp().report());
    let want = format!(
        "purge {} purged_bytes {purged}",
        h.buddy().stat(buddy::Stat::PURGE)
    );
    assert!(report.contains(&want), "{want:?} not in\n{report}");
    eprintln!("{}", report.lines().nth(1).unwrap_or(""));
    assert_eq!(h.trim(), 0);
    // Served again as known zero.
    let l = Layout::from_size_align(16 << 10, 4096).unwrap();
    // SAFETY: a valid layout.
    let p = unsafe { h.alloc_zeroed(l) };
    // SAFETY: ours.
    assert!(unsafe { std::slice::from_raw_parts(p, 16 << 10) }
        .iter()
        .all(|&b| b == 0));
    // SAFETY: from `alloc_zeroed` with this layout.
    unsafe { h.dealloc(p, l) };
}
