/* Writes one byte past a malloc'd block (a 32-byte request: the whole
 * object of kmalloc-32), then frees it. Under MM_SLUB_DEBUG=Z the free
 * finds the red zone overwritten and the library aborts with slub's
 * report (the cache, the object's address); without it the program runs
 * to its end as it does under glibc: the overwritten byte is chosen to
 * land in another live block of the program (the block after it, when
 * one of 64 is there), not in the allocator's free objects. Prints the
 * block's address first, for the test to match. */
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    char *b[64];
    for (int i = 0; i < 64; i++)
        if (!(b[i] = malloc(32)))
            return 2;
    char *volatile p = b[0];
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 64; j++)
            if (b[j] == b[i] + 32 || b[j] == b[i] + 40)
                p = b[i];
    printf("block %p\n", (void *)p);
    fflush(stdout);
    p[32] = 'x';
    for (int i = 0; i < 64; i++)
        free(b[i]);
    puts("done");
    return 0;
}
