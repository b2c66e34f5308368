//! Word-at-a-time bitmap primitives (the kernel's `lib/bitmap.c` and
//! `find_bit.c` subset the allocator needs).
//!
//! Bit `i` lives in word `i / 64` at position `i % 64`. Every search works on
//! whole `u64` words with `trailing_zeros`/`leading_zeros`, so scanning a
//! 1024-bit block costs at most 16 word loads. Searches take a `size` (the
//! number of valid bits) and, like the kernel's, return `size` when nothing
//! is found.

/// Bits per bitmap word.
pub(crate) const WORD_BITS: usize = 64;

/// Words needed for `bits` bits.
#[inline(always)]
pub(crate) const fn words_for(bits: usize) -> usize {
    bits.div_ceil(WORD_BITS)
}

/// Whether bit `bit` is set.
#[inline(always)]
pub(crate) fn test_bit(map: &[u64], bit: usize) -> bool {
    (map[bit / WORD_BITS] >> (bit % WORD_BITS)) & 1 != 0
}

/// Sets bit `bit`.
#[inline(always)]
pub(crate) fn set_bit(map: &mut [u64], bit: usize) {
    map[bit / WORD_BITS] |= 1u64 << (bit % WORD_BITS);
}

/// Clears bit `bit`.
#[cfg(test)]
#[inline(always)]
pub(crate) fn clear_bit(map: &mut [u64], bit: usize) {
    map[bit / WORD_BITS] &= !(1u64 << (bit % WORD_BITS));
}

/// Mask of the bits of word `w` that lie in `[start, end)` (`end > start`).
#[inline(always)]
fn edge_masks(start: usize, end: usize) -> (usize, usize, u64, u64) {
    let sw = start / WORD_BITS;
    let ew = (end - 1) / WORD_BITS;
    let smask = !0u64 << (start % WORD_BITS);
    let emask = !0u64 >> (WORD_BITS - 1 - (end - 1) % WORD_BITS);
    (sw, ew, smask, emask)
}

/// Sets bits `[start, start + len)` (`bitmap_set`).
#[inline]
pub(crate) fn set_range(map: &mut [u64], start: usize, len: usize) {
    if len == 0 {
        return;
    }
    let (sw, ew, smask, emask) = edge_masks(start, start + len);
    if sw == ew {
        map[sw] |= smask & emask;
        return;
    }
    map[sw] |= smask;
    for w in &mut map[sw + 1..ew] {
        *w = !0;
    }
    map[ew] |= emask;
}

/// Clears bits `[start, start + len)` (`bitmap_clear`).
#[inline]
pub(crate) fn clear_range(map: &mut [u64], start: usize, len: usize) {
    if len == 0 {
        return;
    }
    let (sw, ew, smask, emask) = edge_masks(start, start + len);
    if sw == ew {
        map[sw] &= !(smask & emask);
        return;
    }
    map[sw] &= !smask;
    for w in &mut map[sw + 1..ew] {
        *w = 0;
    }
    map[ew] &= !emask;
}

/// Shared body of the forward searches: `invert` looks for zero bits.
#[inline(always)]
fn find_next(map: &[u64], size: usize, start: usize, invert: bool) -> usize {
    if start >= size {
        return size;
    }
    let flip = if invert { !0u64 } else { 0 };
    let mut w = start / WORD_BITS;
    let mut word = (map[w] ^ flip) & (!0u64 << (start % WORD_BITS));
    loop {
        if word != 0 {
            let r = w * WORD_BITS + word.trailing_zeros() as usize;
            return if r < size { r } else { size };
        }
        w += 1;
        if w * WORD_BITS >= size {
            return size;
        }
        word = map[w] ^ flip;
    }
}

/// First set bit in `[start, size)`, or `size` (`find_next_bit`).
#[inline]
pub(crate) fn find_next_bit(map: &[u64], size: usize, start: usize) -> usize {
    find_next(map, size, start, false)
}

/// First clear bit in `[start, size)`, or `size` (`find_next_zero_bit`).
#[inline]
pub(crate) fn find_next_zero_bit(map: &[u64], size: usize, start: usize) -> usize {
    find_next(map, size, start, true)
}

/// Last set bit in `[0, size)`, or `size` if there is none (`find_last_bit`).
#[inline]
pub(crate) fn find_last_bit(map: &[u64], size: usize) -> usize {
    if size == 0 {
        return 0;
    }
    let mut w = (size - 1) / WORD_BITS;
    let mut word = map[w] & (!0u64 >> (WORD_BITS - 1 - (size - 1) % WORD_BITS));
    loop {
        if word != 0 {
            return w * WORD_BITS + (WORD_BITS - 1 - word.leading_zeros() as usize);
        }
        if w == 0 {
            return size;
        }
        w -= 1;
        word = map[w];
    }
}

/// The next run of clear bits at or after `start` within `[0, size)`, as
/// `(rs, re)`, or `None` (`bitmap_next_clear_region`).
#[inline]
pub(crate) fn next_clear_region(map: &[u64], size: usize, start: usize) -> Option<(usize, usize)> {
    let rs = find_next_zero_bit(map, size, start);
    if rs >= size {
        return None;
    }
    Some((rs, find_next_bit(map, size, rs + 1)))
}

/// The next run of set bits at or after `start` within `[0, size)`, as
/// `(rs, re)`, or `None` (`bitmap_next_set_region`).
#[inline]
pub(crate) fn next_set_region(map: &[u64], size: usize, start: usize) -> Option<(usize, usize)> {
    let rs = find_next_bit(map, size, start);
    if rs >= size {
        return None;
    }
    Some((rs, find_next_zero_bit(map, size, rs + 1)))
}

/// Number of set bits in `[0, size)`.
#[cfg(any(test, feature = "invariants"))]
pub(crate) fn weight(map: &[u64], size: usize) -> usize {
    let full = size / WORD_BITS;
    let mut n: usize = map[..full].iter().map(|w| w.count_ones() as usize).sum();
    if !size.is_multiple_of(WORD_BITS) {
        n += (map[full] & (!0u64 >> (WORD_BITS - size % WORD_BITS))).count_ones() as usize;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    fn naive_next(bits: &[bool], start: usize, want: bool) -> usize {
        (start..bits.len())
            .find(|&i| bits[i] == want)
            .unwrap_or(bits.len())
    }

    fn to_map(bits: &[bool]) -> Vec<u64> {
        let mut m = vec![0u64; words_for(bits.len()) + 1];
        for (i, &b) in bits.iter().enumerate() {
            if b {
                set_bit(&mut m, i);
            }
        }
        m
    }

    #[test]
    fn ranges_and_searches_match_naive() {
        // A deterministic pseudo-random pattern over odd sizes.
        let mut x = 0x1234_5678_9abc_def1u64;
        let sizes: &[usize] = if cfg!(miri) {
            &[1, 63, 65, 130]
        } else {
            &[1, 7, 63, 64, 65, 127, 128, 129, 300, 1024, 1025]
        };
        let reps = if cfg!(miri) { 2 } else { 20 };
        for &size in sizes {
            for _ in 0..reps {
                let mut bits = vec![false; size];
                for b in bits.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x.is_multiple_of(3);
                }
                let m = to_map(&bits);
                for start in 0..=size {
                    assert_eq!(
                        find_next_bit(&m, size, start),
                        naive_next(&bits, start, true)
                    );
                    assert_eq!(
                        find_next_zero_bit(&m, size, start),
                        naive_next(&bits, start, false)
                    );
                }
                for s in 0..=size {
                    let naive = (0..s).rev().find(|&i| bits[i]).unwrap_or(s);
                    assert_eq!(find_last_bit(&m, s), naive, "size {s}");
                }
                assert_eq!(weight(&m, size), bits.iter().filter(|&&b| b).count());
            }
        }
    }

    #[test]
    fn set_and_clear_ranges() {
        let sizes: &[usize] = if cfg!(miri) {
            &[64, 130]
        } else {
            &[64, 130, 1024]
        };
        for &size in sizes {
            for start in (0..size).step_by(if cfg!(miri) { 23 } else { 7 }) {
                for len in [0usize, 1, 5, 63, 64, 65, 200] {
                    if start + len > size {
                        continue;
                    }
                    let mut m = vec![0u64; words_for(size)];
                    set_range(&mut m, start, len);
                    for i in 0..size {
                        assert_eq!(test_bit(&m, i), i >= start && i < start + len);
                    }
                    let mut m = vec![!0u64; words_for(size)];
                    clear_range(&mut m, start, len);
                    for i in 0..size {
                        assert_eq!(test_bit(&m, i), !(i >= start && i < start + len));
                    }
                }
            }
        }
    }

    #[test]
    fn regions() {
        let mut m = vec![0u64; 2];
        set_range(&mut m, 10, 5);
        set_range(&mut m, 70, 3);
        assert_eq!(next_clear_region(&m, 100, 0), Some((0, 10)));
        assert_eq!(next_clear_region(&m, 100, 10), Some((15, 70)));
        assert_eq!(next_clear_region(&m, 100, 71), Some((73, 100)));
        assert_eq!(next_clear_region(&m, 73, 71), None);
        assert_eq!(next_set_region(&m, 100, 0), Some((10, 15)));
        assert_eq!(next_set_region(&m, 100, 15), Some((70, 73)));
        assert_eq!(next_set_region(&m, 100, 73), None);
        clear_bit(&mut m, 12);
        assert!(!test_bit(&m, 12));
    }
}
