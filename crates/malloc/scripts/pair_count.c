/* Instruction counts of mm-malloc's malloc + free under callgrind
 * (ci/icount.sh), as benches/examples/pair_count.rs counts GlobalSlub's:
 *
 *   cc -O2 -o pair_count crates/malloc/scripts/pair_count.c -ldl
 *   LD_PRELOAD=target/release/libmm_malloc.so valgrind --tool=callgrind \
 *       --callgrind-out-file=/dev/null ./pair_count SHAPE SIZE N
 *
 * Run it with two N: the difference of the totals over the difference of
 * N is one step. SHAPE "pair": malloc(SIZE), touch, free; "churn": a ring
 * of 64 live objects, each step frees a random one and allocates 16..1023
 * bytes in its place (SIZE unused); "batch": 1024 mallocs of SIZE, then
 * their frees (N a multiple of 1024); "usable": malloc(SIZE),
 * malloc_usable_size, free (sqlite3 asks the size of each of its blocks);
 * "realloc": malloc(SIZE), realloc to 2 * SIZE (a move to another class),
 * free; "realloc0": realloc(NULL, SIZE), free; "cycle": 16384 mallocs of
 * SIZE, then their frees (N a multiple of 16384: the slab paths). valgrind does not implement rseq, so
 * the library is told to run its restartable per-CPU paths as CPU 0
 * (mm_malloc_count_as_cpu0, found with dlsym: under any other allocator
 * the program runs and counts that allocator). */
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((constructor(101))) static void count_as_cpu0(void) {
    int (*f)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mm_malloc_count_as_cpu0");
    if (f && !f())
        fputs("pair_count: mm_malloc_count_as_cpu0 failed: counting the locked paths\n", stderr);
}

/* N objects of SIZE in rounds of K: K mallocs, then their frees in
 * allocation order (K at most 16384) */
static void rounds(long n, int k, size_t size) {
    static void *objs[16384];
    for (long i = 0; i < n; i += k) {
        for (int j = 0; j < k; j++)
            objs[j] = malloc(size);
        for (int j = 0; j < k; j++)
            free(objs[j]);
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fputs("usage: pair_count pair|churn|batch|usable|realloc SIZE N\n", stderr);
        return 2;
    }
    volatile size_t size = strtoul(argv[2], NULL, 10);
    long n = strtol(argv[3], NULL, 10);
    if (!strcmp(argv[1], "pair")) {
        for (long i = 0; i < n; i++) {
            char *p = malloc(size);
            *(volatile char *)p = 1;
            free(p);
        }
    } else if (!strcmp(argv[1], "churn")) {
        void *ring[64];
        for (int i = 0; i < 64; i++)
            ring[i] = malloc(16 + i * 15);
        unsigned x = 1;
        for (long i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            int k = (x >> 8) & 63;
            free(ring[k]);
            ring[k] = malloc(16 + ((x >> 16) & 1007));
        }
        for (int i = 0; i < 64; i++)
            free(ring[i]);
    } else if (!strcmp(argv[1], "batch")) {
        /* N objects in rounds of 1024: allocate 1024, then free them in
         * allocation order (one step = one object's malloc + free) */
        rounds(n, 1024, size);
    } else if (!strcmp(argv[1], "usable")) {
        size_t sum = 0;
        for (long i = 0; i < n; i++) {
            char *p = malloc(size);
            sum += malloc_usable_size(p);
            free(p);
        }
        if (sum < size * n)
            return 1;
    } else if (!strcmp(argv[1], "realloc")) {
        for (long i = 0; i < n; i++) {
            char *p = malloc(size);
            *(volatile char *)p = 1;
            p = realloc(p, 2 * size);
            *(volatile char *)p = 1;
            free(p);
        }
    } else if (!strcmp(argv[1], "realloc0")) {
        /* realloc(NULL, SIZE) (a malloc: python makes many), free; the
         * null through a volatile, or the compiler calls malloc */
        char *volatile none = NULL;
        for (long i = 0; i < n; i++) {
            char *p = realloc(none, size);
            *(volatile char *)p = 1;
            free(p);
        }
    } else if (!strcmp(argv[1], "cycle")) {
        /* N objects in rounds of 16384: far more than the sheaves and the
         * barn hold, so the objects go back to their slabs (sheaf
         * flushes) and come out of them again (refills, new slabs), as in
         * a program whose live set swings */
        rounds(n, 16384, size);
    } else {
        fputs("pair_count: shape is pair, churn, batch, usable, realloc, realloc0 or cycle\n", stderr);
        return 2;
    }
    return 0;
}
