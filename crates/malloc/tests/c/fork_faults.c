/* Page faults a child takes before fork() returns in it, in a
 * single-threaded process (the fork handlers' work): prints the smallest
 * of 5 forks. Run plainly and under LD_PRELOAD by tests/c_suite.rs. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    /* Objects of many classes and some whole pages, so that every layer
     * of the allocator has state. */
    for (int i = 0; i < 1000; i++) free(malloc(i * 13 + 1));
    void *keep[100];
    for (int i = 0; i < 100; i++) keep[i] = malloc(20000);
    long best = -1;
    for (int k = 0; k < 5; k++) {
        int fd[2];
        if (pipe(fd)) return 1;
        pid_t pid = fork();
        if (pid == 0) {
            struct rusage u;
            getrusage(RUSAGE_SELF, &u);
            long n = u.ru_minflt;
            (void)!write(fd[1], &n, sizeof n);
            _exit(0);
        }
        long n = -1;
        (void)!read(fd[0], &n, sizeof n);
        waitpid(pid, 0, 0);
        close(fd[0]);
        close(fd[1]);
        if (best < 0 || n < best) best = n;
    }
    for (int i = 0; i < 100; i++) free(keep[i]);
    printf("%ld\n", best);
    return 0;
}
