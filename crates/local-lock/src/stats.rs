//! Statistics: one macro, [`stat_items!`](crate::stat_items), for every
//! crate's event counters, in the kernel's shape (`enum stat_item` of
//! slub.c, `enum vm_event_item` of vmstat.h): an item enum with the kernel's
//! upper-case names, each with the text name `/proc/vmstat` or
//! `/sys/kernel/slab/*/` prints for it; a snapshot type (one CPU's or one
//! zone's counters, or their sum); and, if asked for, a per-CPU cell type
//! with the racy increments of `this_cpu_inc` (a relaxed load and store, no
//! atomic read-modify-write: a lost update is a miscount, never a fault).
//!
//! ```
//! local_lock::stat_items! {
//!     /// My counters.
//!     pub enum MyStat;
//!     /// A snapshot of my counters.
//!     pub struct MyStats [width = 5, zeros = false];
//!     items {
//!         /// Allocations.
//!         ALLOC = "alloc",
//!         /// Frees.
//!         FREE = "free",
//!     }
//!     /// One CPU's counters.
//!     pub struct MyCells;
//! }
//! let cells = MyCells::new();
//! cells.inc(MyStat::ALLOC);
//! cells.add(MyStat::FREE, 2);
//! let s = cells.snapshot();
//! assert_eq!((s.get(MyStat::ALLOC), s.get(MyStat::FREE)), (1, 2));
//! assert_eq!(format!("{s}"), "alloc 1\nfree  2\n");
//! ```

/// Declares a statistics item enum, its snapshot type and (optionally) its
/// per-CPU cell type; see the [module documentation](crate::stats).
///
/// * The enum (`#[repr(usize)]`, upper-case variants) has `ALL` (every item,
///   in order), `COUNT` and `name()` (the text name).
/// * The snapshot is a tuple struct of `[u64; COUNT]` with `ZERO`, `get`,
///   `add(item, n)`, `inc(item)` (it is also the plain per-CPU counter of
///   code that counts under a lock), `merge` (sum), `delta`, `Default`,
///   `Debug` (a map by name) and `Display`: one `name value` line per item,
///   names padded to `width`; with `zeros = false` only the non-zero items
///   unless formatted with `{:#}`.
/// * The cells (`[AtomicUsize; COUNT]`) have `new` (`const`), `inc`, `add`
///   (racy: relaxed load and store) and `snapshot`.
#[macro_export]
macro_rules! stat_items {
    (
        $(#[$em:meta])* $evis:vis enum $Item:ident;
        $(#[$sm:meta])* $svis:vis struct $Snap:ident [width = $w:literal, zeros = $zeros:literal];
        items {
            $($(#[doc = $d:literal])* $name:ident = $text:literal),* $(,)?
        }
        $($(#[$cm:meta])* $cvis:vis struct $Cells:ident;)?
    ) => {
        $(#[$em])*
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(usize)]
        $evis enum $Item {
            $($(#[doc = $d])* $name,)*
        }

        impl $Item {
            /// Every item, in order.
            pub const ALL: &'static [$Item] = &[$($Item::$name),*];
            /// Number of items.
            pub const COUNT: usize = Self::ALL.len();

            /// The item's text name (as `/proc/vmstat` or sysfs spell it).
            pub const fn name(self) -> &'static str {
                match self {
                    $($Item::$name => $text,)*
                }
            }

        }

        $(#[$sm])*
        #[derive(Clone, Copy, PartialEq, Eq)]
        $svis struct $Snap(pub [u64; $Item::COUNT]);

        impl $Snap {
            /// All zero.
            pub const ZERO: $Snap = $Snap([0; $Item::COUNT]);

            /// The value of an item.
            #[inline(always)]
            pub fn get(&self, item: $Item) -> u64 {
                self.0[item as usize]
            }

            /// Adds `n` to an item.
            #[inline(always)]
            pub fn add(&mut self, item: $Item, n: u64) {
                self.0[item as usize] += n;
            }

            /// Increments an item.
            #[inline(always)]
            pub fn inc(&mut self, item: $Item) {
                self.add(item, 1)
            }

            /// Adds `other` item by item (summing CPUs or zones on read).
            pub fn merge(&mut self, other: &$Snap) {
                for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
                    *a += b;
                }
            }

            /// `new - self`, item by item (saturating).
            pub fn delta(&self, new: &$Snap) -> $Snap {
                let mut d = $Snap::ZERO;
                for ((o, a), b) in d.0.iter_mut().zip(&self.0).zip(&new.0) {
                    *o = b.saturating_sub(*a);
                }
                d
            }
        }

        impl Default for $Snap {
            fn default() -> Self {
                Self::ZERO
            }
        }

        impl ::core::fmt::Debug for $Snap {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut m = f.debug_map();
                for &s in $Item::ALL {
                    m.entry(&s.name(), &self.get(s));
                }
                m.finish()
            }
        }

        impl ::core::fmt::Display for $Snap {
            /// One `name value` line per item (names padded to `width`); with
            /// `zeros = false` only the non-zero items unless `{:#}`.
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                for &s in $Item::ALL {
                    let v = self.get(s);
                    if v != 0 || $zeros || f.alternate() {
                        writeln!(f, "{:<w$} {v}", s.name(), w = $w)?;
                    }
                }
                Ok(())
            }
        }

        $(
            $(#[$cm])*
            #[derive(Debug)]
            $cvis struct $Cells([::core::sync::atomic::AtomicUsize; $Item::COUNT]);

            #[allow(dead_code)]
            impl $Cells {
                /// All zero.
                pub const fn new() -> Self {
                    $Cells([const { ::core::sync::atomic::AtomicUsize::new(0) }; $Item::COUNT])
                }

                /// The racy increment (`this_cpu_inc` without the atomic RMW).
                #[inline(always)]
                pub fn inc(&self, s: $Item) {
                    self.add(s, 1)
                }

                /// The racy addition (`stat_add`).
                #[inline(always)]
                pub fn add(&self, s: $Item, n: usize) {
                    let c = &self.0[s as usize];
                    c.store(
                        c.load(::core::sync::atomic::Ordering::Relaxed).wrapping_add(n),
                        ::core::sync::atomic::Ordering::Relaxed,
                    );
                }

                /// The current values.
                pub fn snapshot(&self) -> $Snap {
                    let mut v = [0u64; $Item::COUNT];
                    for (o, c) in v.iter_mut().zip(&self.0) {
                        *o = c.load(::core::sync::atomic::Ordering::Relaxed) as u64;
                    }
                    $Snap(v)
                }
            }

            impl Default for $Cells {
                fn default() -> Self {
                    Self::new()
                }
            }
        )?
    };
}

#[cfg(test)]
mod tests {
    use std::format;

    crate::stat_items! {
        /// Test items.
        pub enum T;
        /// Test snapshot.
        pub struct TS [width = 10, zeros = false];
        items {
            /// One.
            ONE = "one",
            /// Two.
            LONGER_TWO = "longer_two",
        }
        /// Test cells.
        pub struct TC;
    }

    #[test]
    fn items_names_and_order() {
        assert_eq!(T::COUNT, 2);
        assert_eq!(T::ALL, &[T::ONE, T::LONGER_TWO]);
        assert_eq!(T::LONGER_TWO.name(), "longer_two");
        assert_eq!(T::LONGER_TWO as usize, 1);
    }

    #[test]
    fn cells_snapshot_merge_delta_display() {
        let c = TC::new();
        c.inc(T::ONE);
        c.add(T::ONE, 2);
        let a = c.snapshot();
        assert_eq!(a.get(T::ONE), 3);
        let mut b = a;
        b.inc(T::LONGER_TWO);
        b.merge(&a);
        assert_eq!((b.get(T::ONE), b.get(T::LONGER_TWO)), (6, 1));
        let d = a.delta(&b);
        assert_eq!((d.get(T::ONE), d.get(T::LONGER_TWO)), (3, 1));
        assert_eq!(a.delta(&TS::ZERO), TS::ZERO);
        assert_eq!(format!("{a}"), "one        3\n");
        assert_eq!(format!("{a:#}"), "one        3\nlonger_two 0\n");
        assert_eq!(format!("{a:?}"), "{\"one\": 3, \"longer_two\": 0}");
    }
}
