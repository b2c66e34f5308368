//! Typed caches: a [`TypedCache<T>`] is a [`KmemCache`] made from `T`'s
//! layout, and a [`CacheBox<T>`] owns one `T` in it (the kernel's
//! `kmem_cache_create` for a struct, with the ownership of its Rust
//! bindings' `KBox`): it derefs to `T`, drops `T` and frees the object to
//! its cache when it goes out of scope, and crosses threads when `T` does
//! (a free from another CPU is a remote free, which SLUB is built for).

use core::fmt;
use core::marker::PhantomData;
use core::mem::{ManuallyDrop, MaybeUninit};
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

use local_lock::Platform;

use crate::cache::{Ctor, KmemCache};
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

    /// Gives the cache a constructor (the kernel's `kmem_cache_create(...,
    /// ctor)`): `ctor` initialises each object when its slab is made, and
    /// the objects stay constructed from then on:
    /// [`alloc`](Self::alloc) hands out a `T` as the constructor or its
    /// last owner left it, and dropping a [`CacheBox`] of this cache frees
    /// the object *without* dropping its `T` (restore what the next user
    /// expects before dropping the box, as kernel code returns objects in
    /// their constructed state). A `T` whose slab goes back to the page
    /// allocator is forgotten, never dropped ([`core::mem::forget`]).
    ///
    /// `ctor` proves it initialised the object by returning it
    /// (`MaybeUninit::write` does); returning any other reference panics.
    /// `T: Send`, since a value left in an object by one thread is handed
    /// to another. See [`KmemCache::with_ctor`] for what changes in the
    /// cache (the free pointer moves after the object).
    ///
    /// ```
    /// use core::mem::MaybeUninit;
    /// use core::sync::atomic::{AtomicUsize, Ordering};
    /// use local_lock::std_platform::PerThread;
    /// use slub::{GlobalPages, SlabFlags, TypedCache};
    ///
    /// static BUILT: AtomicUsize = AtomicUsize::new(0);
    /// struct Conn {
    ///     buf: [u8; 64],
    ///     uses: u32,
    /// }
    /// fn conn_ctor(slot: &mut MaybeUninit<Conn>) -> &mut Conn {
    ///     BUILT.fetch_add(1, Ordering::Relaxed);
    ///     slot.write(Conn { buf: [b'-'; 64], uses: 0 })
    /// }
    /// static CONNS: TypedCache<Conn, GlobalPages, PerThread> = TypedCache::new(
    ///     "conn", SlabFlags::HARDENED, slub::Geometry::new(PerThread::OWNED_SLOTS + 1), GlobalPages, PerThread,
    /// )
    /// .with_ctor(conn_ctor);
    ///
    /// let mut c = CONNS.alloc().unwrap();
    /// assert_eq!((c.buf[0], c.uses), (b'-', 0), "constructed");
    /// c.uses += 1;
    /// drop(c); // freed as it is: still constructed, `uses` kept
    /// let c = CONNS.alloc().unwrap();
    /// assert_eq!(c.uses, 1, "the same object, as its last owner left it");
    /// assert_eq!(BUILT.load(Ordering::Relaxed), CONNS.cache().layout().oo.objects as usize);
    /// ```
    ///
    /// A type that is not `Send` cannot have a constructor (its values
    /// would move between threads through the free objects):
    ///
    /// ```compile_fail,E0277
    /// # use std::mem::MaybeUninit;
    /// # use std::rc::Rc;
    /// # use local_lock::std_platform::PerThread;
    /// # use slub::{GlobalPages, SlabFlags, TypedCache};
    /// fn rc_ctor(slot: &mut MaybeUninit<Rc<u8>>) -> &mut Rc<u8> {
    ///     slot.write(Rc::new(0))
    /// }
    /// let c = TypedCache::<Rc<u8>, _, _>::create("rc", SlabFlags::NONE, GlobalPages, PerThread)
    ///     .unwrap()
    ///     .with_ctor(rc_ctor);
    /// ```
    pub const fn with_ctor(mut self, ctor: fn(&mut MaybeUninit<T>) -> &mut T) -> Self
    where
        T: Send,
    {
        // SAFETY: a function-pointer transmute between ABI-compatible
        // signatures: `&mut MaybeUninit<T>`, `&mut T` and `NonNull<u8>`
        // are pointers to sized types (no metadata), which the language
        // defines as ABI-compatible, so calling `ctor` through the new
        // type is calling it; `run_ctor` passes a pointer valid as the
        // `&mut MaybeUninit<T>` (an object of this cache: aligned for `T`,
        // `size_of::<T>()` bytes, held only by the slab being made or the
        // caller) and checks the result.
        let f = unsafe {
            core::mem::transmute::<fn(&mut MaybeUninit<T>) -> &mut T, fn(NonNull<u8>) -> NonNull<u8>>(
                ctor,
            )
        };
        self.cache.set_ctor(Ctor::Typed(f));
        self
    }

    /// Per-CPU sheaves of `capacity` objects ([`KmemCache::with_sheaves`]).
    ///
    /// ```
    /// use local_lock::std_platform::PerThread;
    /// use slub::{GlobalPages, SlabFlags, TypedCache};
    /// static PIDS: TypedCache<u32, GlobalPages, PerThread> = TypedCache::new(
    ///     "pid", SlabFlags::HARDENED, slub::Geometry::new(PerThread::OWNED_SLOTS + 1), GlobalPages, PerThread,
    /// )
    /// .with_sheaves(32);
    /// assert_eq!(*PIDS.new_box(7), 7);
    /// assert_eq!(PIDS.cache().sheaf_capacity(), 32);
    /// ```
    ///
    /// # Panics
    ///
    /// As [`KmemCache::with_sheaves`].
    pub const fn with_sheaves(mut self, capacity: usize) -> Self {
        self.cache.set_sheaves(capacity);
        self
    }

    /// A constructed object (`kmem_cache_alloc` on a cache with a
    /// constructor, see [`with_ctor`](Self::with_ctor)); `None` when the
    /// page allocator has no slab to give.
    ///
    /// # Panics
    ///
    /// If the cache has no constructor (there is no `T` to hand out: use
    /// [`try_new`](Self::try_new)).
    #[track_caller]
    pub fn alloc(&self) -> Option<CacheBox<'_, T, S, P, N>> {
        assert!(
            self.cache.has_ctor(),
            "TypedCache::alloc({}): no constructor (use try_new)",
            self.cache.name()
        );
        let p = self.cache.alloc()?;
        Some(CacheBox {
            ptr: p.cast::<T>(),
            cache: self,
        })
    }

    /// The untyped cache (statistics, `slabinfo`, `shrink`, `validate`).
    pub fn cache(&self) -> &KmemCache<S, P, N> {
        &self.cache
    }

    /// Moves `value` into a new object; [`OutOfMemory`] (holding `value`)
    /// when the page allocator has no slab to give. With a constructor
    /// ([`with_ctor`](Self::with_ctor)) the object's constructed `T` is
    /// dropped and replaced by `value`.
    #[track_caller]
    pub fn try_new(&self, value: T) -> Result<CacheBox<'_, T, S, P, N>, OutOfMemory<T>> {
        let Some(p) = self.cache.alloc() else {
            return Err(OutOfMemory {
                cache: self.cache.name(),
                value,
            });
        };
        let p = p.cast::<T>();
        if self.cache.has_ctor() {
            // SAFETY: a constructed `T` (see `with_ctor`), ours: the
            // assignment drops it.
            unsafe { *p.as_ptr() = value };
        } else {
            // SAFETY: a fresh object of at least `size_of::<T>()` bytes
            // aligned for `T` (the cache's layout).
            unsafe { p.as_ptr().write(value) };
        }
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
/// `T` and frees the object to its cache (with a constructor, frees it
/// with its `T` kept constructed: see [`TypedCache::with_ctor`]).
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
/// A box frees into the cache it came from, on drop: safe code cannot
/// free it into another one (of another type, or of the same type),
/// since the only ways to split a box from its cache,
/// [`into_raw`](CacheBox::into_raw) then `KmemCache::free` or
/// [`from_raw`](CacheBox::from_raw), are `unsafe`:
///
/// ```compile_fail,E0308
/// # use local_lock::std_platform::PerThread;
/// # use slub::{CacheBox, GlobalPages, SlabFlags, TypedCache};
/// # static SMALL: TypedCache<u32, GlobalPages, PerThread> =
/// #     TypedCache::new("small", SlabFlags::NONE, slub::Geometry::new(PerThread::OWNED_SLOTS + 1), GlobalPages, PerThread);
/// # static LARGE: TypedCache<u64, GlobalPages, PerThread> =
/// #     TypedCache::new("large", SlabFlags::NONE, slub::Geometry::new(PerThread::OWNED_SLOTS + 1), GlobalPages, PerThread);
/// let b = SMALL.new_box(1);
/// // A box of u32s is not a box of LARGE's u64s.
/// let wrong: CacheBox<'static, u64, GlobalPages, PerThread> = b;
/// ```
///
/// ```compile_fail,E0133
/// # use local_lock::std_platform::PerThread;
/// # use slub::{CacheBox, GlobalPages, SlabFlags, TypedCache};
/// # static A: TypedCache<u64, GlobalPages, PerThread> =
/// #     TypedCache::new("a", SlabFlags::NONE, slub::Geometry::new(PerThread::OWNED_SLOTS + 1), GlobalPages, PerThread);
/// # static B: TypedCache<u64, GlobalPages, PerThread> =
/// #     TypedCache::new("b", SlabFlags::NONE, slub::Geometry::new(PerThread::OWNED_SLOTS + 1), GlobalPages, PerThread);
/// let b = A.new_box(1);
/// // Freeing A's object into B needs `unsafe` (the caller's promise).
/// B.cache().free(CacheBox::into_raw(b).cast());
/// ```
///
/// A box of a type that is not `Send` stays on its thread:
///
/// ```compile_fail,E0277
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

    /// Takes the value out and frees the object (a cache with a
    /// constructor constructs the object again first).
    pub fn into_inner(b: Self) -> T {
        let b = ManuallyDrop::new(b);
        // SAFETY: the box's live `T`, read once; the object is freed below
        // and the box is not dropped.
        let v = unsafe { b.ptr.as_ptr().read() };
        // Objects of a constructor's cache are freed constructed.
        b.cache.cache.run_ctor(b.ptr.as_ptr().expose_provenance());
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
        // SAFETY: the box's live `T`, dropped once (unless the cache keeps
        // it constructed); then its object, freed once into the cache it
        // came from.
        unsafe {
            if !self.cache.cache.has_ctor() {
                core::ptr::drop_in_place(self.ptr.as_ptr());
            }
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
