//! `kmalloc` above the largest block (4 MiB): a recorded direct mapping
//! of the pages' buddy, which the size-less `kfree` and `ksize` find from
//! the address (issue #18: a C `free` needs it).

use slub::GlobalSlub;

static HEAP: GlobalSlub = GlobalSlub::new();

/// The tests count `HEAP`'s direct mappings: one at a time (the harness
/// runs them on parallel threads).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn kmalloc_above_the_largest_block_is_a_recorded_mapping() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let k = HEAP.kmalloc();
    let gb = HEAP.pages().pcp().source();
    let before = gb.direct_mappings();
    for size in [(4 << 20) + 1, 5 << 20, 33 << 20] {
        let p = k.kmalloc(size, 8).expect("a direct mapping");
        assert_eq!(gb.direct_mappings(), before + 1);
        let ks = k.ksize(p.as_ptr());
        assert!(ks >= size && ks < size + 4096, "ksize {ks} for {size}");
        // SAFETY: ours, `size` bytes.
        unsafe {
            p.as_ptr().write_bytes(7, size);
            k.kfree(p.as_ptr());
        }
        assert_eq!(gb.direct_mappings(), before);
    }
    let z = k.kzalloc(6 << 20, 4096).unwrap();
    assert!(z.as_ptr().addr().is_multiple_of(4096));
    // SAFETY: 6 MiB of fresh (zero) memory of ours.
    unsafe {
        assert_eq!(*z.as_ptr().add((6 << 20) - 1), 0);
        k.kfree(z.as_ptr());
    }
    let a = k.kmalloc(1 << 20, 8 << 20).unwrap();
    assert!(
        a.as_ptr().addr().is_multiple_of(8 << 20),
        "aligned beyond the largest block"
    );
    // SAFETY: ours.
    unsafe { k.kfree(a.as_ptr()) };
}

#[test]
fn kfree_of_an_interior_or_freed_mapping_is_refused() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let k = HEAP.kmalloc();
    let p = k.kmalloc(8 << 20, 8).unwrap();
    // SAFETY: refused before any change (not a block start).
    let e = unsafe { k.try_kfree(p.as_ptr().wrapping_add(4096)) };
    assert!(e.is_err());
    // SAFETY: ours, freed once.
    unsafe { k.try_kfree(p.as_ptr()).unwrap() };
    // SAFETY: refused: already unmapped and forgotten.
    assert!(unsafe { k.try_kfree(p.as_ptr()) }.is_err());
}
