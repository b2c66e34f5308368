/* mm_malloc.h: the C interface of mm-malloc (crates/malloc), the SLUB
 * stack of mm-rs (kmalloc over pcp over the buddy) as the process's
 * malloc.
 *
 * Use it without recompiling:   LD_PRELOAD=/path/to/libmm_malloc.so program
 * or link it:                   cc prog.c -L/path/to -lmm_malloc
 *                               (static: prog.c /path/to/libmm_malloc.a -lpthread -ldl -lm)
 *
 * The standard entry points (malloc, free, calloc, realloc, reallocarray,
 * posix_memalign, aligned_alloc, memalign, valloc, pvalloc,
 * malloc_usable_size, malloc_trim, mallinfo, mallinfo2, malloc_stats)
 * keep their <stdlib.h>/<malloc.h> prototypes; this header declares them
 * again for systems whose headers lack some, plus the C23 and old names.
 *
 * Environment: MM_STATS=1 prints slabinfo, SLUB and pcp statistics and
 * the buddyinfo to stderr at exit (what malloc_stats() prints).
 */
#ifndef MM_MALLOC_H
#define MM_MALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void *malloc(size_t size);
void free(void *p);
void *calloc(size_t n, size_t size);
void *realloc(void *p, size_t size);
void *reallocarray(void *p, size_t n, size_t size);
int posix_memalign(void **out, size_t align, size_t size);
void *aligned_alloc(size_t align, size_t size);
void *memalign(size_t align, size_t size);
void *valloc(size_t size);
void *pvalloc(size_t size);
size_t malloc_usable_size(void *p);
int malloc_trim(size_t pad);
void malloc_stats(void);

/* C23 */
void free_sized(void *p, size_t size);
void free_aligned_sized(void *p, size_t align, size_t size);
/* An old name for free (SunOS, kept by glibc until 2.26). */
void cfree(void *p);

/* Testing only: run the per-CPU restartable paths as if on CPU 0 under
 * valgrind (no rseq there), for instruction counts (ci/icount.sh). One
 * thread only, called before the first allocation; 1 if it could. */
int mm_malloc_count_as_cpu0(void);

/* glibc's struct mallinfo2, with this allocator's figures:
 * arena: heap bytes mapped from the OS; ordblks: free buddy blocks;
 * smblks: slabs; hblks: live direct mappings (above 4 MiB);
 * fsmblks: bytes of free slab objects; uordblks: bytes in use;
 * fordblks: free bytes (free pages + free slab objects). */
#ifndef _MALLOC_H /* <malloc.h> declares them already */
struct mallinfo2 {
    size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks,
        uordblks, fordblks, keepcost;
};
struct mallinfo2 mallinfo2(void);
#endif

#ifdef __cplusplus
}
#endif

#endif /* MM_MALLOC_H */
