//! Bit helpers shared by the allocator family: the kernel's `fls`, `ilog2`
//! and `ALIGN` (`include/linux/bitops.h`, `log2.h`, `align.h`) as `const fn`s
//! on `usize`.
//!
//! This is the bottom layer of every crate's arithmetic (buddy's region
//! setup, percpu-bitmap's slots and hints, slub's layout), so each helper
//! lives here once. All are `#[inline(always)]`: they sit on fast paths whose
//! instruction counts `ci/icount.sh` guards.

/// `fls`: the 1-based index of the highest set bit, 0 for 0
/// (`fls(1) == 1`, `fls(0x80) == 8`).
#[inline(always)]
pub const fn fls(x: usize) -> usize {
    (usize::BITS - x.leading_zeros()) as usize
}

/// `ilog2`: the index of the highest set bit, `floor(log2(x))`.
///
/// `x` must not be 0 (as in the kernel, where `ilog2(0)` is undefined):
/// it underflows (a panic in debug builds).
#[inline(always)]
pub const fn ilog2(x: usize) -> usize {
    fls(x) - 1
}

/// `ALIGN(x, a)`: `x` rounded up to a multiple of `a`, a power of two.
///
/// The caller guarantees that the result fits (`x + a - 1` does not
/// overflow); use [`checked_align_up`] where it may not.
#[inline(always)]
pub const fn align_up(x: usize, a: usize) -> usize {
    (x + a - 1) & !(a - 1)
}

/// `ALIGN(x, a)` for a power-of-two `a`, or `None` when the result does not
/// fit in a `usize`.
#[inline(always)]
pub const fn checked_align_up(x: usize, a: usize) -> Option<usize> {
    match x.checked_add(a - 1) {
        Some(v) => Some(v & !(a - 1)),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fls_is_one_based() {
        assert_eq!(fls(0), 0);
        assert_eq!(fls(1), 1);
        assert_eq!(fls(2), 2);
        assert_eq!(fls(3), 2);
        assert_eq!(fls(0x80), 8);
        assert_eq!(fls(usize::MAX), usize::BITS as usize);
    }

    #[test]
    fn ilog2_floors() {
        assert_eq!(ilog2(1), 0);
        assert_eq!(ilog2(2), 1);
        assert_eq!(ilog2(3), 1);
        assert_eq!(ilog2(4096), 12);
        assert_eq!(ilog2(4097), 12);
        assert_eq!(ilog2(usize::MAX), usize::BITS as usize - 1);
    }

    #[test]
    fn align_up_rounds_to_power_of_two() {
        assert_eq!(align_up(0, 8), 0);
        assert_eq!(align_up(13, 8), 16);
        assert_eq!(align_up(16, 8), 16);
        assert_eq!(align_up(17, 1), 17);
        assert_eq!(align_up(4097, 4096), 8192);
    }

    #[test]
    fn checked_align_up_reports_overflow() {
        assert_eq!(checked_align_up(13, 8), Some(16));
        assert_eq!(checked_align_up(16, 8), Some(16));
        assert_eq!(checked_align_up(usize::MAX - 7, 8), Some(usize::MAX - 7));
        assert_eq!(checked_align_up(usize::MAX - 6, 8), None);
        assert_eq!(checked_align_up(usize::MAX, 1), Some(usize::MAX));
    }

    #[test]
    fn usable_in_const() {
        const A: usize = align_up(100, 64);
        const F: usize = fls(A);
        assert_eq!((A, F), (128, 8));
    }
}
