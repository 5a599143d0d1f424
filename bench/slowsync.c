/*
 * A disk whose syncs are slow (an SD card's fsync costs 10-100 ms), for the benches:
 * fsync and fdatasync sleep SYNC_DELAY_MS (default 20) before doing their work.
 *
 *     gcc -shared -fPIC -O2 -o /tmp/slowsync.so bench/slowsync.c -ldl
 *     LD_PRELOAD=/tmp/slowsync.so SYNC_DELAY_MS=20 \
 *         python bench/regions.py --parts at --only defaults --at-cameras 12
 *
 * The agent, its spool's SQLite and the bench's broker all inherit it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static void slow(void) {
    const char *env = getenv("SYNC_DELAY_MS");
    long ms = env ? atol(env) : 20;
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

int fsync(int fd) {
    static int (*real)(int) = NULL;
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    slow();
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int) = NULL;
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    slow();
    return real(fd);
}
