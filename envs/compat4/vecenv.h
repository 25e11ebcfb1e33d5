/* vecenv.h (PufferLib 4.0 env format, our compatibility layer).
 *
 * A PufferLib 4.0 env is a folder ocean/NAME/ with NAME.h (an Env struct holding observations,
 * actions, rewards, terminals pointers, num_agents and a float Log with a field n; c_reset, c_step,
 * c_render, c_close) and a binding.c that defines OBS_SIZE, NUM_ATNS, ACT_SIZES, OBS_TENSOR_T and
 * `Env`, includes "vecenv.h", and writes my_init(Env*, Dict* kwargs) and my_log(Log*, Dict* out).
 * `puffer-bench envs build` compiles that binding.c unchanged with this folder first on the include
 * path, so "vecenv.h" is this file, written from that interface alone. It turns the env into one of
 * our EnvSpec tables (../vecenv.h) in a shared library that appliance._ocean loads (load_plugin).
 * It includes the C headers the format's own header does (assert, stdbool, stdio, stdlib, string,
 * time), which env code after the include uses without including them itself (drone's assert).
 * The library:
 * our thread pool steps it, in our contiguous buffers, each env on its own PCG32 stream seeded from
 * (run seed, env index) (prelude.h routes rand()/rand_r() there).
 *
 * Per env a Compat4Slot wraps the user's struct. Where the format and our runtime differ, the slot
 * converts at the boundary, with buffers allocated once at init (nothing is allocated per step):
 *   - actions: ours are int32 rows, the format's float (double in the format's earlier dialect,
 *     whatever the Env struct's `actions` points to); copied in before c_step;
 *   - terminals: ours are uint8 (plus truncations, which the format has none of: always 0), the
 *     format's float; copied out after c_step and c_reset;
 *   - rewards and observations: the env writes straight into our rows (float32; uint8 or float32);
 *   - an action mask (MY_ACTION_MASK): the env writes its observations and mask into buffers of the
 *     slot's, and each of our observation rows is OBS_SIZE elements then MY_ACTION_MASK (the mask as
 *     0/1 in the observation's type), copied after c_step and c_reset (Layout.action_mask: the policy
 *     leaves the tail out of its encoder and never samples a forbidden action);
 *   - a frame: the window the env's c_render draws with raylib, read back (compat4_render).
 * Continuous actions (every ACT_SIZES entry 1, the format's rule) make Layout.action_continuous: our
 * actions buffer then holds floats, copied as they are. MY_VEC_INIT/MY_VEC_CLOSE (state made for the
 * whole vector) become EnvSpec.vec_init/vec_close. MY_USES_PERM (the env keeps a pointer per agent
 * slot, set by its my_setup_perm) gets a StaticVec of the slot's own rows, with the identity
 * permutation, as the format's vector gives every env at creation; MY_USES_TAGS (a tag per env for the
 * format's self-play banks) leaves every tag 0. MY_VEC_STEP/MY_VEC_STEP_RANGE name whole-vector step
 * functions that the format's own vector does not call: each env is stepped by its c_step here, as
 * there. The earlier dialect of the format (OBS_TYPE FLOAT|CHAR|UNSIGNED_CHAR and ACT_TYPE DOUBLE in
 * place of OBS_TENSOR_T) is read from the Env struct's own pointer types. The build step
 * (appliance/pufferlib_envs.py) refuses what this layer does not cover, in one line each: the hooks
 * that replace the vector's memory (MY_SHARED, MY_METHODS).
 *
 * What the build passes: PUFFER4_NAME (the registered name, "pufferlib:NAME"), PUFFER4_RNG_FIELD
 * when the Env struct has an integer `rng` word (seeded from our stream at init and reset), and
 * compat4_params.h in the build folder: the [env] keys of the env's config/NAME.ini as a ParamSpec
 * table, the parameters my_init reads through dict_get.
 */
#ifndef PUFFER_COMPAT4_VECENV_H
#define PUFFER_COMPAT4_VECENV_H

#include <assert.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor.h"

/* ------------------------------------------------------------------ Dict: my_init's kwargs, my_log's out */

typedef struct {
    const char* key;
    double value;
    void* ptr;
} DictItem;

typedef struct {
    DictItem* items;
    int size;
    int capacity;
} Dict;

/* Which kwargs my_init read (bit i: item i), so that the build keeps only those as parameters. */
extern __thread unsigned long long compat4_read_mask;

static inline DictItem* dict_get_unsafe(Dict* dict, const char* key) {
    for (int i = 0; i < dict->size; i++) {
        if (strcmp(dict->items[i].key, key) == 0) {
            if (i < 64) compat4_read_mask |= 1ULL << i;
            return &dict->items[i];
        }
    }
    return NULL;
}

/* A key my_init asks for that its kwargs lack: remembered (the build's probe reports it in one
 * line), and a zero item handed back so the env does not read through NULL. */
extern __thread const char* compat4_missing_key;

static inline DictItem* dict_get(Dict* dict, const char* key) {
    DictItem* item = dict_get_unsafe(dict, key);
    if (item) return item;
    static __thread DictItem missing;
    if (!compat4_missing_key) compat4_missing_key = key;
    missing.key = key;
    missing.value = 0.0;
    missing.ptr = NULL;
    return &missing;
}

static inline void dict_set(Dict* dict, const char* key, double value) {
    DictItem* item = dict_get_unsafe(dict, key);
    if (item) {
        item->value = value;
    } else if (dict->size < dict->capacity) {
        dict->items[dict->size].key = key;
        dict->items[dict->size].value = value;
        dict->items[dict->size].ptr = NULL;
        dict->size++;
    }
}

#ifdef OBS_SIZE /* ------------------------------------------ the adapter, in the binding.c's translation unit */

#include "../vecenv.h"
#include "compat4_params.h"

#ifdef PUFFER4_RAYLIB /* the build linked raylib: c_render's window can be read back */
#include <math.h>
#include "raylib.h"
#define COMPAT4_FRAME_H 360
#define COMPAT4_FRAME_W 480
#else /* c_render draws through raylib, which this build lacks: no frame of ours */
#define COMPAT4_FRAME_H 1
#define COMPAT4_FRAME_W 1
#endif

#ifndef OBS_TENSOR_T /* the earlier dialect: OBS_TYPE; the element type is the struct's own */
#define OBS_TENSOR_T Compat4ObsTensor
typedef struct { __typeof__(((Env*)0)->observations) data; int64_t shape[PUF_MAX_DIMS]; } Compat4ObsTensor;
#endif

/* The env's action and terminal elements, as its struct declares them (float; double in the earlier
 * dialect). Rewards are written straight into our float rows, so they must be float. */
typedef __typeof__(*((Env*)0)->actions) compat4_act_t;
typedef __typeof__(*((Env*)0)->terminals) compat4_term_t;
_Static_assert(__builtin_types_compatible_p(__typeof__(*((Env*)0)->rewards), float),
               "the Env struct's rewards must be float*");

/* An env's agents, read after its my_init: the format's num_agents field (the 3.0 format's layer,
 * ../compat3/env_binding.h, gives the count its spaces declare instead). */
#ifndef COMPAT4_AGENTS
#define COMPAT4_AGENTS(env) ((env)->num_agents)
#endif

#ifndef PUFFER4_NAME
#error "PUFFER4_NAME is not defined: build PufferLib-format envs with `puffer-bench envs build`"
#endif

_Static_assert(sizeof(Compat4Stream) == sizeof(Rng), "prelude.h's stream must be our Rng");

#define COMPAT4_EXPORT __attribute__((visibility("default")))

__thread Compat4Stream* compat4_current = NULL;
__thread const char* compat4_missing_key = NULL;
__thread unsigned long long compat4_read_mask = 0;

void my_init(Env* env, Dict* kwargs);
void my_log(Log* log, Dict* out);

static const int compat4_act_sizes[] = ACT_SIZES;
#define COMPAT4_ACT_DIMS ((int)(sizeof(compat4_act_sizes) / sizeof(compat4_act_sizes[0])))
_Static_assert(COMPAT4_ACT_DIMS == NUM_ATNS, "ACT_SIZES must list NUM_ATNS sizes");
_Static_assert(NUM_ATNS <= OCEAN_MAX_ACTION_DIMS, "too many action heads for the runtime");
#define COMPAT4_LOG_FIELDS ((int)(sizeof(Log) / sizeof(float)))
/* the episode count's place: the format's vector divides by the field named n, wherever it is */
#define COMPAT4_LOG_N ((int)(offsetof(Log, n) / sizeof(float)))
_Static_assert(sizeof(Log) % sizeof(float) == 0, "Log must hold floats only");
_Static_assert(sizeof(Log) / sizeof(float) <= OCEAN_MAX_LOG_FIELDS, "too many Log fields for the runtime");

typedef struct Compat4Slot {
    Env env;                 /* the user's env */
    Rng rng;                 /* our stream: vecenv_reset reseeds it (rng_offset) */
    int made_by_vec_init;    /* MY_VEC_INIT made this env: its init skips my_init */
    int agents;
    int32_t* our_actions;    /* our rows of the vector's buffers */
    uint8_t* our_terminals;
    uint8_t* our_truncations;
    compat4_act_t* actions;  /* the env's action rows (float or double), owned by the slot */
    compat4_term_t* terminals;
#ifdef MY_ACTION_MASK
    unsigned char* action_mask;
    void* env_observations;  /* the env's rows (agents x OBS_SIZE); ours hold them and the mask */
    void* our_observations;
#endif
} Compat4Slot;

/* Bytes of guard after each buffer a slot allocates for the env (0 but in ocean_plugin_bounds). */
static size_t compat4_slack = 0;

static void* compat4_guarded(size_t bytes) {
    unsigned char* p = (unsigned char*)calloc(bytes + compat4_slack, 1);
    if (p && compat4_slack) memset(p + bytes, 0xA5, compat4_slack);
    return p;
}

static size_t compat4_obs_itemsize(void) {
    OBS_TENSOR_T t;
    return sizeof(*t.data);
}

/* The format's name for the same thing, which a my_setup_perm calls. */
static inline size_t obs_element_size(void) { return compat4_obs_itemsize(); }

/* The fields of the format's vector that env code reads: a my_setup_perm (the global rows and the
 * permutation) or a whole-vector step function (MY_VEC_STEP, compiled but never called). */
typedef struct StaticVec {
    void* envs;
    int size;
    int total_agents;
    void* observations;
    compat4_act_t* actions;
    float* rewards;
    compat4_term_t* terminals;
    unsigned char* action_mask;
    int obs_size;
    int num_atns;
    int* agent_perm; /* NULL: the identity */
} StaticVec;

#ifdef MY_USES_PERM
void my_setup_perm(StaticVec* vec, Env* env, int slot_base);
#endif

static int compat4_params_count(void) {
    int n = 0;
    while (compat4_params[n].name) n++;
    return n;
}

/* my_init's kwargs: every parameter by its ini name, with the value the run resolved. */
static void compat4_kwargs(const double* params, Dict* dict, DictItem* items) {
    int n = compat4_params_count();
    dict->items = items;
    dict->size = n;
    dict->capacity = n;
    for (int i = 0; i < n; i++) {
        items[i].key = compat4_params[i].name;
        items[i].value = params[i];
        items[i].ptr = NULL;
    }
}

static void compat4_enter(Compat4Slot* s) {
    compat4_current = (Compat4Stream*)&s->rng;
#ifdef PUFFER4_RNG_FIELD
    s->env.rng = rng_u32(&s->rng);
#endif
}

static void compat4_point(Compat4Slot* s, void* observations, float* rewards) {
#ifdef MY_ACTION_MASK
    s->our_observations = observations;
    observations = s->env_observations;
#endif
    s->env.observations = observations;
    s->env.actions = s->actions;
    s->env.rewards = rewards;
    s->env.terminals = s->terminals;
#ifdef MY_ACTION_MASK
    s->env.action_mask = s->action_mask;
#endif
#ifdef MY_USES_PERM
    StaticVec vec;
    memset(&vec, 0, sizeof(vec));
    vec.envs = &s->env;
    vec.size = 1;
    vec.total_agents = s->agents;
    vec.observations = observations;
    vec.actions = s->actions;
    vec.rewards = rewards;
    vec.terminals = s->terminals;
#ifdef MY_ACTION_MASK
    vec.action_mask = s->action_mask;
#endif
    vec.obs_size = OBS_SIZE;
    vec.num_atns = NUM_ATNS;
    my_setup_perm(&vec, &s->env, 0);
#endif
}

/* After c_step or c_reset: the env's float terminals into our flags (it has no truncations), and
 * with an action mask, its observations and mask into our rows. */
static inline void compat4_flags_out(Compat4Slot* s) {
    for (int a = 0; a < s->agents; a++) {
        s->our_terminals[a] = s->terminals[a] != 0.0f;
        s->our_truncations[a] = 0;
    }
#ifdef MY_ACTION_MASK
    const size_t item = compat4_obs_itemsize();
    const unsigned char* mask = s->action_mask;
    for (int a = 0; a < s->agents; a++, mask += MY_ACTION_MASK) {
        char* row = (char*)s->our_observations + (size_t)a * (OBS_SIZE + MY_ACTION_MASK) * item;
        memcpy(row, (const char*)s->env_observations + (size_t)a * OBS_SIZE * item, (size_t)OBS_SIZE * item);
        if (item == 1) {
            for (int i = 0; i < MY_ACTION_MASK; i++) ((unsigned char*)row)[OBS_SIZE + i] = mask[i] != 0;
        } else {
            for (int i = 0; i < MY_ACTION_MASK; i++) ((float*)row)[OBS_SIZE + i] = mask[i] != 0 ? 1.0f : 0.0f;
        }
    }
#endif
}

/* The agents one env owns, found by running my_init on a scratch env (with scratch buffers, as the
 * format's own vector would before it points the env at its rows). 0 when my_init reads a kwarg it
 * was not given (compat4_missing_key says which). */
static int compat4_probe_agents(const double* params) {
    DictItem items[OCEAN_MAX_PARAMS];
    Dict kwargs;
    compat4_kwargs(params, &kwargs, items);
    Compat4Slot* s = (Compat4Slot*)calloc(1, sizeof(Compat4Slot));
    if (!s) return 0;
    rng_seed(&s->rng, 0, 0);
    compat4_enter(s);
    compat4_missing_key = NULL;
    compat4_read_mask = 0;
    my_init(&s->env, &kwargs);
    int agents = COMPAT4_AGENTS(&s->env);
    compat4_current = NULL;
    if (compat4_missing_key) agents = 0;
    /* c_close is not called: the env was never pointed at buffers nor reset, and closing an env that
     * half-exists is the one thing the format does not promise to survive. Its init's allocations
     * (if any) are left to the process, once per describe. */
    free(s);
    return agents;
}

static void compat4_layout(const double* params, Layout* out) {
    memset(out, 0, sizeof(*out));
    out->agents_per_env = compat4_probe_agents(params);
    out->obs_size = OBS_SIZE;
    out->obs_dtype = compat4_obs_itemsize() == 1 ? OBS_UINT8 : OBS_FLOAT32;
    out->obs_low = compat4_obs_itemsize() == 1 ? 0.0f : -INFINITY;
    out->obs_high = compat4_obs_itemsize() == 1 ? 255.0f : INFINITY;
#ifdef MY_ACTION_MASK
    out->obs_size = OBS_SIZE + MY_ACTION_MASK;
    out->obs_tail = MY_ACTION_MASK;
    out->tail_low = 0.0f;
    out->tail_high = 1.0f;
    out->action_mask = MY_ACTION_MASK;
#endif
    out->action_dims = NUM_ATNS;
    int continuous = 1; /* the format's rule: every action size 1 means continuous actions */
    for (int d = 0; d < NUM_ATNS; d++) {
        out->action_n[d] = compat4_act_sizes[d];
        continuous &= compat4_act_sizes[d] == 1;
    }
    out->action_continuous = continuous;
    out->frame_h = COMPAT4_FRAME_H;
    out->frame_w = COMPAT4_FRAME_W;
    out->text_h = 1;
    out->text_w = 48;
}

static void compat4_init(void* e, const double* params, Buffers b, Rng rng) {
    Compat4Slot* s = (Compat4Slot*)e;
    DictItem items[OCEAN_MAX_PARAMS];
    Dict kwargs;
    compat4_kwargs(params, &kwargs, items);
    s->rng = rng;
    compat4_enter(s);
    if (!s->made_by_vec_init) my_init(&s->env, &kwargs);
    compat4_current = NULL;
    s->agents = COMPAT4_AGENTS(&s->env) > 0 ? COMPAT4_AGENTS(&s->env) : 1;
    s->actions = (compat4_act_t*)calloc((size_t)s->agents * NUM_ATNS, sizeof(compat4_act_t));
    s->terminals = (compat4_term_t*)calloc((size_t)s->agents, sizeof(compat4_term_t));
#ifdef MY_ACTION_MASK
    s->action_mask = (unsigned char*)compat4_guarded((size_t)s->agents * MY_ACTION_MASK);
    s->env_observations = compat4_guarded((size_t)s->agents * OBS_SIZE * compat4_obs_itemsize());
#endif
    s->our_actions = b.actions;
    s->our_terminals = b.terminals;
    s->our_truncations = b.truncations;
    compat4_point(s, b.observations, b.rewards);
}

static void compat4_reset(void* e) {
    Compat4Slot* s = (Compat4Slot*)e;
    compat4_enter(s);
    memset(s->env.rewards, 0, (size_t)s->agents * sizeof(float));
    memset(s->terminals, 0, (size_t)s->agents * sizeof(compat4_term_t));
    c_reset(&s->env);
    compat4_current = NULL;
    compat4_flags_out(s);
}

static int compat4_continuous(void) {
    for (int d = 0; d < NUM_ATNS; d++)
        if (compat4_act_sizes[d] != 1) return 0;
    return 1;
}

static inline void compat4_step_one(Compat4Slot* s) {
    const int n = s->agents * NUM_ATNS;
    if (compat4_continuous()) { /* our buffer holds floats then (Layout.action_continuous) */
        const float* ours = (const float*)s->our_actions;
        for (int i = 0; i < n; i++) s->actions[i] = (compat4_act_t)ours[i];
    } else {
        for (int i = 0; i < n; i++) s->actions[i] = (compat4_act_t)s->our_actions[i];
    }
    memset(s->env.rewards, 0, (size_t)s->agents * sizeof(float));
    memset(s->terminals, 0, (size_t)s->agents * sizeof(compat4_term_t));
    compat4_current = (Compat4Stream*)&s->rng;
    c_step(&s->env);
    compat4_flags_out(s);
}

static void compat4_step(void* e) {
    compat4_step_one((Compat4Slot*)e);
    compat4_current = NULL;
}

static void compat4_step_many(void* e, int count) {
    Compat4Slot* s = (Compat4Slot*)e;
    for (int i = 0; i < count; i++) compat4_step_one(s + i);
    compat4_current = NULL;
}

/* The env's own picture: its c_render draws through raylib into a window of its own (made on its
 * first call), which is read back and fitted into our frame (nearest pixel, centred, black bars).
 * Only where the build linked raylib (PUFFER4_RAYLIB) and the process has a display to draw on
 * (appliance.pufferlib_envs.render_display sets PUFFER4_RENDER=1 then); otherwise a black frame,
 * since raylib cannot open a window without a display and ends the process trying. The draw uses a
 * copy of the env's stream, so a rendered episode is the episode an unrendered one would be. */
static void compat4_render(void* e, uint8_t* rgb) {
    memset(rgb, 0, (size_t)COMPAT4_FRAME_H * COMPAT4_FRAME_W * 3);
#ifdef PUFFER4_RAYLIB
    Compat4Slot* s = (Compat4Slot*)e;
    const char* on = getenv("PUFFER4_RENDER");
    if (!on || strcmp(on, "1") != 0) return;
    Rng scratch = s->rng;
    compat4_current = (Compat4Stream*)&scratch;
    c_render(&s->env);
    compat4_current = NULL;
    if (!IsWindowReady()) return; /* this env's c_render draws nothing */
    Image img = LoadImageFromScreen();
    if (img.data == NULL || img.width <= 0 || img.height <= 0) return;
    ImageFormat(&img, PIXELFORMAT_UNCOMPRESSED_R8G8B8);
    const uint8_t* src = (const uint8_t*)img.data;
    double scale = fmin((double)COMPAT4_FRAME_W / img.width, (double)COMPAT4_FRAME_H / img.height);
    int w = (int)(img.width * scale), h = (int)(img.height * scale);
    int x0 = (COMPAT4_FRAME_W - w) / 2, y0 = (COMPAT4_FRAME_H - h) / 2;
    for (int y = 0; y < h; y++) {
        int sy = (int)(y / scale);
        for (int x = 0; x < w; x++) {
            int sx = (int)(x / scale);
            memcpy(rgb + ((size_t)(y0 + y) * COMPAT4_FRAME_W + x0 + x) * 3, src + ((size_t)sy * img.width + sx) * 3, 3);
        }
    }
    UnloadImage(img);
#else
    (void)e;
#endif
}

static void compat4_render_text(void* e, char* text) {
    (void)e;
    const char* msg = "(a PufferLib env: its picture is drawn by --gif)";
    size_t n = strlen(msg);
    memset(text, ' ', 48);
    memcpy(text, msg, n < 48 ? n : 48);
}

static void compat4_close(void* e) {
    Compat4Slot* s = (Compat4Slot*)e;
    if (s->actions == NULL) return; /* never initialised */
    c_close(&s->env);
    free(s->actions);
    free(s->terminals);
    s->actions = NULL;
    s->terminals = NULL;
#ifdef MY_ACTION_MASK
    free(s->action_mask);
    s->action_mask = NULL;
    free(s->env_observations);
    s->env_observations = NULL;
#endif
}

/* Log field names: my_log maps Log fields to names. It is run once on a Log whose field i holds
 * i + 1, and each name it sets to such a value names that field; fields it does not export keep a
 * name of their place (log_<i>), and the field n, wherever the struct has it, is "n". */
static const char* compat4_log_names[COMPAT4_LOG_FIELDS + 1];
static char compat4_log_spare[COMPAT4_LOG_FIELDS][16];

static void compat4_name_logs(void) {
    Log probe;
    float* f = (float*)&probe;
    for (int i = 0; i < COMPAT4_LOG_FIELDS; i++) f[i] = (float)(i + 1);
    DictItem items[2 * OCEAN_MAX_LOG_FIELDS];
    Dict out = {items, 0, 2 * OCEAN_MAX_LOG_FIELDS};
    my_log(&probe, &out);
    for (int i = 0; i < COMPAT4_LOG_FIELDS; i++) compat4_log_names[i] = NULL;
    for (int k = 0; k < out.size; k++) {
        double v = out.items[k].value;
        int i = (int)v - 1;
        if (v == (double)(i + 1) && i >= 0 && i < COMPAT4_LOG_FIELDS && i != COMPAT4_LOG_N &&
            !compat4_log_names[i] && strcmp(out.items[k].key, "n") != 0)
            compat4_log_names[i] = out.items[k].key;
    }
    for (int i = 0; i < COMPAT4_LOG_FIELDS; i++) {
        if (!compat4_log_names[i]) {
            snprintf(compat4_log_spare[i], sizeof(compat4_log_spare[i]), "log_%d", i);
            compat4_log_names[i] = compat4_log_spare[i];
        }
    }
    compat4_log_names[COMPAT4_LOG_N] = "n";
    compat4_log_names[COMPAT4_LOG_FIELDS] = NULL;
}

#ifdef MY_VEC_INIT
/* The format's whole-vector init: it allocates and inits every env at once (shared maps, paths);
 * each env it made is moved into its slot, and the array it returned is freed (not what it shares). */
Env* my_vec_init(int* num_envs_out, int* buffer_env_starts, int* buffer_env_counts, Dict* vec_kwargs,
                 Dict* env_kwargs);

static int compat4_vec_init(void* e, int count, const double* params, char* err, size_t err_size) {
    Compat4Slot* s = (Compat4Slot*)e;
    int agents = compat4_probe_agents(params);
    DictItem items[OCEAN_MAX_PARAMS];
    Dict kwargs;
    compat4_kwargs(params, &kwargs, items);
    DictItem vec_items[2] = {{"total_agents", (double)count * agents, NULL}, {"num_buffers", 1.0, NULL}};
    Dict vec_kwargs = {vec_items, 2, 2};
    int made = 0, starts[1] = {0}, counts[1] = {0};
    compat4_current = (Compat4Stream*)&s[0].rng;
    Env* envs = my_vec_init(&made, starts, counts, &vec_kwargs, &kwargs);
    compat4_current = NULL;
    if (envs == NULL || made != count) {
        snprintf(err, err_size, "%s: its my_vec_init made %d envs of %d agent(s) for %d agents, not %d envs "
                 "(the data it loads, if any, may be missing)",
                 PUFFER4_NAME, made, agents, count * agents, count);
        free(envs);
        return -1;
    }
    for (int i = 0; i < count; i++) {
        s[i].env = envs[i];
        s[i].made_by_vec_init = 1;
    }
    free(envs);
    return 0;
}
#endif

#ifdef MY_VEC_CLOSE
void my_vec_close(Env* envs);

/* The format hands my_vec_close its own contiguous array of envs: a copy of ours is made for it. */
static void compat4_vec_close(void* e, int count) {
    Compat4Slot* s = (Compat4Slot*)e;
    Env* envs = (Env*)malloc(sizeof(Env) * (size_t)(count > 0 ? count : 1));
    if (!envs) return;
    for (int i = 0; i < count; i++) envs[i] = s[i].env;
    my_vec_close(envs);
    free(envs);
}
#endif

static EnvSpec compat4_spec;

COMPAT4_EXPORT int ocean_plugin_abi(void) { return OCEAN_PLUGIN_ABI; }

COMPAT4_EXPORT const EnvSpec* ocean_plugin_spec(void) {
    if (compat4_spec.name) return &compat4_spec;
    /* The format's vector runs my_init before my_log ever runs, and some my_log read what my_init set
     * (drone's task, a global): one my_init with the ini's values first. */
    double defaults[OCEAN_MAX_PARAMS];
    for (int i = 0; i < compat4_params_count(); i++) defaults[i] = compat4_params[i].value;
    compat4_probe_agents(defaults);
    compat4_name_logs();
    EnvSpec spec = {
        PUFFER4_NAME, sizeof(Compat4Slot), offsetof(Compat4Slot, env) + offsetof(Env, log),
        offsetof(Compat4Slot, rng), COMPAT4_LOG_FIELDS, compat4_log_names, compat4_params, compat4_layout,
        compat4_init, compat4_reset, compat4_step, compat4_step_many, compat4_render, compat4_render_text,
        compat4_close,
#ifdef MY_VEC_INIT
        compat4_vec_init,
#else
        NULL,
#endif
#ifdef MY_VEC_CLOSE
        compat4_vec_close,
#else
        NULL,
#endif
    };
    compat4_spec = spec;
    return &compat4_spec;
}

/* Whether the env keeps to its rows: one env (and its agents) is made with the ini's values over
 * buffers each followed by a guard region of known bytes, reset and stepped `steps` times with uniform
 * random actions from a fixed stream, then closed. Returns how many bytes past the end of its rows the
 * env wrote into the buffer *which names (0 observations, 1 rewards, 2 terminals; with MY_ACTION_MASK,
 * 3 the observations and 4 the mask it writes into the slot's buffers): a binding's OBS_SIZE
 * smaller than what its c_step writes, or a 3.0 spaces file that says too few. 0 when every guard is
 * intact, -1 when the buffers cannot be had. The build runs it in a child process (an env that writes far enough to crash
 * ends that process), so a user's env that would corrupt the vector's memory is refused in one line. */
#define COMPAT4_GUARD 65536
COMPAT4_EXPORT long ocean_plugin_bounds(int steps, int* which) {
    double params[OCEAN_MAX_PARAMS];
    for (int i = 0; i < compat4_params_count(); i++) params[i] = compat4_params[i].value;
    *which = 0;
#ifdef MY_VEC_INIT
    (void)steps;
    return 0; /* envs made for the whole vector at once are checked by their own vector's use */
#else
    int agents = compat4_probe_agents(params);
    if (agents <= 0) return 0; /* the kwarg probe reports this env */
    size_t item = compat4_obs_itemsize();
#ifdef MY_ACTION_MASK
    size_t obs_bytes = (size_t)agents * (OBS_SIZE + MY_ACTION_MASK) * item;
#else
    size_t obs_bytes = (size_t)agents * OBS_SIZE * item;
#endif
    size_t act_bytes = (size_t)agents * NUM_ATNS * sizeof(int32_t);
    uint8_t* obs = (uint8_t*)malloc(obs_bytes + COMPAT4_GUARD);
    int32_t* actions = (int32_t*)calloc(1, act_bytes);
    uint8_t* rewards = (uint8_t*)malloc(agents * sizeof(float) + COMPAT4_GUARD);
    uint8_t* terminals = (uint8_t*)malloc((size_t)agents + COMPAT4_GUARD);
    uint8_t* truncations = (uint8_t*)calloc((size_t)agents, 1);
    Compat4Slot* s = (Compat4Slot*)calloc(1, sizeof(Compat4Slot));
    long past = -1;
    if (obs && actions && rewards && terminals && truncations && s) {
        memset(obs, 0xA5, obs_bytes + COMPAT4_GUARD);
        memset(rewards, 0xA5, agents * sizeof(float) + COMPAT4_GUARD);
        memset(terminals, 0xA5, (size_t)agents + COMPAT4_GUARD);
        Rng rng, draw;
        rng_seed(&rng, 0, 0);
        rng_seed(&draw, 1, 0);
        Buffers b = {obs, actions, (float*)rewards, terminals, truncations};
        compat4_slack = COMPAT4_GUARD;
        compat4_init(s, params, b, rng);
        compat4_slack = 0;
        compat4_reset(s);
        for (int t = 0; t < steps; t++) {
            for (int a = 0; a < s->agents; a++) {
                for (int d = 0; d < NUM_ATNS; d++) {
                    if (compat4_continuous())
                        ((float*)actions)[a * NUM_ATNS + d] = 2.0f * rng_float(&draw) - 1.0f;
                    else
                        actions[a * NUM_ATNS + d] = (int32_t)(rng_u32(&draw) % (uint32_t)compat4_act_sizes[d]);
                }
            }
            compat4_step(s);
        }
        past = 0;
        /* with an action mask the env writes its observations and mask into the slot's buffers: 3, 4 */
        const uint8_t* guards[5] = {obs + obs_bytes, rewards + agents * sizeof(float), terminals + agents, NULL, NULL};
#ifdef MY_ACTION_MASK
        guards[3] = (const uint8_t*)s->env_observations + (size_t)s->agents * OBS_SIZE * item;
        guards[4] = s->action_mask + (size_t)s->agents * MY_ACTION_MASK;
#endif
        for (int k = 0; k < 5 && past == 0; k++) {
            if (!guards[k]) continue;
            for (long i = COMPAT4_GUARD - 1; i >= 0; i--) {
                if (guards[k][i] != 0xA5) {
                    past = i + 1;
                    *which = k;
                    break;
                }
            }
        }
        compat4_close(s);
    }
    free(obs);
    free(actions);
    free(rewards);
    free(terminals);
    free(truncations);
    free(s);
    return past;
#endif
}

/* The kwarg my_init reads that the ini lacks, or NULL; *read_mask: which parameters it read (bit i:
 * the i-th). The build's probe asks, with the ini's values. */
COMPAT4_EXPORT const char* ocean_plugin_probe(const double* params, unsigned long long* read_mask) {
    compat4_probe_agents(params);
    *read_mask = compat4_read_mask;
    return compat4_missing_key;
}

#endif /* OBS_SIZE */
#endif
