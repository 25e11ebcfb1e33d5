/* engine.c: the rollout engine's native step loop (see engine.h). */
#define _GNU_SOURCE
#include "engine.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct Buffer {
    struct Engine* eng;
    int index;
    VecEnv view;          /* the parent's envs [index * per, (index + 1) * per) */
    int own_pool;         /* 1: view.pool is this buffer's; 0: it is the parent's */
    pthread_t thread;
    int started;
    int failed_step;      /* -1: no failure */
    int failed_check;     /* 1: the failure was an action out of range */
    unsigned long long fail_seq;
    char err[ENGINE_ERR];
    EngineTimes times;
} Buffer;

struct Engine {
    VecEnv* parent;
    Buffers arrays;
    int buffers, per_envs, per_agents, agents;
    Buffer* buf;
    /* the current run */
    int horizon;
    EnginePolicy policy;
    float* hist_rewards;
    uint8_t* hist_dones;
    atomic_int abort;
    atomic_ullong fail_seq;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
    int running;
};

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

Engine* engine_create(VecEnv* parent, Buffers arrays, int buffers, const int* threads, char* err,
                      size_t err_size) {
    if (buffers < 1 || buffers > ENGINE_MAX_BUFFERS || parent->num_envs % buffers != 0) {
        snprintf(err, err_size, "buffers (%d) must be between 1 and %d and divide num_envs (%d)", buffers,
                 ENGINE_MAX_BUFFERS, parent->num_envs);
        return NULL;
    }
    Engine* eng = calloc(1, sizeof(Engine));
    if (!eng || !(eng->buf = calloc((size_t)buffers, sizeof(Buffer)))) {
        free(eng);
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    eng->parent = parent;
    eng->arrays = arrays;
    eng->buffers = buffers;
    eng->per_envs = parent->num_envs / buffers;
    eng->per_agents = eng->per_envs * parent->layout.agents_per_env;
    eng->agents = parent->num_envs * parent->layout.agents_per_env;
    atomic_init(&eng->abort, 0);
    atomic_init(&eng->fail_seq, 0);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&eng->cond, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&eng->lock, NULL);
    for (int b = 0; b < buffers; b++) {
        Buffer* buf = &eng->buf[b];
        buf->eng = eng;
        buf->index = b;
        buf->failed_step = -1;
        buf->view = *parent;
        buf->view.num_envs = eng->per_envs;
        buf->view.env_offset = parent->env_offset + (uint64_t)b * (uint64_t)eng->per_envs;
        buf->view.envs = parent->envs + (size_t)b * (size_t)eng->per_envs * parent->spec->size;
        int t = threads ? threads[b] : 1;
        if (t < 1) t = 1;
        if (t > eng->per_envs) t = eng->per_envs;
        if (buffers == 1 && t == parent->num_threads) {
            buf->own_pool = 0; /* one buffer: the parent's pool (idle while the engine runs) */
        } else {
            buf->own_pool = 1;
            buf->view.pool = pool_create(t);
            if (!buf->view.pool) {
                snprintf(err, err_size, "cannot start %d env threads for buffer %d", t, b);
                engine_destroy(eng);
                return NULL;
            }
        }
        buf->view.num_threads = t;
    }
    return eng;
}

int engine_buffers(const Engine* eng) { return eng->buffers; }
int engine_agents(const Engine* eng) { return eng->agents; }
int engine_buffer_agents(const Engine* eng) { return eng->per_agents; }
int engine_buffer_threads(const Engine* eng, int buffer) { return eng->buf[buffer].view.num_threads; }

static void fail(Buffer* buf, int step, int check) {
    buf->failed_step = step;
    buf->failed_check = check;
    buf->fail_seq = atomic_fetch_add(&buf->eng->fail_seq, 1);
    atomic_store(&buf->eng->abort, 1);
}

/* Every action of the buffer's agents must be in [0, n) for its dimension. */
static int check_actions(Buffer* buf) {
    Engine* eng = buf->eng;
    const Layout* L = &eng->parent->layout;
    int dims = L->action_dims;
    size_t first = (size_t)buf->index * (size_t)eng->per_agents;
    const int32_t* a = eng->arrays.actions + first * (size_t)dims;
    long long bad = ocean_first_bad_action(L, a, (size_t)eng->per_agents);
    if (bad < 0) return 0;
    size_t agent = first + (size_t)(bad / dims);
    int d = (int)(bad % dims);
    char dim[32] = "";
    if (dims > 1) snprintf(dim, sizeof(dim), ", dimension %d", d);
    if (L->action_continuous)
        snprintf(buf->err, sizeof(buf->err), "%s: action %g for agent %zu (env %zu%s) is not a finite number",
                 eng->parent->spec->name, (double)((const float*)a)[bad], agent, agent / (size_t)L->agents_per_env, dim);
    else
        snprintf(buf->err, sizeof(buf->err), "%s: action %d for agent %zu (env %zu%s) is out of range; valid: 0..%d",
                 eng->parent->spec->name, (int)a[bad], agent, agent / (size_t)L->agents_per_env, dim, L->action_n[d] - 1);
    return -1;
}

/* The rewards and done flags the policy sees at step t, into row t of the history. */
static void record(Buffer* buf, int t) {
    Engine* eng = buf->eng;
    size_t first = (size_t)buf->index * (size_t)eng->per_agents, n = (size_t)eng->per_agents;
    size_t row = (size_t)t * (size_t)eng->agents + first;
    if (eng->hist_rewards) memcpy(eng->hist_rewards + row, eng->arrays.rewards + first, n * sizeof(float));
    if (eng->hist_dones) {
        const uint8_t* term = eng->arrays.terminals + first;
        const uint8_t* trunc = eng->arrays.truncations + first;
        uint8_t* out = eng->hist_dones + row;
        for (size_t i = 0; i < n; i++) out[i] = (uint8_t)((term[i] | trunc[i]) != 0);
    }
}

static void* buffer_main(void* raw) {
    Buffer* buf = (Buffer*)raw;
    Engine* eng = buf->eng;
    EnginePolicy* p = &eng->policy;
#if defined(__linux__)
    char name[16];
    snprintf(name, sizeof(name), "rollout-buf%d", buf->index);
    pthread_setname_np(pthread_self(), name); /* shown by profilers, gdb, top -H */
#endif
    if (p->begin) p->begin(p->ctx, buf->index);
    for (int t = 0; t < eng->horizon; t++) {
        if (atomic_load_explicit(&eng->abort, memory_order_relaxed)) break;
        record(buf, t);
        double t0 = seconds_now();
        if (p->step(p->ctx, buf->index, t, &buf->times, buf->err, sizeof(buf->err)) != 0) {
            fail(buf, t, 0);
            break;
        }
        double t1 = seconds_now();
        buf->times.policy_s += t1 - t0;
        if (check_actions(buf) != 0) {
            fail(buf, t, 1);
            break;
        }
        vecenv_step(&buf->view);
        buf->times.env_s += seconds_now() - t1;
        buf->times.steps++;
    }
    if (p->end) p->end(p->ctx, buf->index);
    pthread_mutex_lock(&eng->lock);
    eng->done++;
    pthread_cond_broadcast(&eng->cond);
    pthread_mutex_unlock(&eng->lock);
    return NULL;
}

int engine_start(Engine* eng, int horizon, EnginePolicy policy, float* rewards, uint8_t* dones, char* err,
                 size_t err_size) {
    if (eng->running) {
        snprintf(err, err_size, "the engine is already running");
        return -1;
    }
    eng->horizon = horizon;
    eng->policy = policy;
    eng->hist_rewards = rewards;
    eng->hist_dones = dones;
    atomic_store(&eng->abort, 0);
    atomic_store(&eng->fail_seq, 0);
    eng->done = 0;
    eng->running = 1;
    for (int b = 0; b < eng->buffers; b++) {
        Buffer* buf = &eng->buf[b];
        buf->failed_step = -1;
        buf->failed_check = 0;
        buf->err[0] = 0;
        buf->started = pthread_create(&buf->thread, NULL, buffer_main, buf) == 0;
        if (!buf->started) {
            snprintf(err, err_size, "cannot start the thread of buffer %d (errno %d)", b, errno);
            atomic_store(&eng->abort, 1);
            pthread_mutex_lock(&eng->lock);
            eng->done += eng->buffers - b; /* the ones never started count as done */
            pthread_mutex_unlock(&eng->lock);
            for (int k = b + 1; k < eng->buffers; k++) eng->buf[k].started = 0;
            engine_join(eng, NULL, 0);
            return -1;
        }
    }
    return 0;
}

int engine_wait(Engine* eng, int timeout_ms) {
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&eng->lock);
    while (eng->done < eng->buffers) {
        if (pthread_cond_timedwait(&eng->cond, &eng->lock, &deadline) == ETIMEDOUT) break;
    }
    int finished = eng->done >= eng->buffers;
    pthread_mutex_unlock(&eng->lock);
    return finished;
}

void engine_abort(Engine* eng) { atomic_store(&eng->abort, 1); }

int engine_join(Engine* eng, char* err, size_t err_size) {
    for (int b = 0; b < eng->buffers; b++) {
        if (eng->buf[b].started) pthread_join(eng->buf[b].thread, NULL);
        eng->buf[b].started = 0;
    }
    eng->running = 0;
    int first = -1;
    for (int b = 0; b < eng->buffers; b++) {
        Buffer* buf = &eng->buf[b];
        if (buf->failed_step >= 0 && (first < 0 || buf->fail_seq < eng->buf[first].fail_seq)) first = b;
    }
    if (first >= 0 && err && err_size) snprintf(err, err_size, "%s", eng->buf[first].err);
    return first;
}

int engine_failures(const Engine* eng) {
    int n = 0;
    for (int b = 0; b < eng->buffers; b++) n += eng->buf[b].failed_step >= 0;
    return n;
}

int engine_failed_step(const Engine* eng, int buffer) { return eng->buf[buffer].failed_step; }
int engine_failed_check(const Engine* eng, int buffer) { return eng->buf[buffer].failed_check; }

void engine_take_times(Engine* eng, EngineTimes* out) {
    for (int b = 0; b < eng->buffers; b++) {
        out[b] = eng->buf[b].times;
        memset(&eng->buf[b].times, 0, sizeof(EngineTimes));
    }
}

void engine_destroy(Engine* eng) {
    if (!eng) return;
    if (eng->buf) {
        for (int b = 0; b < eng->buffers; b++)
            if (eng->buf[b].own_pool) pool_destroy(eng->buf[b].view.pool);
        free(eng->buf);
    }
    pthread_mutex_destroy(&eng->lock);
    pthread_cond_destroy(&eng->cond);
    free(eng);
}

/* ------------------------------------------------------------------ CUDA graphs (driver API via dlopen) */

typedef int (*CuFn2)(void*, void*);
typedef int (*CuFn1)(void*);
typedef int (*CuGetCtx)(void**);
typedef int (*CuErrStr)(int, const char**);

static struct {
    pthread_once_t once;
    char err[256];
    CuFn2 graph_launch;       /* cuGraphLaunch(CUgraphExec, CUstream) */
    CuFn1 stream_synchronize; /* cuStreamSynchronize(CUstream) */
    CuFn1 ctx_set_current;    /* cuCtxSetCurrent(CUcontext) */
    CuGetCtx ctx_get_current; /* cuCtxGetCurrent(CUcontext*) */
    CuErrStr error_name;      /* cuGetErrorName(CUresult, const char**) */
} cuda = {PTHREAD_ONCE_INIT, "", NULL, NULL, NULL, NULL, NULL};

static void cuda_load_once(void) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* why = dlerror();
        snprintf(cuda.err, sizeof(cuda.err), "the CUDA driver (libcuda.so.1) cannot be loaded: %s",
                 why ? why : "not found");
        return;
    }
    cuda.graph_launch = (CuFn2)dlsym(lib, "cuGraphLaunch");
    cuda.stream_synchronize = (CuFn1)dlsym(lib, "cuStreamSynchronize");
    cuda.ctx_set_current = (CuFn1)dlsym(lib, "cuCtxSetCurrent");
    cuda.ctx_get_current = (CuGetCtx)dlsym(lib, "cuCtxGetCurrent");
    cuda.error_name = (CuErrStr)dlsym(lib, "cuGetErrorName");
    if (!cuda.graph_launch || !cuda.stream_synchronize || !cuda.ctx_set_current || !cuda.ctx_get_current) {
        snprintf(cuda.err, sizeof(cuda.err),
                 "the CUDA driver (libcuda.so.1) lacks cuGraphLaunch, cuStreamSynchronize or cuCtx*Current");
        cuda.graph_launch = NULL;
    }
}

int engine_cuda_load(char* err, size_t err_size) {
    pthread_once(&cuda.once, cuda_load_once);
    if (cuda.graph_launch) return 0;
    snprintf(err, err_size, "%s", cuda.err);
    return -1;
}

static const char* cu_name(int code) {
    const char* name = NULL;
    if (cuda.error_name) cuda.error_name(code, &name);
    return name ? name : "unknown CUDA error";
}

void* engine_cuda_context(char* err, size_t err_size) {
    if (engine_cuda_load(err, err_size) != 0) return NULL;
    void* ctx = NULL;
    int rc = cuda.ctx_get_current(&ctx);
    if (rc != 0 || !ctx) {
        snprintf(err, err_size, "no current CUDA context on this thread (%s); use the device from torch first",
                 rc ? cu_name(rc) : "none");
        return NULL;
    }
    return ctx;
}

static int graph_step(void* raw, int buffer, int step, EngineTimes* times, char* err, size_t err_size) {
    (void)times;
    EngineGraphs* g = (EngineGraphs*)raw;
    int rc;
    if (step == 0 && (rc = cuda.ctx_set_current(g->context)) != 0) {
        snprintf(err, err_size, "cuCtxSetCurrent failed in buffer %d: %s", buffer, cu_name(rc));
        return -1;
    }
    if ((rc = cuda.graph_launch(g->exec[buffer], g->stream[buffer])) != 0) {
        snprintf(err, err_size, "cuGraphLaunch failed in buffer %d at step %d: %s", buffer, step, cu_name(rc));
        return -1;
    }
    if ((rc = cuda.stream_synchronize(g->stream[buffer])) != 0) {
        snprintf(err, err_size, "cuStreamSynchronize failed in buffer %d at step %d: %s", buffer, step, cu_name(rc));
        return -1;
    }
    return 0;
}

EnginePolicy engine_graph_policy(EngineGraphs* graphs) {
    EnginePolicy p = {graph_step, NULL, NULL, graphs};
    return p;
}
