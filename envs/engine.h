/* engine.h: the rollout engine's native step loop.
 *
 * The agents of a VecEnv are split into B buffers of consecutive envs. Each buffer is a view of its
 * slice of the parent's envs (the same env structs, so seeds, state and logs stay the parent's) with
 * its own env threads, and, for a horizon, its own pthread that runs
 *
 *     for t in 0..horizon-1:  record(t)  ->  policy(b, t)  ->  check actions  ->  step the buffer's envs
 *
 * record(t) copies the buffer's rewards and done flags (terminal | truncated), as the policy sees them
 * at step t, into caller-owned [horizon, agents] history arrays (optional). The policy step is a
 * function pointer: the binding's Python callback (takes the GIL) or a CUDA graph launch followed by a
 * wait on the buffer's stream (driver API resolved with dlopen, so nothing here links against CUDA).
 *
 * An error in one buffer (a failed policy step, an action out of range) stops every buffer at its next
 * step; engine_join returns after all threads have ended. Nothing here touches Python.
 */
#ifndef OCEAN_ENGINE_H
#define OCEAN_ENGINE_H

#include "vecenv.h"

#define ENGINE_MAX_BUFFERS 256
#define ENGINE_ERR 512

typedef struct EngineTimes {
    double policy_s; /* in the policy step (for a Python callback: including the wait for the GIL) */
    double gil_s;    /* of policy_s: waiting for the Python lock before the callback (set by its wrapper;
                        waits inside the callback, between torch ops, count as policy) */
    double env_s;    /* stepping the buffer's envs */
    long long steps;
} EngineTimes;

/* One policy step of buffer b at step t. 0: done; -1: failed (the message in err, or the caller's own
 * record, e.g. a stored Python exception). Runs on buffer b's thread. */
typedef int (*EnginePolicyFn)(void* ctx, int buffer, int step, EngineTimes* times, char* err, size_t err_size);
/* Called once on buffer b's thread before its first step and after its last (may be NULL). */
typedef void (*EngineThreadFn)(void* ctx, int buffer);

typedef struct EnginePolicy {
    EnginePolicyFn step;
    EngineThreadFn begin, end;
    void* ctx;
} EnginePolicy;

typedef struct Engine Engine;

/* Split `parent` into `buffers` views of num_envs / buffers envs each (buffers must divide num_envs);
 * threads[b] env threads for buffer b (the buffer's own thread is one of them). `arrays` points at agent 0
 * of the parent's buffers (the actions are range-checked and the history recorded from them). With one
 * buffer the parent's own thread pool steps the view. NULL and err on failure. */
Engine* engine_create(VecEnv* parent, Buffers arrays, int buffers, const int* threads, char* err, size_t err_size);
int engine_buffers(const Engine* eng);
int engine_agents(const Engine* eng);        /* agents in all buffers */
int engine_buffer_agents(const Engine* eng); /* agents per buffer */
int engine_buffer_threads(const Engine* eng, int buffer);

/* Start one thread per buffer for `horizon` steps. rewards/dones: [horizon, agents] or NULL. 0 or -1. */
int engine_start(Engine* eng, int horizon, EnginePolicy policy, float* rewards, uint8_t* dones, char* err,
                 size_t err_size);
/* Wait up to timeout_ms for every buffer thread to finish: 1 finished, 0 still running. */
int engine_wait(Engine* eng, int timeout_ms);
/* Ask every buffer to stop at its next step (thread-safe, returns at once). */
void engine_abort(Engine* eng);
/* Join the buffer threads. Returns the buffer whose error came first, or -1 if none failed; its
 * message (if the engine wrote one) in err. */
int engine_join(Engine* eng, char* err, size_t err_size);
/* Number of buffers that failed in the last run (not counting ones stopped by another's error). */
int engine_failures(const Engine* eng);
/* Step index at which buffer b failed (-1 if it did not). */
int engine_failed_step(const Engine* eng, int buffer);
/* 1 if buffer b failed because an action was out of range (not in its policy step). */
int engine_failed_check(const Engine* eng, int buffer);
/* Per-buffer times since the last call (then zeroed). */
void engine_take_times(Engine* eng, EngineTimes* out);
/* Stop the env threads and free the views (the parent's envs stay). Not while running. */
void engine_destroy(Engine* eng);

/* ---- CUDA graphs: cuGraphLaunch(exec[b], stream[b]) then cuStreamSynchronize(stream[b]) per step. */

typedef struct EngineGraphs {
    void* exec[ENGINE_MAX_BUFFERS];   /* CUgraphExec == cudaGraphExec_t */
    void* stream[ENGINE_MAX_BUFFERS]; /* CUstream == cudaStream_t */
    void* context;                    /* CUcontext made current on each buffer thread */
} EngineGraphs;

/* Resolve the driver entry points (libcuda.so.1) once; 0 ok, -1 with the reason in err. */
int engine_cuda_load(char* err, size_t err_size);
/* The calling thread's current CUDA context (after torch used the device), or NULL with err. */
void* engine_cuda_context(char* err, size_t err_size);
/* The policy that launches graphs->exec[b] on graphs->stream[b] and waits for it. */
EnginePolicy engine_graph_policy(EngineGraphs* graphs);

#endif
