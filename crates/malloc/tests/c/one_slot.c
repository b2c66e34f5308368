/* A process of one thread keeps one set of per-CPU caches whichever CPU
 * it runs on, and a child it forks starts on them (the restartable
 * sections index by the rseq concurrency id, mm_cid). Prints "same" when
 * the object freed on CPU 0 comes back on CPU 1 and in a child forked
 * and pinned to CPU 1, "different" otherwise, "skip" when the test cannot
 * tell (fewer than 2 CPUs allowed, or a kernel without mm_cid). Run
 * under LD_PRELOAD by tests/c_suite.rs. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/wait.h>
#include <unistd.h>

static int pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return sched_setaffinity(0, sizeof s, &s) == 0 && sched_getcpu() == cpu;
}

int main(void) {
    cpu_set_t all;
    if (sched_getaffinity(0, sizeof all, &all) || !CPU_ISSET(0, &all) || !CPU_ISSET(1, &all) ||
        getauxval(27 /* AT_RSEQ_FEATURE_SIZE */) < 28) {
        puts("skip");
        return 0;
    }
    /* Warm the class so its caches exist on the CPU first used. */
    if (!pin(0)) return 1;
    for (int i = 0; i < 100; i++) free(malloc(48));
    void *p = malloc(48);
    free(p);
    if (!pin(1)) return 1;
    void *q = malloc(48);
    int same = q == p;
    free(q);
    /* The child: forked on CPU 0, pinned to CPU 1. */
    if (!pin(0)) return 1;
    int fd[2];
    if (pipe(fd)) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        char r = pin(1) ? (malloc(48) == p ? 's' : 'd') : 'e';
        (void)!write(fd[1], &r, 1);
        _exit(0);
    }
    char r = 'e';
    (void)!read(fd[0], &r, 1);
    waitpid(pid, 0, 0);
    if (r == 'e') return 1;
    printf("%s %s\n", same ? "same" : "different", r == 's' ? "same" : "different");
    return 0;
}
