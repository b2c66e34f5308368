//! `kprintln!` over the UART, serialised by a spin lock taken with
//! interrupts masked (so a hart never spins on a lock its own task holds).
//! The panic path steals the lock after a while: a hart that panicked while
//! printing must still be able to say so.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, Ordering};

use crate::arch;

static LOCK: AtomicBool = AtomicBool::new(false);

struct Uart;

impl Write for Uart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                arch::uart_putc(b'\r');
            }
            arch::uart_putc(b);
        }
        Ok(())
    }
}

/// Prints `args` atomically with respect to other harts' prints.
pub fn print(args: fmt::Arguments<'_>) {
    let flags = arch::irq_save();
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        core::hint::spin_loop();
    }
    let _ = Uart.write_fmt(args);
    LOCK.store(false, Ordering::Release);
    if flags & arch::MSTATUS_MIE != 0 {
        // SAFETY: interrupts were enabled before the save above.
        unsafe { arch::irq_enable() };
    }
}

/// Prints from the panic path: waits a bounded time for the lock, then
/// prints regardless.
pub fn print_panic(args: fmt::Arguments<'_>) {
    arch::irq_disable();
    for _ in 0..10_000_000 {
        if LOCK
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            break;
        }
        core::hint::spin_loop();
    }
    let _ = Uart.write_fmt(args);
    LOCK.store(false, Ordering::Release);
}

/// `println!` to the UART.
#[macro_export]
macro_rules! kprintln {
    () => { $crate::console::print(format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::console::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}
