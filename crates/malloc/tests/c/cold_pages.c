/* Objects of large classes that a program asks a few of are blocks of
 * whole pages until the class's cold count runs out (caches.rs,
 * COLD_PAGES_FROM): with N objects of 4096 and 8192 bytes (argv[1]) live
 * at once, MM_STATS=1's slabinfo lists kmalloc-4k and kmalloc-8k only
 * when N is beyond that count. Every object is usable and freed. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    size_t sizes[] = {4096, 8192, 3000};
    void *p[3][64];
    if (n > 64)
        return 2;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < n; i++) {
            p[k][i] = malloc(sizes[k]);
            if (!p[k][i] || malloc_usable_size(p[k][i]) < sizes[k])
                return 1;
            memset(p[k][i], 0x5a, sizes[k]);
        }
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < n; i++) {
            unsigned char *c = p[k][i];
            if (c[0] != 0x5a || c[sizes[k] - 1] != 0x5a)
                return 3;
            free(c);
        }
    return 0;
}
