//! Watermarks, atomic reserves, lowmem_reserve, zone constraints and the
//! zonelist fallback.

use std::vec::Vec;

use super::{o, Fx};
use crate::{AllocFlags, Config, Stat, Tunables, Watermarks, ZoneId, ZoneSpec, MAX_ZONES};

/// Two zones of 32 pages of 64 bytes (blocks of 16 pages), no min
/// reserve, `lowmem_reserve_ratio` 4: DMA keeps 8 pages from Normal's
/// requests.
pub(super) fn reserve_fixture() -> Fx {
    let page = 64;
    let block = page << 4;
    let t = Tunables {
        min_free_kbytes: Some(0),
        watermark_scale_factor: 10,
        lowmem_reserve_ratio: [4, 4, 4, 4],
    };
    Fx::build(block, 4, false, |base| {
        two_zone_cfg(page, 4, base + 2 * block, t)
    })
}

pub(super) fn two_zone_cfg(page: usize, max_order: u8, split: usize, t: Tunables) -> Config {
    Config::new(page, max_order)
        .with_zones(&[
            ZoneSpec {
                name: "DMA32",
                end: split,
            },
            ZoneSpec {
                name: "Normal",
                end: 0,
            },
        ])
        .with_tunables(t)
}

/// `min_free_kbytes = sqrt(lowmem_kbytes * 16)` clamped to 128; min split
/// by zone size; low/high `+ max(min/4, managed * 10 / 10000)`;
/// `lowmem_reserve` = upper zones' managed / ratio.
#[test]
fn kernel_formulas() {
    // 1 MiB of 4 KiB pages: lowmem 1024 KiB -> sqrt(16384) = 128 KiB = 32
    // pages; tmp = max(32/4, 256 * 10 / 10000) = 8.
    let fx = Fx::with(Config::new(4096, 4), 16, false);
    assert_eq!(fx.managed_pages(ZoneId::new(0)), 256);
    assert_eq!(
        fx.watermarks(ZoneId::new(0)),
        Watermarks {
            min: 32,
            low: 40,
            high: 48
        }
    );
    // Two zones of 128 pages: min 16 each, tmp 4.
    let block = 64 << 10;
    let fx2 = Fx::build(block, 16, false, |base| {
        two_zone_cfg(4096, 4, base + 8 * block, Tunables::KERNEL)
    });
    let z0 = ZoneId::new(0);
    let z1 = ZoneId::new(1);
    assert_eq!((fx2.managed_pages(z0), fx2.managed_pages(z1)), (128, 128));
    for z in [z0, z1] {
        assert_eq!(
            fx2.watermarks(z),
            Watermarks {
                min: 16,
                low: 20,
                high: 24
            }
        );
    }
    // Ratio 256: 128 / 256 = 0 pages kept.
    assert_eq!(fx2.zone_info(z0).lowmem_reserve, [0; MAX_ZONES]);
    fx2.set_tunables(Tunables {
        lowmem_reserve_ratio: [32, 32, 32, 32],
        ..Tunables::KERNEL
    });
    assert_eq!(fx2.zone_info(z0).lowmem_reserve[1], 4);
    assert_eq!(fx2.zone_info(z1).lowmem_reserve, [0; MAX_ZONES]);
    // A large scale factor dominates min/4.
    fx2.set_tunables(Tunables {
        watermark_scale_factor: 1000,
        ..Tunables::KERNEL
    });
    assert_eq!(
        fx2.watermarks(z0),
        Watermarks {
            min: 16,
            low: 28,
            high: 40
        }
    );
    // Explicit min_free_kbytes; the clamp upper bound of the default.
    fx.set_tunables(Tunables {
        min_free_kbytes: Some(256),
        ..Tunables::KERNEL
    });
    assert_eq!(fx.watermarks(ZoneId::new(0)).min, 64);
    assert_eq!(fx.tunables().min_free_kbytes, Some(256));
}

/// Ordinary requests stop at min; HIGH may use half of it; ATOMIC
/// (HIGH | NONBLOCK) a further quarter of the rest.
#[test]
fn atomic_requests_dip_below_min() {
    // 64 pages of 64 B; min_free_kbytes 1 = 16 pages.
    let fx = Fx::with(
        Config::new(64, 4).with_tunables(Tunables {
            min_free_kbytes: Some(1),
            ..Tunables::KERNEL
        }),
        4,
        false,
    );
    let z = ZoneId::new(0);
    assert_eq!(fx.watermarks(z).min, 16);
    let mut held = Vec::new();
    let mut take = |f: AllocFlags| {
        let mut n = 0;
        while let Some(p) = fx.alloc_pages(o(0), f) {
            held.push(p);
            n += 1;
        }
        n
    };
    assert_eq!(take(AllocFlags::NONE), 48, "plain stops at min (16 left)");
    assert!(!fx.watermark_ok(z, o(0), AllocFlags::NONE));
    assert!(fx.watermark_ok(z, o(0), AllocFlags::HIGH));
    assert_eq!(take(AllocFlags::HIGH), 8, "HIGH stops at min/2 (8 left)");
    assert_eq!(take(AllocFlags::NONBLOCK), 0, "NONBLOCK alone: 12 > 8 left");
    assert_eq!(take(AllocFlags::ATOMIC), 2, "ATOMIC stops at 8 - 8/4 = 6");
    assert_eq!(fx.nr_free_pages(z), 6);
    assert!(fx.stat(Stat::WATERMARK_FAIL) >= 4);
    // Order > 0 subtracts (2^order - 1): with 6 free an order-1 ATOMIC
    // needs 6 - 1 > 6: no.
    assert!(fx.alloc_pages(o(1), AllocFlags::ATOMIC).is_none());
    for p in held {
        // SAFETY: ours.
        unsafe { fx.free_pages(p.ptr, o(0)) };
    }
    fx.check_invariants();
    assert_eq!(fx.nr_free_pages(z), 64);
    // The order adjustment at the boundary: free 20, min 16: order 2
    // (20 - 3 = 17 > 16) passes, at 19 it does not.
    let mut held = Vec::new();
    for _ in 0..44 {
        held.push(fx.alloc_pages(o(0), AllocFlags::NONE).unwrap());
    }
    assert!(fx.watermark_ok(z, o(2), AllocFlags::NONE));
    held.push(fx.alloc_pages(o(0), AllocFlags::NONE).unwrap());
    assert!(!fx.watermark_ok(z, o(2), AllocFlags::NONE));
    assert!(fx.watermark_ok(z, o(0), AllocFlags::NONE));
    for p in held {
        // SAFETY: ours.
        unsafe { fx.free_pages(p.ptr, o(0)) };
    }
    fx.check_invariants();
}

/// Fallback from the highest allowed zone down, lowmem_reserve keeping part
/// of the lower zone from requests that could have used the upper one, and
/// a zone constraint (DMA: "below the split") that may use it.
#[test]
fn zonelist_fallback_and_lowmem_reserve() {
    let block = 64 << 4;
    let fx = reserve_fixture();
    let split = fx.arena.addr() + 2 * block;
    let (z0, z1) = (ZoneId::new(0), ZoneId::new(1));
    assert_eq!((fx.managed_pages(z0), fx.managed_pages(z1)), (32, 32));
    assert_eq!(fx.zone_info(z0).lowmem_reserve[1], 8, "32 / ratio 4");
    assert_eq!(fx.zonelist(AllocFlags::NONE).collect::<Vec<_>>(), [z1, z0]);
    let dma = AllocFlags::NONE.zone_max(z0);
    assert_eq!(fx.zonelist(dma).collect::<Vec<_>>(), [z0]);
    assert_eq!(fx.config().zone_below(split), Some(z0));

    let mut held = Vec::new();
    // A DMA request is served by zone 0 even though zone 1 is empty-handed.
    let d = fx.alloc_pages(o(0), dma).unwrap();
    assert_eq!(fx.zone_of(d.ptr.as_ptr()), Some(z0));
    // SAFETY: ours.
    unsafe { fx.free_pages(d.ptr, o(0)) };
    // Plain requests: zone 1 first ...
    for _ in 0..32 {
        let p = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
        assert_eq!(fx.zone_of(p.ptr.as_ptr()), Some(z1));
        held.push(p);
    }
    // ... then zone 0, down to its reserve of 8 pages.
    for _ in 0..24 {
        let p = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
        assert_eq!(fx.zone_of(p.ptr.as_ptr()), Some(z0));
        held.push(p);
    }
    assert!(
        fx.alloc_pages(o(0), AllocFlags::NONE).is_none(),
        "reserve kept"
    );
    assert!(
        fx.alloc_pages(o(0), AllocFlags::ATOMIC).is_none(),
        "min is 0: no dip"
    );
    assert_eq!(fx.nr_free_pages(z0), 8);
    // Allocating from zone 0 directly still owes the reserve for a
    // request whose highest zone is 1.
    assert!(fx.alloc_pages_zone(z0, o(0), AllocFlags::NONE).is_none());
    // DMA requests may use the reserve.
    for _ in 0..8 {
        let p = fx.alloc_pages(o(0), dma).unwrap();
        assert_eq!(fx.zone_of(p.ptr.as_ptr()), Some(z0));
        held.push(p);
    }
    assert!(fx.alloc_pages(o(0), dma).is_none());
    assert!(fx.stat(Stat::ZONE_FAIL) > 0);
    for p in held {
        // SAFETY: ours.
        unsafe { fx.free_pages(p.ptr, o(0)) };
    }
    fx.check_invariants();
    assert_eq!(fx.zone_info(z0).free_blocks[4], 2);
    assert_eq!(fx.zone_info(z1).free_blocks[4], 2);
}

#[test]
fn alloc_pages_zone_owes_no_reserve_to_itself() {
    let t = Tunables {
        min_free_kbytes: Some(0),
        watermark_scale_factor: 10,
        lowmem_reserve_ratio: [1, 1, 1, 1],
    };
    let fx = Fx::build(1024, 2, false, |base| two_zone_cfg(64, 4, base + 1024, t));
    let (z0, z1) = (ZoneId::new(0), ZoneId::new(1));
    assert_eq!(
        fx.zone_info(z0).lowmem_reserve[1],
        16,
        "ratio 1 keeps it all"
    );
    // As a plain (highest zone 1) request zone 0 is closed to it ...
    assert!(!fx.watermark_ok(z0, o(0), AllocFlags::NONE.zone_max(z1)));
    // ... as a zone-0 request it is open.
    let p = fx
        .alloc_pages_zone(z0, o(0), AllocFlags::NONE.zone_max(z0))
        .unwrap();
    assert_eq!(fx.zone_of(p.ptr.as_ptr()), Some(z0));
    // SAFETY: ours.
    unsafe { fx.free_pages(p.ptr, o(0)) };
}
