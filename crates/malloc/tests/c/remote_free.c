/* Threads whose first contact with the allocator is a free: the main
 * thread allocates many objects of several sizes, then each new thread
 * only frees its share of them (so its CPU's sheaf fills and flushes,
 * emptied slabs go back to the pages) before it allocates anything. The
 * flush may be the thread's first use of the page lists' per-thread slot,
 * whose TLS registration makes glibc call calloc: the library must serve
 * that nested call. Repeated over rounds; prints "ok" at the end. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define N 20000
#define THREADS 4
static void *objs[N];

static void *freer(void *arg)
{
    long t = (long)arg;
    for (long i = t; i < N; i += THREADS)
        free(objs[i]);
    return NULL;
}

int main(void)
{
    static const size_t sizes[] = {16, 64, 200, 1000, 3000, 5000};
    for (int round = 0; round < 20; round++) {
        for (long i = 0; i < N; i++)
            if (!(objs[i] = malloc(sizes[(i / 64) % 6])))
                return 2;
        pthread_t th[THREADS];
        for (long t = 0; t < THREADS; t++)
            if (pthread_create(&th[t], NULL, freer, (void *)t))
                return 3;
        for (int t = 0; t < THREADS; t++)
            pthread_join(th[t], NULL);
    }
    puts("ok");
    return 0;
}
