/* env_binding.h (PufferLib 3.0 env format, our compatibility layer).
 *
 * A PufferLib 3.0 env is a folder ocean/NAME/ with NAME.h (an Env struct holding observations,
 * actions, rewards, terminals pointers and a float Log with n last; c_reset, c_step, c_render,
 * c_close), a binding.c that defines `Env`, includes "../env_binding.h" and writes
 *     static int my_init(Env* env, PyObject* args, PyObject* kwargs)   (reading unpack(kwargs, "key"))
 *     static int my_log(PyObject* dict, Log* log)                      (assign_to_dict(dict, "key", v))
 * and a NAME.py that declares the spaces and the agents of one env, which C cannot see. The build
 * (`puffer-bench envs build PATH --spaces FILE`, appliance/pufferlib3.py) reads those from a spaces
 * file and passes them here as COMPAT3_OBS_SIZE, COMPAT3_NUM_ATNS, COMPAT3_ACT_SIZES and
 * COMPAT3_AGENTS; the build's folder holds an env_binding.h that includes this file, so the
 * binding's "../env_binding.h" is this one. Written from the format's interface alone.
 *
 * Nothing of CPython is used: PyObject is our Dict (the kwargs my_init reads, the dict my_log fills),
 * and the 3.0 functions become the 4.0 format's my_init(Env*, Dict*) and my_log(Log*, Dict*), so the
 * env is then stepped by the 4.0 layer (../compat4/vecenv.h: our thread pool, our buffers, our
 * per-env streams). The 3.0 format's own hooks (MY_SHARED, MY_METHODS: functions called from its
 * Python) are refused by the build; MY_GET/MY_PUT are compiled and never called, as its trainer
 * never calls them either.
 */
#ifndef PUFFER_COMPAT3_ENV_BINDING_H
#define PUFFER_COMPAT3_ENV_BINDING_H

#if !defined(COMPAT3_OBS_SIZE) || !defined(COMPAT3_NUM_ATNS) || !defined(COMPAT3_AGENTS)
#error "build PufferLib 3.0-format envs with `puffer-bench envs build PATH --spaces FILE`"
#endif

/* The spaces, as the 4.0 layer reads them (an env header's own OBS_SIZE, if any, gives way). */
#undef OBS_SIZE
#undef NUM_ATNS
#undef ACT_SIZES
#define OBS_SIZE COMPAT3_OBS_SIZE
#define NUM_ATNS COMPAT3_NUM_ATNS
#define ACT_SIZES COMPAT3_ACT_SIZES
#define COMPAT4_AGENTS(env) (COMPAT3_AGENTS)

#include "../compat4/vecenv.h"

/* The declared element size must be the struct's: a spaces file that says uint8 for float rows
 * would have the env write past our buffers. */
_Static_assert(sizeof(*((Env*)0)->observations) == COMPAT3_OBS_ITEMSIZE,
               "the spaces file's observation dtype is not the Env struct's observations element");

typedef Dict PyObject;

static int compat3_my_init(Env* env, PyObject* args, PyObject* kwargs);
static int compat3_my_log(PyObject* dict, Log* log);

void my_init(Env* env, Dict* kwargs) { compat3_my_init(env, NULL, kwargs); }

void my_log(Log* log, Dict* out) { compat3_my_log(out, log); }

#define my_init compat3_my_init
#define my_log compat3_my_log

/* A kwarg as a number; one the run does not give reads 0 and is reported by the build's probe. */
static inline double unpack(PyObject* kwargs, char* key) { return dict_get(kwargs, key)->value; }

static inline int assign_to_dict(PyObject* dict, char* key, float value) {
    dict_set(dict, key, (double)value);
    return 0;
}

#endif
