/* Busy loops that load the machine for a test or a benchmark: n child
 * processes spinning at nice 0, each bounded in time by alarm(max_seconds)
 * and dying with the parent (PR_SET_PDEATHSIG), so none outlives a crash.
 * busy_loops_stop kills and reaps them. */
#ifndef KVS_TEST_BUSY_LOOPS_H
#define KVS_TEST_BUSY_LOOPS_H

#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static inline int busy_loops_start(pid_t *kids, int n, unsigned max_seconds) {
    int started = 0;
    for (; started < n; started++) {
        pid_t p = fork();
        if (p < 0) break;
        if (p == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            alarm(max_seconds);
            for (volatile unsigned long x = 0;; x++) {
            }
        }
        kids[started] = p;
    }
    return started;
}

static inline void busy_loops_stop(pid_t *kids, int n) {
    for (int i = 0; i < n; i++) {
        kill(kids[i], SIGKILL);
        waitpid(kids[i], NULL, 0);
    }
}

#endif
