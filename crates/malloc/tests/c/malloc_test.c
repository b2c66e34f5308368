/* The C test suite of mm-malloc: every entry point and errno case.
 * Run under LD_PRELOAD=libmm_malloc.so, or linked with libmm_malloc.a
 * (-DMM_STATIC). Prints "ok N" per check and exits non-zero on failure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mm_malloc.h"

static int checks, failures;
#define CHECK(c)                                                              \
    do {                                                                      \
        checks++;                                                             \
        if (!(c)) {                                                           \
            failures++;                                                       \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);      \
        }                                                                     \
    } while (0)

static int aligned(void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

/* C23 entry points glibc 2.36 lacks: linked directly when static, found by
 * dlsym under LD_PRELOAD. */
typedef void (*free_sized_fn)(void *, size_t);
typedef void (*free_aligned_sized_fn)(void *, size_t, size_t);
typedef void (*cfree_fn)(void *);
static void *sym(const char *name) {
#ifdef MM_STATIC
    if (!strcmp(name, "free_sized")) return (void *)free_sized;
    if (!strcmp(name, "free_aligned_sized")) return (void *)free_aligned_sized;
    if (!strcmp(name, "cfree")) return (void *)cfree;
    return NULL;
#else
    return dlsym(RTLD_DEFAULT, name);
#endif
}

static void test_active(void) {
    /* kmalloc-128: glibc would give 104 or 120. (Warm: a cold class may
     * lend from a larger one, see below.) */
    for (int i = 0; i < 40; i++) free(malloc(100));
    void *p = malloc(100);
    CHECK(malloc_usable_size(p) == 128);
    free(p);
    /* A class nothing asked for yet (cold) takes its first 32 objects
     * (COLD_OBJECTS) from a larger class: malloc-3584 from kmalloc-4k
     * (not under MM_SLUB_DEBUG: each class its own cache). */
    int lending = !getenv("MM_SLUB_DEBUG");
    p = malloc(3500);
    if (lending)
        CHECK(malloc_usable_size(p) > 3584 && malloc_usable_size(p) <= 2 * 3584);
    else
        CHECK(malloc_usable_size(p) == 3584);
    free(p);
    for (int i = 0; i < 40; i++) free(malloc(3500));
    p = malloc(3500);
    CHECK(malloc_usable_size(p) == 3584);
    free(p);
    /* The intermediate classes between 1 and 8 KiB (malloc-4608, -1536),
     * warm (built). */
    for (int i = 0; i < 40; i++) {
        free(malloc(4400));
        free(malloc(1300));
    }
    p = malloc(4400);
    CHECK(malloc_usable_size(p) == 4608);
    CHECK(realloc(p, 4600) == p);
    free(p);
    p = malloc(1300);
    CHECK(malloc_usable_size(p) == 1536);
    free(p);
    p = malloc(2048);
    CHECK(malloc_usable_size(p) == 2048);
    free(p);
}

static void test_malloc(void) {
    void *a = malloc(0), *b = malloc(0);
    CHECK(a && b && a != b);
    free(a);
    free(b);
    for (size_t n = 1; n <= 20000; n += (n < 300 ? 1 : n / 7)) {
        unsigned char *p = malloc(n);
        CHECK(p != NULL);
        if (!p) continue;
        CHECK(aligned(p, n > 8 ? 16 : 8));
        size_t u = malloc_usable_size(p);
        CHECK(u >= n);
        memset(p, 0xa5, u);
        free(p);
    }
    errno = 0;
    CHECK(malloc(SIZE_MAX) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(malloc((size_t)PTRDIFF_MAX + 1) == NULL && errno == ENOMEM);
    free(NULL);
}

static void test_large(void) {
    size_t sizes[] = {8193, 12288, 100000, 1 << 20, (4 << 20) - 1, 4 << 20,
                      (4 << 20) + 1, 5 << 20, 64 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        unsigned char *p = malloc(n);
        CHECK(p != NULL && aligned(p, 16));
        CHECK(malloc_usable_size(p) >= n);
        p[0] = 1;
        p[n - 1] = 2;
        free(p);
    }
}

static void test_calloc(void) {
    for (size_t n = 1; n < 70000; n = n * 3 + 1) {
        unsigned char *d = malloc(n);
        memset(d, 0xff, n);
        free(d);
        unsigned char *p = calloc(1, n);
        CHECK(p != NULL);
        size_t nz = 0;
        for (size_t i = 0; i < n; i++) nz += p[i] != 0;
        CHECK(nz == 0);
        free(p);
    }
    unsigned char *big = calloc(6, 1 << 20);
    CHECK(big && big[0] == 0 && big[(6 << 20) - 1] == 0);
    free(big);
    void *z = calloc(0, 0);
    CHECK(z != NULL);
    free(z);
    errno = 0;
    CHECK(calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(calloc(1, SIZE_MAX) == NULL && errno == ENOMEM);
}

/* A "Vm...: N kB" field of /proc/self/status (VmHWM: the peak resident
 * KiB, VmRSS: now), or -1. */
static long status_kib(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && sscanf(line + n, ": %ld", &v) == 1) break;
    fclose(f);
    return v;
}
static long vm_hwm_kib(void) { return status_kib("VmHWM"); }
static long vm_rss_kib(void) { return status_kib("VmRSS"); }

/* realloc of a direct mapping resizes it with mremap, as glibc does: the
 * old and the new block are never resident at once (run first, while the
 * process's peak is small). */
static void test_realloc_remap(void) {
    size_t n = 64 << 20;
    char *p = malloc(n);
    CHECK(p != NULL);
    memset(p, 'm', n);
    long before = vm_hwm_kib();
    char *q = realloc(p, 2 * n);
    long after = vm_hwm_kib();
    CHECK(q != NULL && q[0] == 'm' && q[n - 1] == 'm');
    CHECK(malloc_usable_size(q) >= 2 * n);
    /* a copy would have touched 64 MiB more */
    CHECK(before > 0 && after - before < 16 << 10);
    memset(q + n, 'n', n);
    char *r = realloc(q, n / 2); /* shrunk in place */
    CHECK(r == q && r[0] == 'm' && r[n / 2 - 1] == 'm');
    CHECK(malloc_usable_size(r) >= n / 2 && malloc_usable_size(r) < n);
    free(r);
}

/* Freed memory goes back to the OS within milliseconds of the next slow
 * paths (the purge policy of pages.rs), not after seconds and only above
 * 32 MiB (the std heap's): 48 MB of small objects freed, RSS drops. */
static void test_purge_after_free(void) {
    enum { N = 240000 };
    static void *objs[N];
    long base = vm_rss_kib();
    for (int i = 0; i < N; i++) {
        objs[i] = malloc(200);
        memset(objs[i], 1, 200);
    }
    long full = vm_rss_kib();
    CHECK(full - base > 40 << 10);
    for (int i = 0; i < N; i++) free(objs[i]);
    for (int k = 0; k < 20; k++) {
        usleep(15000);
        /* some slow paths: large blocks in and out */
        for (int j = 0; j < 8; j++) free(malloc(100000));
    }
    long after = vm_rss_kib();
    /* (the trigger above is a heap block only under the default mmap
     * threshold) */
    if (!getenv("MM_MMAP_THRESHOLD")) CHECK(after - base < 8 << 10);
}

static void test_realloc(void) {
    char *p = realloc(NULL, 100);
    CHECK(p != NULL);
    memset(p, 'x', 100);
    CHECK(realloc(p, 120) == p); /* kmalloc-128: in place */
    char *q = realloc(p, 5000);
    CHECK(q != NULL && q[0] == 'x' && q[99] == 'x');
    memset(q, 'y', 5000);
    char *r = realloc(q, 10 << 20); /* to a direct mapping */
    CHECK(r && r[0] == 'y' && r[4999] == 'y');
    memset(r, 'z', 10 << 20);
    char *s = realloc(r, 50);
    CHECK(s && s[0] == 'z' && s[49] == 'z');
    CHECK(malloc_usable_size(s) < 100); /* shrunk to a small class */
    errno = 0;
    CHECK(realloc(s, SIZE_MAX) == NULL && errno == ENOMEM);
    CHECK(s[0] == 'z'); /* left as it was */
    /* glibc: realloc(p, 0) frees p and returns NULL. */
    CHECK(realloc(s, 0) == NULL);
    void *t = malloc(10);
    errno = 0;
    CHECK(reallocarray(t, SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
    int *u = reallocarray(t, 100, sizeof(int));
    CHECK(u != NULL);
    u[99] = 1;
    free(u);
}

static void test_aligned(void) {
    void *p = (void *)1;
    CHECK(posix_memalign(&p, 3, 10) == EINVAL && p == (void *)1);
    CHECK(posix_memalign(&p, 4, 10) == EINVAL && p == (void *)1);
    CHECK(posix_memalign(&p, 0, 10) == EINVAL && p == (void *)1);
    errno = 0;
    CHECK(posix_memalign(&p, 64, SIZE_MAX - 100) == ENOMEM && p == (void *)1);
    CHECK(errno == ENOMEM); /* as glibc leaves it */
    size_t aligns[] = {8, 16, 32, 64, 256, 4096, 8192, 1 << 16, 1 << 21, 8 << 20};
    for (size_t i = 0; i < sizeof aligns / sizeof *aligns; i++) {
        size_t sizes[] = {0, 1, 100, 5000, 70000};
        for (size_t j = 0; j < 5; j++) {
            CHECK(posix_memalign(&p, aligns[i], sizes[j]) == 0);
            CHECK(p && aligned(p, aligns[i]));
            CHECK(malloc_usable_size(p) >= sizes[j]);
            memset(p, 1, sizes[j]);
            free(p);
            void *q = aligned_alloc(aligns[i], sizes[j]);
            CHECK(q && aligned(q, aligns[i]));
            free(q);
            q = memalign(aligns[i], sizes[j]);
            CHECK(q && aligned(q, aligns[i]));
            free(q);
        }
    }
    errno = 0;
    CHECK(aligned_alloc(3, 10) == NULL && errno == EINVAL);
    void *m = memalign(24, 10); /* rounded up to 32 */
    CHECK(m && aligned(m, 32));
    free(m);
    errno = 0;
    CHECK(memalign(SIZE_MAX, 1) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(memalign(64, SIZE_MAX - 100) == NULL && errno == ENOMEM);
    long ps = sysconf(_SC_PAGESIZE);
    void *v = valloc(10);
    CHECK(v && aligned(v, ps));
    free(v);
    void *pv = pvalloc(1);
    CHECK(pv && aligned(pv, ps) && malloc_usable_size(pv) >= (size_t)ps);
    free(pv);
    pv = pvalloc(0);
    CHECK(pv && aligned(pv, ps));
    free(pv);
    errno = 0;
    CHECK(pvalloc(SIZE_MAX) == NULL && errno == ENOMEM);
}

static void test_frees(void) {
    free_sized_fn fs = (free_sized_fn)sym("free_sized");
    free_aligned_sized_fn fas = (free_aligned_sized_fn)sym("free_aligned_sized");
    cfree_fn cf = (cfree_fn)sym("cfree");
    CHECK(fs && fas && cf);
    if (!fs || !fas || !cf) return;
    fs(malloc(77), 77);
    fs(malloc(6 << 20), 6 << 20);
    fas(aligned_alloc(256, 300), 256, 300);
    cf(malloc(5));
    fs(NULL, 0);
    CHECK(malloc_usable_size(NULL) == 0);
}

static void test_info(void) {
    struct mallinfo2 a = mallinfo2();
    CHECK(a.arena > 0);
    void *ps[1000];
    for (int i = 0; i < 1000; i++) ps[i] = malloc(1000);
    struct mallinfo2 b = mallinfo2();
    CHECK(b.uordblks >= a.uordblks + 500000);
    for (int i = 0; i < 1000; i++) free(ps[i]);
    void *big = malloc(16 << 20);
    struct mallinfo2 c = mallinfo2();
    CHECK(c.hblks >= 1);
    free(big);
    void *mb[64];
    for (int i = 0; i < 64; i++) {
        mb[i] = malloc(1 << 20);
        memset(mb[i], 1, 1 << 20);
    }
    for (int i = 0; i < 64; i++) free(mb[i]);
    /* Objects freed just before the trim: the pages of their slabs are
       what it gives back. (The first ones' slabs could be purged by the
       decay, 100 ms, while the loop above runs on a loaded machine, and
       the trim then found nothing: a CI run failed so.) */
    for (int i = 0; i < 1000; i++) ps[i] = malloc(1000);
    for (int i = 0; i < 1000; i++) free(ps[i]);
    CHECK(malloc_trim(0) == 1);
    struct mallinfo old = mallinfo();
    CHECK(old.arena > 0);
    malloc_stats();
}

/* Threads: churn with frees on other threads, and many short threads. */
#define NT 8
#define RING 4096
static void *shared[NT][RING];
static void *churn(void *arg) {
    long t = (long)arg;
    unsigned x = 12345 + t;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < RING; i++) {
            x = x * 1103515245 + 12345;
            size_t n = (x >> 8) % (x & 1 ? 200 : 12000) + 1;
            void **slot = &shared[(t + round) % NT][i];
            void *p = malloc(n);
            memset(p, (int)t, n < 64 ? n : 64);
            void *old = __atomic_exchange_n(slot, p, __ATOMIC_ACQ_REL);
            free(old);
        }
    }
    return NULL;
}
static void *one_alloc(void *arg) {
    (void)arg;
    free(malloc(100));
    return malloc(40); /* freed by the joiner */
}
static void test_threads(void) {
    pthread_t th[NT];
    for (long t = 0; t < NT; t++) CHECK(pthread_create(&th[t], 0, churn, (void *)t) == 0);
    for (int t = 0; t < NT; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < NT; t++)
        for (int i = 0; i < RING; i++) free(shared[t][i]);
    int ok = 1;
    for (int i = 0; i < 3000; i++) {
        pthread_t one;
        void *r = NULL;
        if (pthread_create(&one, 0, one_alloc, NULL) != 0) { ok = 0; break; }
        pthread_join(one, &r);
        ok &= r != NULL;
        free(r);
    }
    CHECK(ok);
}

/* fork from a multithreaded process: the children allocate freely. */
static volatile int stop;
static void *spin_alloc(void *arg) {
    (void)arg;
    while (!stop) free(malloc(1000 + (rand() & 4095)));
    return NULL;
}
static void test_fork(void) {
    pthread_t th[3];
    for (int t = 0; t < 3; t++) pthread_create(&th[t], 0, spin_alloc, NULL);
    int ok = 1;
    for (int i = 0; i < 50; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (int j = 0; j < 1000; j++) free(malloc(j * 13 + 1));
            void *b = malloc(5 << 20);
            free(b);
            _exit(0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    stop = 1;
    for (int t = 0; t < 3; t++) pthread_join(th[t], NULL);
    CHECK(ok);
}

/* Bad frees abort (reported on stderr), never corrupt silently. */
static int child_aborts(void (*f)(void)) {
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        f();
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}
static void bad_foreign(void) { static char x[64]; free(x + 16); }
static void bad_double(void) {
    void *p = malloc(64);
    free(p);
    free(p);
}
static void bad_interior(void) {
    char *p = malloc(64);
    free(p + 8);
}
static void bad_large_interior(void) {
    char *p = malloc(6 << 20);
    free(p + 4096);
}
/* malloc_usable_size and realloc of an interior pointer: their page-map
 * check refuses it and the descriptor path reports it. */
static void bad_usable_interior(void) {
    char *p = malloc(64);
    (void)malloc_usable_size(p + 16);
}
static void bad_realloc_interior(void) {
    char *p = malloc(200);
    (void)realloc(p + 8, 400);
}
static void bad_usable_foreign(void) {
    static char x[64];
    (void)malloc_usable_size(x + 16);
}
static void test_bad(void) {
    CHECK(child_aborts(bad_usable_interior));
    CHECK(child_aborts(bad_realloc_interior));
    CHECK(child_aborts(bad_usable_foreign));
    CHECK(child_aborts(bad_foreign));
    CHECK(child_aborts(bad_double));
    CHECK(child_aborts(bad_interior));
    CHECK(child_aborts(bad_large_interior));
}

/* fork while the process is single-threaded (the handlers leave the cache
 * locks alone then, as glibc's fork leaves its malloc's). */
static void test_fork_single_threaded(void) {
    void *keep = malloc(300);
    pid_t pid = fork();
    if (pid == 0) {
        for (int j = 0; j < 2000; j++) free(malloc(j * 7 + 1));
        free(keep);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    free(keep);
}

int main(void) {
    test_realloc_remap();
    test_purge_after_free();
    test_fork_single_threaded();
    test_active();
    test_malloc();
    test_large();
    test_calloc();
    test_realloc();
    test_aligned();
    test_frees();
    test_info();
    test_threads();
    test_fork();
    test_bad();
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
