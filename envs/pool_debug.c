/* pool_debug.c: the thread pool's promises checked without Python, for AddressSanitizer, UBSan and
 * ThreadSanitizer (tests/test_ocean.py builds and runs it three ways).
 *
 *  1. every item of every job is run exactly once, for 1 to 32 threads (oversubscribed on a small
 *     machine) and counts from 0 to past a range's unit limit, with random short stalls in the work;
 *  2. a slow thread holds back only the piece it is in: the caller takes over the rest of its range;
 *  3. pools whose workers went to sleep on the futex shut down (and pools made and destroyed in a row).
 *
 *   pool_debug [JOBS]     exit 0 when every check passes
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "vecenv.h"

typedef struct Job {
    int* hits;          /* per item: times run in this job */
    unsigned stall;     /* 0: none; else stall on items whose hash is below this */
    pthread_t caller;
    int slow_workers;   /* 1: a worker's call sleeps 10 ms, and every item costs 20 us of work */
    int caller_items;   /* items the caller ran (only the caller writes it) */
} Job;

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void run(void* raw, int start, int end) {
    Job* job = (Job*)raw;
    int caller = pthread_equal(pthread_self(), job->caller);
    if (job->slow_workers && !caller) sleep_us(10000);
    for (int i = start; i < end; i++) {
        job->hits[i]++;
        if (job->slow_workers) /* work the pool measures: its units stay fine enough to take over */
            for (long long until = now_ns() + 20000; now_ns() < until;) {
            }
        if (job->stall && (unsigned)(i * 2654435761u) < job->stall) sleep_us(50);
    }
    if (caller) job->caller_items += end - start;
}

static int exactly_once(int jobs) {
    static const int threads[] = {1, 2, 3, 4, 8, 16, 32};
    static const int counts[] = {0, 1, 2, 3, 7, 31, 32, 33, 100, 1000, 5000};
    int failures = 0;
    for (size_t t = 0; t < sizeof(threads) / sizeof(*threads); t++) {
        ThreadPool* pool = pool_create(threads[t]);
        if (!pool) {
            fprintf(stderr, "pool_create(%d) failed\n", threads[t]);
            return 1;
        }
        for (size_t c = 0; c < sizeof(counts) / sizeof(*counts); c++) {
            int count = counts[c];
            int* hits = calloc((size_t)count + 1, sizeof(int));
            Job job = {hits, 0, pthread_self(), 0, 0};
            for (int j = 0; j < jobs; j++) {
                job.stall = j % 4 == 3 ? 0x01000000u : 0; /* every 4th job: a few stalls, so threads fall behind */
                pool_run(pool, run, &job, count);
                for (int i = 0; i < count; i++) {
                    if (hits[i] != j + 1) {
                        fprintf(stderr, "%d threads, %d items, job %d: item %d ran %d times\n", threads[t], count, j, i,
                                hits[i] - j);
                        failures++;
                        hits[i] = j + 1;
                    }
                }
            }
            free(hits);
        }
        pool_destroy(pool);
        printf("exactly once: %d threads, %d jobs per count: %s\n", threads[t], jobs, failures ? "FAILED" : "ok");
    }
    return failures;
}

static int caller_takes_over(void) {
    /* 2 threads, 64 items of 20 us: the worker sleeps 10 ms in every call, the caller does not. The
     * caller finishes its own 32 items, then takes what the worker has not started (about half of the
     * worker's range: the worker's first piece is half of it). */
    ThreadPool* pool = pool_create(2);
    int hits[64] = {0}, failures = 0;
    Job job = {hits, 0, pthread_self(), 1, 0};
    for (int j = 0; j < 20; j++) {
        job.caller_items = 0;
        pool_run(pool, run, &job, 64);
        if (job.caller_items < 40) {
            fprintf(stderr, "job %d: the caller ran %d of 64 items while the worker slept\n", j, job.caller_items);
            failures++;
        }
    }
    for (int i = 0; i < 64; i++) failures += hits[i] != 20;
    pool_destroy(pool);
    printf("the caller takes over a slow worker's range: %s\n", failures ? "FAILED" : "ok");
    return failures;
}

static int sleeping_workers_shut_down(void) {
    int hits[256] = {0};
    Job job = {hits, 0, pthread_self(), 0, 0};
    for (int k = 0; k < 10; k++) {
        ThreadPool* pool = pool_create(1 + k % 5);
        pool_run(pool, run, &job, 256);
        sleep_us(k % 2 ? 100000 : 0); /* past the spin and the yields: the workers sleep on the futex */
        pool_run(pool, run, &job, 256);
        pool_destroy(pool);
    }
    int failures = 0;
    for (int i = 0; i < 256; i++) failures += hits[i] != 20;
    printf("pools with sleeping workers shut down: %s\n", failures ? "FAILED" : "ok");
    return failures;
}

int main(int argc, char** argv) {
    int jobs = argc > 1 ? atoi(argv[1]) : 50;
    int failures = exactly_once(jobs);
    failures += caller_takes_over();
    failures += sleeping_workers_shut_down();
    return failures ? 1 : 0;
}
