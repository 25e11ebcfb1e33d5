/* vecenv.h: what every Ocean env needs, written once.
 *
 *  - Rng: PCG32, one per env, seeded from (run seed, env index). Results never depend on thread
 *    count or scheduling, and no env touches global state (no rand()).
 *  - Log: each env keeps a struct of floats, `n` last; it adds to it when an episode ends and the
 *    vector sums all envs' logs and divides by n (vecenv_log in vecenv.c).
 *  - EnvSpec: the table that tells the generic vector how big an env is, where its buffers and log
 *    are, its parameters, and its functions. OCEAN_ENV(...) at the bottom of each env header fills
 *    it in and registers it, so adding an env is its header plus one #include in registry.h.
 *  - ThreadPool: persistent pthreads; each step gives every thread (the caller included) a home range
 *    of envs, the same step after step, and a thread that has finished its own takes pieces of the
 *    others', so the threads that are running do the work (vecenv.c says how).
 */
#ifndef OCEAN_VECENV_H
#define OCEAN_VECENV_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ RNG (PCG32) */

typedef struct Rng {
    uint64_t state;
    uint64_t inc;
} Rng;

static inline uint32_t rng_u32(Rng* r) {
    uint64_t old = r->state;
    r->state = old * 6364136223846793005ULL + r->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}

static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* Seed from the run seed and the env's global index: independent streams per env. */
static inline void rng_seed(Rng* r, uint64_t seed, uint64_t index) {
    r->state = 0;
    r->inc = (splitmix64(index ^ 0xA5A5A5A5ULL) << 1u) | 1u;
    rng_u32(r);
    r->state += splitmix64(seed * 0x100000001B3ULL + index);
    rng_u32(r);
}

/* Uniform integer in [0, n), unbiased (Lemire). n must be > 0. */
static inline uint32_t rng_below(Rng* r, uint32_t n) {
    uint64_t m = (uint64_t)rng_u32(r) * n;
    uint32_t low = (uint32_t)m;
    if (low < n) {
        uint32_t threshold = (uint32_t)(-n) % n;
        while (low < threshold) {
            m = (uint64_t)rng_u32(r) * n;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

/* Uniform float in [0, 1). */
static inline float rng_float(Rng* r) { return (rng_u32(r) >> 8) * (1.0f / 16777216.0f); }

/* ------------------------------------------------------------------ spaces and spec */

typedef enum { OBS_UINT8 = 0, OBS_INT8 = 1, OBS_FLOAT32 = 2 } ObsDtype;

#define OCEAN_MAX_ACTION_DIMS 128 /* PufferLib 4.0's orbit_wars: 96 continuous heads */
#define OCEAN_MAX_LOG_FIELDS 128  /* floats in an env's Log (craftax: 72) */
#define OCEAN_MAX_PARAMS 64

typedef struct Layout {
    int agents_per_env;               /* rows each env owns in every buffer */
    int obs_size;                     /* elements per agent */
    ObsDtype obs_dtype;
    float obs_low, obs_high;          /* documented bounds of every observation element but the tail's */
    int obs_tail;                     /* the last obs_tail elements have bounds of their own (default 0): */
    float tail_low, tail_high;        /* features on another scale, e.g. go's capture counts */
    int action_dims;                  /* 1 = Discrete, >1 = MultiDiscrete */
    int action_n[OCEAN_MAX_ACTION_DIMS];
    int frame_h, frame_w;             /* RGB render size */
    int text_h, text_w;               /* terminal render size (chars, without newlines) */
    /* Image observations (all 0: a flat vector): each agent's obs_size elements are obs_channels
     * planes of obs_height x obs_width, channel first (C, H, W), so the policy builds a CNN. */
    int obs_channels, obs_height, obs_width;
    /* Continuous actions (1: the actions buffer holds action_dims float32 values per agent, read
     * through the same int32 pointer, each action_n[d] = 1); 0: integer actions in [0, action_n[d]). */
    int action_continuous;
    /* An action mask (0: none): each agent's last action_mask observation elements are 1 for an
     * action it may take and 0 for one it may not, one per action of every head (sum of action_n);
     * the policy leaves them out of its encoder and never samples a forbidden action. */
    int action_mask;
} Layout;

/* An env parameter: the one place its name, type, default and range are written. The binding checks
 * every value against it, and appliance.config builds the env section of the config from it. */
typedef enum { PARAM_INT, PARAM_FLOAT } ParamType;

typedef struct ParamSpec {
    const char* name;
    ParamType type;                   /* PARAM_INT: whole numbers only */
    double value;                     /* default */
    double min, max;                  /* valid range, bounds included */
} ParamSpec;

/* Buffers an env writes into: pointers to its own rows of the vector's arrays. */
typedef struct Buffers {
    void* observations;
    int32_t* actions;
    float* rewards;
    uint8_t* terminals;
    uint8_t* truncations;
} Buffers;

typedef struct EnvSpec {
    const char* name;
    size_t size;                      /* sizeof the env struct */
    size_t log_offset;                /* offsetof(Env, log) */
    size_t rng_offset;                /* offsetof(Env, rng): reseeded by vecenv_reset */
    int log_fields;                   /* floats in the Log struct; n (the episodes) last in ours */
    const char* const* log_names;
    const ParamSpec* params;          /* terminated by a NULL name */
    void (*layout)(const double* params, Layout* out);
    /* init: set parameters and point at buffers; no allocation after this call. */
    void (*init)(void* env, const double* params, Buffers buffers, Rng rng);
    void (*reset)(void* env);
    void (*step)(void* env);
    /* step `count` consecutive envs starting at `envs`: the step inlined in one loop, no call per env */
    void (*step_many)(void* envs, int count);
    void (*render)(void* env, uint8_t* rgb);    /* frame_h x frame_w x 3 */
    void (*render_text)(void* env, char* text); /* text_h rows of text_w chars */
    void (*close)(void* env);
    /* Optional (NULL in every env of ours), for envs whose state is made for the whole vector at once
     * (PufferLib's MY_VEC_INIT: maps or paths shared by all envs): vec_init runs on the zeroed envs
     * before each env's init (0, or -1 with err filled); vec_close after every env's close. */
    int (*vec_init)(void* envs, int count, const double* params, char* err, size_t err_size);
    void (*vec_close)(void* envs, int count);
} EnvSpec;

/* The Log field that counts episodes: the one named "n" (a PufferLib-format Log may hold it anywhere:
 * PufferLib 4.0's cartpole has score after it), else the last, as every env of ours has it. */
static inline int spec_log_n(const EnvSpec* spec) {
    for (int f = 0; f < spec->log_fields; f++)
        if (spec->log_names[f] && strcmp(spec->log_names[f], "n") == 0) return f;
    return spec->log_fields - 1;
}

/* A shared library built by `puffer-bench envs build` (envs/compat4/) exports ocean_plugin_abi()
 * and ocean_plugin_spec(); appliance._ocean.load_plugin registers the spec when the ABI matches the
 * tables compiled here (their sizes, so a library built against other headers is refused). */
#define OCEAN_PLUGIN_ABI ((int)(sizeof(EnvSpec) * 100000 + sizeof(Layout) * 100 + sizeof(Buffers)))

/* The registry, filled by OCEAN_ENV in each header (see registry.h). */
void ocean_register(const EnvSpec* spec);
const EnvSpec* ocean_find(const char* name);
int ocean_count(void);
int ocean_registry_full(void);
const EnvSpec* ocean_get(int index);

/* In init: take the env's RNG and its rows of the vector's buffers (every env has these fields). */
#define OCEAN_BIND(env, buffers, rng_)                   \
    do {                                                 \
        (env)->rng = (rng_);                             \
        (env)->observations = (buffers).observations;    \
        (env)->actions = (buffers).actions;              \
        (env)->rewards = (buffers).rewards;              \
        (env)->terminals = (buffers).terminals;          \
        (env)->truncations = (buffers).truncations;      \
    } while (0)

/* At an episode's end: add it to the env's Log (perf, score, episode_return, episode_length, n). */
#define OCEAN_LOG_EPISODE(log_, perf_, score_, return_, length_) \
    do {                                                         \
        (log_).perf += (perf_);                                  \
        (log_).score += (score_);                                \
        (log_).episode_return += (return_);                      \
        (log_).episode_length += (length_);                      \
        (log_).n += 1;                                           \
    } while (0)

/* End a single-agent step: after a finished episode (log it first) auto-reset and raise the flag that
 * ended it, else clear both flags and write the next observation. reward_ is read before the reset
 * (it may name a field the reset zeroes, as go's does) and written last, since a reset clears the
 * rewards buffer. */
#define OCEAN_END_STEP(env_, done_, truncated_, reward_, reset_, observe_) \
    do {                                                                   \
        const float reward_now_ = (reward_);                               \
        if ((done_) || (truncated_)) {                                     \
            reset_(env_);                                                  \
            (env_)->terminals[0] = (uint8_t)(done_);                       \
            (env_)->truncations[0] = (uint8_t)(truncated_);                \
        } else {                                                           \
            (env_)->terminals[0] = 0;                                      \
            (env_)->truncations[0] = 0;                                    \
            observe_(env_);                                                \
        }                                                                  \
        (env_)->rewards[0] = reward_now_;                                  \
    } while (0)

/* Read a parameter in the order of the env's ParamSpec table. */
#define PARAM(params, i) ((params)[(i)])

/* Every env header ends with this: it checks the Log layout, builds the spec and registers it.
 * Env is the struct type, prefix the function-name prefix (prefix##_init, _reset, _step, ...). */
#define OCEAN_ENV(prefix, Env, LogT, ...)                                                         \
    _Static_assert(sizeof(LogT) % sizeof(float) == 0, "Log must hold floats only");              \
    _Static_assert(sizeof(LogT) / sizeof(float) <= 64, "at most 64 Log fields");                 \
    static const char* const prefix##_log_names[] = {__VA_ARGS__, NULL};                          \
    _Static_assert(sizeof(LogT) / sizeof(float) ==                                                \
                       sizeof(prefix##_log_names) / sizeof(char*) - 1,                           \
                   "log names must match the Log fields");                                        \
    static void prefix##_init_v(void* e, const double* p, Buffers b, Rng r) { prefix##_init((Env*)e, p, b, r); } \
    static void prefix##_reset_v(void* e) { prefix##_reset((Env*)e); }                            \
    static void prefix##_step_v(void* e) { prefix##_step((Env*)e); }                              \
    static void prefix##_step_many_v(void* e, int count) {                                        \
        Env* env = (Env*)e;                                                                       \
        for (int i = 0; i < count; i++) prefix##_step(env + i);                                   \
    }                                                                                             \
    static void prefix##_render_v(void* e, uint8_t* f) { prefix##_render((Env*)e, f); }           \
    static void prefix##_render_text_v(void* e, char* t) { prefix##_render_text((Env*)e, t); }    \
    static void prefix##_close_v(void* e) { prefix##_close((Env*)e); }                            \
    static const EnvSpec prefix##_spec = {                                                        \
        #prefix, sizeof(Env), offsetof(Env, log), offsetof(Env, rng), (int)(sizeof(LogT) / sizeof(float)),           \
        prefix##_log_names, prefix##_params, prefix##_layout, prefix##_init_v, prefix##_reset_v,  \
        prefix##_step_v, prefix##_step_many_v, prefix##_render_v, prefix##_render_text_v, prefix##_close_v};            \
    __attribute__((constructor)) static void prefix##_register(void) { ocean_register(&prefix##_spec); }

/* ------------------------------------------------------------------ drawing helpers */

static inline void fill_rect(uint8_t* rgb, int fw, int fh, int x, int y, int w, int h,
                             uint8_t r, uint8_t g, uint8_t b) {
    for (int yy = y < 0 ? 0 : y; yy < y + h && yy < fh; yy++) {
        for (int xx = x < 0 ? 0 : x; xx < x + w && xx < fw; xx++) {
            uint8_t* px = rgb + 3 * (yy * fw + xx);
            px[0] = r; px[1] = g; px[2] = b;
        }
    }
}

/* ------------------------------------------------------------------ thread pool */

typedef void (*RangeFn)(void* ctx, int start, int end);
typedef struct ThreadPool ThreadPool;

/* Create num_threads-1 workers (the caller is thread 0). Returns NULL on failure. */
ThreadPool* pool_create(int num_threads);
/* Run fn over [0, count) in contiguous pieces taken by whichever threads run; returns when all are done. */
void pool_run(ThreadPool* pool, RangeFn fn, void* ctx, int count);
void pool_destroy(ThreadPool* pool);

/* ------------------------------------------------------------------ vector of envs */

typedef struct VecEnv {
    const EnvSpec* spec;
    Layout layout;
    int num_envs;
    uint64_t env_offset;              /* global index of env 0: seeds are (seed, env_offset + i) */
    char* envs;                       /* num_envs * spec->size bytes, allocated once */
    ThreadPool* pool;
    int num_threads;
} VecEnv;

/* Allocate and init num_envs envs over caller-owned buffers. Returns NULL and fills err on failure. */
VecEnv* vecenv_create(const EnvSpec* spec, const double* params, int num_envs, int num_threads,
                      uint64_t seed, uint64_t env_offset, void* observations, int32_t* actions, float* rewards,
                      uint8_t* terminals, uint8_t* truncations, char* err, size_t err_size);
void vecenv_reset(VecEnv* vec, uint64_t seed);
void vecenv_step(VecEnv* vec);
/* Sum every env's log into out (log_fields floats) and zero them. */
void vecenv_log(VecEnv* vec, float* out);
void vecenv_close(VecEnv* vec);
size_t ocean_obs_itemsize(ObsDtype dtype);
/* Flat index (row * action_dims + dimension) of the first action outside [0, n) for its dimension in
 * `rows` rows of actions, or -1 when all are valid. One branch-free pass the compiler vectorizes.
 * Continuous actions (layout->action_continuous): the first that is not a finite float. */
long long ocean_first_bad_action(const Layout* layout, const int32_t* actions, size_t rows);

#endif
