//! Interrupt context on a kernel-like platform: the zone lock is held with
//! IRQs off, so an interrupt arriving during an allocation runs after the
//! lock is dropped and may itself allocate and free.

use std::rc::Rc;

use local_lock::Platform;

use super::{o, Fx};
use crate::{AllocFlags, ZoneId};

#[test]
fn interrupt_handlers_allocate_and_free() {
    let fx = Rc::new(Fx::small(2));
    let plat = *fx.platform();
    // Direct: an interrupt handler allocating on a buddy the task uses.
    let got = plat.interrupt(|| {
        assert!(plat.in_interrupt());
        let p = fx.alloc_pages(o(1), AllocFlags::ATOMIC).unwrap();
        // SAFETY: ours.
        unsafe { fx.free_pages(p.ptr, o(1)) };
        true
    });
    assert_eq!(got, Some(true));

    // Armed: the interrupt becomes due inside the allocation (with IRQs
    // masked around the zone lock), so it is delivered when the allocation
    // restores IRQs, and its own allocation must not deadlock.
    let f2 = fx.clone();
    plat.arm_interrupt(0, move || {
        let p = f2.alloc_pages(o(0), AllocFlags::ATOMIC).unwrap();
        // SAFETY: ours.
        unsafe { f2.free_pages(p.ptr, o(0)) };
    });
    let fired = plat.fired();
    let p = fx.alloc_pages(o(2), AllocFlags::NONE).unwrap();
    assert_eq!(
        plat.fired(),
        fired + 1,
        "the interrupt ran inside alloc_pages"
    );
    assert!(!plat.irqs_disabled());
    // Inside a bulk sink the zone lock is held: IRQs are off and an
    // interrupt stays pending.
    let mut pending = false;
    let mut held = None;
    let n = fx.alloc_bulk(ZoneId::new(0), o(0), AllocFlags::NONE, 1, |q| {
        assert!(plat.irqs_disabled());
        pending = plat.interrupt(|| ()).is_none();
        held = Some(q);
    });
    assert_eq!(n, 1);
    assert!(pending, "interrupt masked while the zone lock is held");
    // SAFETY: ours.
    unsafe { fx.free_pages(p.ptr, o(2)) };
    fx.check_invariants();
    // SAFETY: ours (from the bulk allocation).
    unsafe { fx.free_pages(held.unwrap().ptr, o(0)) };
    assert_eq!(fx.info(), [0, 0, 0, 0, 2]);
}
