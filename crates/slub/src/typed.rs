//! Typed caches: a [`TypedCache<T>`] is a [`KmemCache`] made from `T`'s
//! layout, and a [`CacheBox<T>`] owns one `T` in it (the kernel's
//! `kmem_cache_create` for a struct, with the ownership of its Rust
//! bindings' `KBox`): it derefs to `T`, drops `T` and frees the object to
//! its cache when it goes out of scope, and crosses threads when `T` does
//! (a free from another CPU is a remote free, which SLUB is built for).

use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

use local_lock::Platform;

use crate::cache::KmemCache;
use crate::layout::{CacheError, Geometry, SlabFlags};
use crate::source::SlabSource;

/// A cache of `T`s: a [`KmemCache`] of `size_of::<T>()`-byte objects
/// aligned for `T`.
///
/// ```
/// use local_lock::std_platform::PerThread;
/// use slub::{GlobalPages, SlabFlags, TypedCache};
///
/// struct Inode {
///     ino: u64,
///     links: u32,
/// }
/// static INODES: TypedCache<Inode, GlobalPages, PerThread> =
///     TypedCache::new("inode_cache", SlabFlags::HARDENED, slub::Geometry::new(PerThread::OWNED_SLOTS + 1), GlobalPages, PerThread);
///
/// let i = INODES.try_new(Inode { ino: 7, links: 1 }).unwrap();
/// // A `CacheBox` of a `Send` type crosses threads; its drop frees it.
/// std::thread::spawn(move || assert_eq!(i.ino + u64::from(i.links), 8))
///     .join()
///     .unwrap();
/// ```
pub struct TypedCache<T, S: SlabSource, P: Platform, const N: usize = 64> {
    cache: KmemCache<S, P, N>,
    _t: PhantomData<fn(T) -> T>,
}

impl<T, S: SlabSource, P: Platform, const N: usize> TypedCache<T, S, P, N> {
    /// The object size: `T`'s, at least one byte (a zero-sized `T` still
    /// gets distinct objects).
    const SIZE: usize = if core::mem::size_of::<T>() == 0 {
        1
    } else {
        core::mem::size_of::<T>()
    };

    /// A cache of `T`s usable in a `static` ([`KmemCache::new`]).
    ///
    /// # Panics
    ///
    /// If `T` is too large or too aligned for a slab of `geometry` (at
    /// compile time in a `static`).
    #[cfg(not(loom))]
    pub const fn new(
        name: &'static str,
        flags: SlabFlags,
        geometry: Geometry,
        source: S,
        platform: P,
    ) -> Self {
        TypedCache {
            cache: KmemCache::new(
                name,
                Self::SIZE,
                core::mem::align_of::<T>(),
                flags,
                geometry,
                source,
                platform,
            ),
            _t: PhantomData,
        }
    }

    /// A cache of `T`s sized from the source and platform
    /// ([`KmemCache::create`]); a `T` too large or too aligned for a slab
    /// is an error.
    pub fn create(
        name: &'static str,
        flags: SlabFlags,
        source: S,
        platform: P,
    ) -> Result<Self, CacheError> {
        Ok(TypedCache {
            cache: KmemCache::create(
                name,
                Self::SIZE,
                core::mem::align_of::<T>(),
                flags,
                source,
                platform,
            )?,
            _t: PhantomData,
        })
    }

    /// The untyped cache (statistics, `slabinfo`, `shrink`, `validate`).
    pub fn cache(&self) -> &KmemCache<S, P, N> {
        &self.cache
    }

    /// Moves `value` into a new object; [`OutOfMemory`] (holding `value`)
    /// when the page allocator has no slab to give.
    #[track_caller]
    pub fn try_new(&self, value: T) -> Result<CacheBox<'_, T, S, P, N>, OutOfMemory<T>> {
        let Some(p) = self.cache.alloc() else {
            return Err(OutOfMemory {
                cache: self.cache.name(),
                value,
            });
        };
        let p = p.cast::<T>();
        // SAFETY: a fresh object of at least `size_of::<T>()` bytes aligned
        // for `T` (the cache's layout).
        unsafe { p.as_ptr().write(value) };
        Ok(CacheBox {
            ptr: p,
            cache: self,
        })
    }

    /// [`try_new`](Self::try_new) that panics when memory runs out.
    ///
    /// # Panics
    ///
    /// When the page allocator has no slab to give.
    #[track_caller]
    pub fn new_box(&self, value: T) -> CacheBox<'_, T, S, P, N> {
        match self.try_new(value) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        }
    }
}

impl<T, S: SlabSource, P: Platform, const N: usize> fmt::Debug for TypedCache<T, S, P, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedCache")
            .field("type", &core::any::type_name::<T>())
            .field("cache", &self.cache)
            .finish()
    }
}

/// The error of [`TypedCache::try_new`]: no memory for the object; the
/// value is handed back.
///
/// ```
/// use buddy::{Buddy, Config};
/// use local_lock::test_platform::TestPlatform;
/// use slub::{OutOfMemory, SlabFlags, TypedCache};
///
/// // A page allocator over 1 MiB of heap memory.
/// let layout = std::alloc::Layout::from_size_align(1 << 20, 4096).unwrap();
/// // SAFETY: non-zero size.
/// let mem = unsafe { std::alloc::alloc_zeroed(layout) };
/// let pages = Buddy::new(TestPlatform::pinned(1), Config::new(4096, 8));
/// // SAFETY: zeroed memory nobody else uses, leaked (lives as long as `pages`).
/// unsafe { pages.add_region(mem, 1 << 20, true).unwrap() };
///
/// let cache: TypedCache<[u64; 512], _, _> =
///     TypedCache::create("pages", SlabFlags::NONE, &pages, TestPlatform::pinned(1)).unwrap();
/// let mut live = Vec::new();
/// let err: OutOfMemory<[u64; 512]> = loop {
///     match cache.try_new([7; 512]) {
///         Ok(b) => live.push(b),
///         Err(e) => break e,
///     }
/// };
/// assert!(live.len() > 100, "most of the 256 pages were handed out");
/// assert_eq!(err.value, [7; 512], "the value comes back");
/// assert_eq!(err.to_string(), "slub pages: out of memory for a [u64; 512]");
/// live.pop();
/// assert!(cache.try_new(err.value).is_ok(), "room again");
/// ```
pub struct OutOfMemory<T> {
    cache: &'static str,
    /// The value that was not placed.
    pub value: T,
}

impl<T> fmt::Debug for OutOfMemory<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutOfMemory")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Display for OutOfMemory<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "slub {}: out of memory for a {}",
            self.cache,
            core::any::type_name::<T>()
        )
    }
}

impl<T> core::error::Error for OutOfMemory<T> {}

/// One `T` owned in a [`TypedCache`]: derefs to `T`; dropping it drops the
/// `T` and frees the object to its cache.
///
/// A box cannot outlive its cache (a cache is never destroyed with
/// objects out):
///
/// ```compile_fail
/// # use local_lock::std_platform::PerThread;
/// # use slub::{GlobalPages, SlabFlags, TypedCache};
/// let b = {
///     let c = TypedCache::<u64, GlobalPages, PerThread>::create("short", SlabFlags::NONE, GlobalPages, PerThread)
///         .unwrap();
///     c.new_box(1)
/// };
/// ```
///
/// A box of a type that is not `Send` stays on its thread:
///
/// ```compile_fail
/// # use local_lock::std_platform::PerThread;
/// # use slub::{GlobalPages, SlabFlags, TypedCache};
/// static RCS: TypedCache<std::rc::Rc<u8>, GlobalPages, PerThread> =
///     TypedCache::new("rc", SlabFlags::NONE, slub::Geometry::new(PerThread::OWNED_SLOTS + 1), GlobalPages, PerThread);
/// let b = RCS.new_box(std::rc::Rc::new(1));
/// std::thread::spawn(move || drop(b));
/// ```
pub struct CacheBox<'c, T, S: SlabSource, P: Platform, const N: usize = 64> {
    ptr: NonNull<T>,
    cache: &'c TypedCache<T, S, P, N>,
}

// SAFETY: the box owns its `T` (sending the box sends the `T`); the cache
// is `Sync` and takes frees from any CPU (remote frees).
unsafe impl<T: Send, S: SlabSource, P: Platform, const N: usize> Send for CacheBox<'_, T, S, P, N> {}
// SAFETY: `&CacheBox` gives only `&T`.
unsafe impl<T: Sync, S: SlabSource, P: Platform, const N: usize> Sync for CacheBox<'_, T, S, P, N> {}

impl<'c, T, S: SlabSource, P: Platform, const N: usize> CacheBox<'c, T, S, P, N> {
    /// The cache the box frees into.
    pub fn cache(b: &Self) -> &'c TypedCache<T, S, P, N> {
        b.cache
    }

    /// Takes the value out and frees the object.
    pub fn into_inner(b: Self) -> T {
        let b = ManuallyDrop::new(b);
        // SAFETY: the box's live `T`, read once; the object is freed below
        // and the box is not dropped.
        let v = unsafe { b.ptr.as_ptr().read() };
        // SAFETY: an object of this cache, freed once.
        unsafe { b.cache.cache.free(b.ptr.cast()) };
        v
    }

    /// The raw object, leaving it allocated (see [`from_raw`](Self::from_raw)).
    pub fn into_raw(b: Self) -> NonNull<T> {
        ManuallyDrop::new(b).ptr
    }

    /// A box again from [`into_raw`](Self::into_raw).
    ///
    /// # Safety
    ///
    /// `ptr` came from `into_raw` of a box of `cache` and is owned by no
    /// other box.
    pub unsafe fn from_raw(ptr: NonNull<T>, cache: &'c TypedCache<T, S, P, N>) -> Self {
        CacheBox { ptr, cache }
    }
}

impl<T, S: SlabSource, P: Platform, const N: usize> Deref for CacheBox<'_, T, S, P, N> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the box's live, initialised `T`.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T, S: SlabSource, P: Platform, const N: usize> DerefMut for CacheBox<'_, T, S, P, N> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, uniquely borrowed through `&mut self`.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T, S: SlabSource, P: Platform, const N: usize> Drop for CacheBox<'_, T, S, P, N> {
    fn drop(&mut self) {
        // SAFETY: the box's live `T`, dropped once; then its object, freed
        // once into the cache it came from.
        unsafe {
            core::ptr::drop_in_place(self.ptr.as_ptr());
            self.cache.cache.free(self.ptr.cast());
        }
    }
}

impl<T: fmt::Debug, S: SlabSource, P: Platform, const N: usize> fmt::Debug
    for CacheBox<'_, T, S, P, N>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: fmt::Display, S: SlabSource, P: Platform, const N: usize> fmt::Display
    for CacheBox<'_, T, S, P, N>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}
