//! The errors of the cache paths: [`FreeError`] (a refused free) and
//! [`CacheBusy`] (a cache destroyed with objects still allocated). A base
//! module: the caches, kmalloc and the global allocator import it; the
//! crate root re-exports it. (Cache creation's [`CacheError`] lives with
//! the layout it validates.)
//!
//! [`CacheError`]: crate::layout::CacheError

use core::fmt;

/// Why a free was refused (the state is left untouched): the address and
/// what was wrong with it, the shape of `buddy::FreeError` and
/// `pcp::BadFree`.
///
/// ```
/// use local_lock::std_platform::PerThread;
/// use slub::{FreeError, FreeErrorKind, Geometry, GlobalPages, KmemCache, SlabFlags};
///
/// const G: Geometry = Geometry::new(PerThread::OWNED_SLOTS + 1);
/// static A: KmemCache<GlobalPages, PerThread> =
///     KmemCache::new("cache_a", 64, 8, SlabFlags::NONE, G, GlobalPages, PerThread);
/// static B: KmemCache<GlobalPages, PerThread> =
///     KmemCache::new("cache_b", 64, 8, SlabFlags::NONE, G, GlobalPages, PerThread);
/// let p = A.alloc().unwrap();
/// let addr = p.as_ptr() as usize;
/// // SAFETY: refused (another cache's object), nothing changes.
/// let e = unsafe { B.try_free(p) }.unwrap_err();
/// assert_eq!(e.addr, addr);
/// assert!(matches!(e.kind, FreeErrorKind::WrongCache(_)));
/// // SAFETY: ours, freed once; the second free is refused.
/// unsafe { A.try_free(p) }.unwrap();
/// let e = unsafe { A.try_free(p) }.unwrap_err();
/// assert_eq!(e, FreeError::new(addr, FreeErrorKind::DoubleFree));
/// assert_eq!(e.addr(), addr);
/// assert_eq!(e.to_string(), format!("slub: double free of {addr:#x}"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreeError {
    /// The address whose free was refused.
    pub addr: usize,
    /// What was wrong.
    pub kind: FreeErrorKind,
}

/// What was wrong with a refused free ([`FreeError::kind`]).
///
/// ```
/// use core::ptr::NonNull;
/// use local_lock::std_platform::PerThread;
/// use slub::{FreeErrorKind, Geometry, GlobalPages, KmemCache, SlabFlags};
///
/// static C: KmemCache<GlobalPages, PerThread> = KmemCache::new(
///     "kinds", 64, 8, SlabFlags::NONE, Geometry::new(PerThread::OWNED_SLOTS + 1), GlobalPages, PerThread);
/// let p = C.alloc().unwrap();
/// // SAFETY: each bad free is refused and changes nothing.
/// unsafe {
///     let inside = p.add(8);
///     assert!(matches!(C.try_free(inside).unwrap_err().kind, FreeErrorKind::NotObjectStart(_)));
///     let on_stack = 0u64;
///     let e = C.try_free(NonNull::from(&on_stack).cast()).unwrap_err();
///     assert_eq!(e.kind, FreeErrorKind::NotAllocated);
///     assert_eq!(
///         e.kind.to_string(),
///         "not in any allocated block of this cache's page allocator"
///     );
///     C.free(p);
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeErrorKind {
    /// No allocated block of the page allocator contains the address.
    NotAllocated,
    /// The block is not a slab (a page allocation or a large kmalloc).
    NotSlab,
    /// The slab belongs to another cache (its name).
    WrongCache(&'static str),
    /// Not the start of an object: its offset in the slab.
    NotObjectStart(usize),
    /// The object is already free (at the head of the freelist it would be
    /// pushed onto, the kernel's naive check; or, hardened, marked free).
    DoubleFree,
}

impl FreeError {
    /// The error for `addr`.
    pub const fn new(addr: usize, kind: FreeErrorKind) -> FreeError {
        FreeError { addr, kind }
    }

    /// The address whose free was refused.
    pub fn addr(&self) -> usize {
        self.addr
    }
}

impl fmt::Display for FreeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FreeErrorKind::NotAllocated => {
                f.write_str("not in any allocated block of this cache's page allocator")
            }
            FreeErrorKind::NotSlab => f.write_str("not in a slab"),
            FreeErrorKind::WrongCache(other) => write!(f, "an object of another cache ({other})"),
            FreeErrorKind::NotObjectStart(off) => {
                write!(f, "not the start of an object (offset {off} in its slab)")
            }
            FreeErrorKind::DoubleFree => f.write_str("a double free"),
        }
    }
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.addr;
        match self.kind {
            // The wording tests and users match on ("double free of").
            FreeErrorKind::DoubleFree => write!(f, "slub: double free of {a:#x}"),
            kind => write!(f, "slub: {a:#x} is {kind}"),
        }
    }
}

impl core::error::Error for FreeError {}

/// A cache still held objects when it was destroyed (they and their slabs
/// are left alone, as `kmem_cache_destroy` does).
///
/// ```
/// use local_lock::std_platform::PerThread;
/// use slub::{CacheBusy, GlobalPages, KmemCache, SlabFlags};
///
/// let mut c = KmemCache::<GlobalPages, PerThread>::create(
///     "busy", 64, 8, SlabFlags::NONE, GlobalPages, PerThread).unwrap();
/// let p = c.alloc().unwrap();
/// let e: CacheBusy = c.destroy().unwrap_err();
/// assert_eq!((e.name, e.slabs, e.objects), ("busy", 1, 1));
/// assert!(e.to_string().ends_with("slab cache still has objects (1 in 1 slabs)"));
/// // SAFETY: ours, freed once.
/// unsafe { c.free(p) };
/// assert_eq!(c.destroy(), Ok(()));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheBusy {
    /// The cache's name.
    pub name: &'static str,
    /// Slabs still allocated.
    pub slabs: usize,
    /// Objects still allocated.
    pub objects: usize,
}

impl fmt::Display for CacheBusy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "slub: kmem_cache_destroy {}: slab cache still has objects ({} in {} slabs)",
            self.name, self.objects, self.slabs
        )
    }
}

impl core::error::Error for CacheBusy {}
