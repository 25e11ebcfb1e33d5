/* binding.c: CPython module appliance._ocean.
 *
 * A Vec steps N envs of one kind in place over NumPy buffers the caller owns, so C writes each
 * observation straight into the array the trainer will copy to the GPU. Everything is checked here,
 * at the boundary: buffer dtype, shape, contiguity and alignment once at creation; action values on
 * every step (an out-of-range action is a ValueError naming the env, never undefined behaviour).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "vecenv.h"
#include "engine.h"
#include "registry.h"

/* ------------------------------------------------------------------ params */

static int count_params(const EnvSpec* spec) {
    int n = 0;
    while (spec->params[n].name) n++;
    return n;
}

static PyObject* param_names(const EnvSpec* spec) {
    PyObject* list = PyList_New(0);
    for (int i = 0; spec->params[i].name; i++) {
        PyObject* s = PyUnicode_FromString(spec->params[i].name);
        PyList_Append(list, s);
        Py_DECREF(s);
    }
    PyObject* sep = PyUnicode_FromString(", ");
    PyObject* joined = PyUnicode_Join(sep, list);
    Py_DECREF(sep);
    Py_DECREF(list);
    return joined;
}

/* Fill values[] from the defaults, then from the dict; 0 on success, -1 with an exception set. */
static int parse_params(const EnvSpec* spec, PyObject* dict, double* values) {
    int n = count_params(spec);
    for (int i = 0; i < n; i++) values[i] = spec->params[i].value;
    if (dict == NULL || dict == Py_None) return 0;
    if (!PyDict_Check(dict)) {
        PyErr_Format(PyExc_TypeError, "%s: params must be a dict", spec->name);
        return -1;
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        const char* name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        int found = -1;
        for (int i = 0; name && i < n; i++)
            if (strcmp(spec->params[i].name, name) == 0) found = i;
        if (found < 0) {
            PyObject* valid = param_names(spec);
            PyErr_Format(PyExc_ValueError, "%s: unknown parameter %R; valid parameters: %U", spec->name, key, valid);
            Py_XDECREF(valid);
            return -1;
        }
        if (PyBool_Check(value) || !PyNumber_Check(value)) {
            PyErr_Format(PyExc_TypeError, "%s: parameter '%s' must be a number, got %R", spec->name, name, value);
            return -1;
        }
        double v = PyFloat_AsDouble(value);
        if (v == -1.0 && PyErr_Occurred()) return -1;
        const ParamSpec* p = &spec->params[found];
        if (!(v >= p->min && v <= p->max)) {
            char range[96];
            snprintf(range, sizeof(range), "[%g, %g]", p->min, p->max);
            PyErr_Format(PyExc_ValueError, "%s: parameter '%s' = %S is outside its valid range %s", spec->name,
                         name, value, range);
            return -1;
        }
        values[found] = v;
    }
    return 0;
}

static const EnvSpec* find_spec(const char* name) {
    const EnvSpec* spec = ocean_find(name);
    if (!spec) {
        PyObject* list = PyList_New(0);
        for (int i = 0; i < ocean_count(); i++) {
            PyObject* s = PyUnicode_FromString(ocean_get(i)->name);
            PyList_Append(list, s);
            Py_DECREF(s);
        }
        PyErr_Format(PyExc_ValueError, "unknown Ocean env '%s'; known envs: %R", name, list);
        Py_DECREF(list);
    }
    return spec;
}

static const char* dtype_name(ObsDtype d) {
    return d == OBS_UINT8 ? "uint8" : d == OBS_INT8 ? "int8" : "float32";
}

static PyObject* layout_dict(const EnvSpec* spec, const double* params) {
    Layout L;
    memset(&L, 0, sizeof(L));
    spec->layout(params, &L);
    PyObject* nvec = PyList_New(L.action_dims);
    for (int d = 0; d < L.action_dims; d++) PyList_SET_ITEM(nvec, d, PyLong_FromLong(L.action_n[d]));
    PyObject* defaults = PyDict_New();
    PyObject* ranges = PyDict_New();
    for (int i = 0; spec->params[i].name; i++) {
        PyObject* v = PyFloat_FromDouble(spec->params[i].value);
        PyDict_SetItemString(defaults, spec->params[i].name, v);
        Py_DECREF(v);
        PyObject* r = Py_BuildValue("(dd)", spec->params[i].min, spec->params[i].max);
        PyDict_SetItemString(ranges, spec->params[i].name, r);
        Py_DECREF(r);
    }
    PyObject* logs = PyList_New(spec->log_fields);
    for (int f = 0; f < spec->log_fields; f++) PyList_SET_ITEM(logs, f, PyUnicode_FromString(spec->log_names[f]));
    return Py_BuildValue(
        "{s:s,s:i,s:i,s:s,s:f,s:f,s:i,s:f,s:f,s:N,s:(ii),s:(ii),s:N,s:N,s:N,s:n}", "name", spec->name, "agents_per_env",
        L.agents_per_env, "obs_size", L.obs_size, "obs_dtype", dtype_name(L.obs_dtype), "obs_low", L.obs_low,
        "obs_high", L.obs_high, "obs_tail", L.obs_tail, "tail_low", L.tail_low, "tail_high", L.tail_high, "action_nvec", nvec, "frame", L.frame_h, L.frame_w, "text", L.text_h, L.text_w,
        "params", defaults, "param_ranges", ranges, "log_names", logs, "env_bytes", (Py_ssize_t)spec->size);
}

static PyObject* py_names(PyObject* self, PyObject* noargs) {
    PyObject* list = PyList_New(0);
    for (int i = 0; i < ocean_count(); i++) {
        PyObject* s = PyUnicode_FromString(ocean_get(i)->name);
        PyList_Append(list, s);
        Py_DECREF(s);
    }
    return list;
}

static PyObject* py_describe(PyObject* self, PyObject* args) {
    const char* name;
    PyObject* params = Py_None;
    if (!PyArg_ParseTuple(args, "s|O", &name, &params)) return NULL;
    const EnvSpec* spec = find_spec(name);
    if (!spec) return NULL;
    double values[OCEAN_MAX_PARAMS];
    if (parse_params(spec, params, values) < 0) return NULL;
    return layout_dict(spec, values);
}

/* ------------------------------------------------------------------ buffers */

static int get_buffer(const char* env, PyObject* obj, const char* what, char fmt, size_t itemsize,
                      Py_ssize_t rows, Py_ssize_t cols, int allow_1d, Py_buffer* view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_RECORDS) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: %s must be a writable array (buffer protocol)", env, what);
        return -1;
    }
    const char* f = view->format ? view->format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    int fmt_ok = (f[0] == fmt && f[1] == 0) || (fmt == 'B' && f[0] == '?' && f[1] == 0) ||
                 (fmt == 'i' && f[0] == 'l' && f[1] == 0 && sizeof(long) == 4);
    if (!fmt_ok || (size_t)view->itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: %s has dtype format '%s' (itemsize %zd); expected '%c' (itemsize %zu)",
                     env, what, view->format ? view->format : "B", view->itemsize, fmt, itemsize);
        goto fail;
    }
    int shape_ok = (view->ndim == 2 && view->shape[0] == rows && view->shape[1] == cols) ||
                   (allow_1d && cols == 1 && view->ndim == 1 && view->shape[0] == rows);
    if (!shape_ok) {
        PyErr_Format(PyExc_ValueError, "%s: %s has the wrong shape; expected (%zd, %zd)%s", env, what, rows, cols,
                     allow_1d && cols == 1 ? " or a 1-D array of that length" : "");
        goto fail;
    }
    if (!PyBuffer_IsContiguous(view, 'C')) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be C-contiguous", env, what);
        goto fail;
    }
    if (((uintptr_t)view->buf) % itemsize != 0) {
        PyErr_Format(PyExc_ValueError, "%s: %s is not aligned to %zu bytes", env, what, itemsize);
        goto fail;
    }
    return 0;
fail:
    PyBuffer_Release(view);
    return -1;
}

/* ------------------------------------------------------------------ Vec */

struct PyEngine;

typedef struct {
    PyObject_HEAD
    VecEnv* vec;
    Py_buffer obs, act, rew, term, trunc;
    int busy;
    struct PyEngine* engines; /* engines over this Vec's envs (a list through PyEngine.next) */
} PyVec;

static void detach_engines(PyVec* self);

static void release(PyVec* self) {
    if (self->vec) {
        detach_engines(self);
        VecEnv* vec = self->vec;
        self->vec = NULL;
        Py_BEGIN_ALLOW_THREADS
        vecenv_close(vec);
        Py_END_ALLOW_THREADS
        PyBuffer_Release(&self->obs);
        PyBuffer_Release(&self->act);
        PyBuffer_Release(&self->rew);
        PyBuffer_Release(&self->term);
        PyBuffer_Release(&self->trunc);
    }
}

static int Vec_init(PyVec* self, PyObject* args, PyObject* kwds) {
    static char* kwlist[] = {"name", "num_envs", "observations", "actions", "rewards", "terminals",
                             "truncations", "num_threads", "seed", "params", "env_offset", NULL};
    const char* name;
    int num_envs, num_threads = 1;
    unsigned long long seed = 0, env_offset = 0;
    PyObject *obs, *act, *rew, *term, *trunc, *params = Py_None;
    if (self->vec) {
        PyErr_SetString(PyExc_RuntimeError, "Vec is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "siOOOOO|iKOK", kwlist, &name, &num_envs, &obs, &act, &rew,
                                     &term, &trunc, &num_threads, &seed, &params, &env_offset))
        return -1;
    const EnvSpec* spec = find_spec(name);
    if (!spec) return -1;
    if (num_envs < 1) {
        PyErr_Format(PyExc_ValueError, "%s: num_envs must be >= 1, got %d", name, num_envs);
        return -1;
    }
    if (num_threads < 1) {
        PyErr_Format(PyExc_ValueError, "%s: num_threads must be >= 1, got %d", name, num_threads);
        return -1;
    }
    double values[OCEAN_MAX_PARAMS];
    if (parse_params(spec, params, values) < 0) return -1;
    Layout L;
    memset(&L, 0, sizeof(L));
    spec->layout(values, &L);
    Py_ssize_t rows = (Py_ssize_t)num_envs * L.agents_per_env;
    char fmt = L.obs_dtype == OBS_UINT8 ? 'B' : L.obs_dtype == OBS_INT8 ? 'b' : 'f';
    if (get_buffer(name, obs, "observations", fmt, ocean_obs_itemsize(L.obs_dtype), rows, L.obs_size, 0, &self->obs) < 0)
        return -1;
    if (get_buffer(name, act, "actions", 'i', 4, rows, L.action_dims, 1, &self->act) < 0) goto fail_obs;
    if (get_buffer(name, rew, "rewards", 'f', 4, rows, 1, 1, &self->rew) < 0) goto fail_act;
    if (get_buffer(name, term, "terminals", 'B', 1, rows, 1, 1, &self->term) < 0) goto fail_rew;
    if (get_buffer(name, trunc, "truncations", 'B', 1, rows, 1, 1, &self->trunc) < 0) goto fail_term;
    char err[256] = {0};
    VecEnv* vec;
    Py_BEGIN_ALLOW_THREADS
    vec = vecenv_create(spec, values, num_envs, num_threads, seed, env_offset, self->obs.buf, self->act.buf, self->rew.buf,
                        self->term.buf, self->trunc.buf, err, sizeof(err));
    Py_END_ALLOW_THREADS
    if (!vec) {
        PyErr_Format(PyExc_MemoryError, "%s: %s", name, err);
        goto fail_trunc;
    }
    self->vec = vec;
    return 0;
fail_trunc:
    PyBuffer_Release(&self->trunc);
fail_term:
    PyBuffer_Release(&self->term);
fail_rew:
    PyBuffer_Release(&self->rew);
fail_act:
    PyBuffer_Release(&self->act);
fail_obs:
    PyBuffer_Release(&self->obs);
    return -1;
}

static void Vec_dealloc(PyVec* self) {
    release(self);
    Py_TYPE(self)->tp_free((PyObject*)self);
}

static int check_ready(PyVec* self) {
    if (!self->vec) {
        PyErr_SetString(PyExc_RuntimeError, "this Ocean vector is closed");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "this Ocean vector is being stepped by another thread");
        return -1;
    }
    return 0;
}

/* Every action value must be in [0, n) for its dimension: checked before any env runs. */
static int check_actions(PyVec* self) {
    VecEnv* vec = self->vec;
    const Layout* L = &vec->layout;
    const int32_t* a = (const int32_t*)self->act.buf;
    int dims = L->action_dims;
    long long bad = ocean_first_bad_action(L, a, (size_t)vec->num_envs * (size_t)L->agents_per_env);
    if (bad < 0) return 0;
    Py_ssize_t r = (Py_ssize_t)(bad / dims);
    int d = (int)(bad % dims);
    char dim[32] = "";
    if (dims > 1) snprintf(dim, sizeof(dim), ", dimension %d", d);
    PyErr_Format(PyExc_ValueError, "%s: action %d for agent %zd (env %zd%s) is out of range; valid: 0..%d",
                 vec->spec->name, (int)a[bad], r, r / L->agents_per_env, dim, L->action_n[d] - 1);
    return -1;
}

static PyObject* Vec_step(PyVec* self, PyObject* noargs) {
    if (check_ready(self) < 0 || check_actions(self) < 0) return NULL;
    self->busy = 1;
    VecEnv* vec = self->vec;
    Py_BEGIN_ALLOW_THREADS
    vecenv_step(vec);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    Py_RETURN_NONE;
}

static PyObject* Vec_reset(PyVec* self, PyObject* args) {
    unsigned long long seed = 0;
    if (!PyArg_ParseTuple(args, "|K", &seed)) return NULL;
    if (check_ready(self) < 0) return NULL;
    self->busy = 1;
    VecEnv* vec = self->vec;
    Py_BEGIN_ALLOW_THREADS
    vecenv_reset(vec, seed);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    Py_RETURN_NONE;
}

static PyObject* Vec_log(PyVec* self, PyObject* noargs) {
    if (check_ready(self) < 0) return NULL;
    const EnvSpec* spec = self->vec->spec;
    float sums[64];
    vecenv_log(self->vec, sums);
    int fields = spec->log_fields;
    float n = sums[fields - 1];
    PyObject* out = PyDict_New();
    if (n <= 0.0f) return out;
    for (int f = 0; f < fields - 1; f++) {
        PyObject* v = PyFloat_FromDouble((double)sums[f] / n);
        PyDict_SetItemString(out, spec->log_names[f], v);
        Py_DECREF(v);
    }
    PyObject* count = PyFloat_FromDouble(n);
    PyDict_SetItemString(out, "n", count);
    Py_DECREF(count);
    return out;
}

static int check_index(PyVec* self, int index) {
    if (index < 0 || index >= self->vec->num_envs) {
        PyErr_Format(PyExc_IndexError, "%s: env index %d out of range [0, %d)", self->vec->spec->name, index,
                     self->vec->num_envs);
        return -1;
    }
    return 0;
}

static PyObject* Vec_render(PyVec* self, PyObject* args) {
    int index = 0;
    if (!PyArg_ParseTuple(args, "|i", &index)) return NULL;
    if (check_ready(self) < 0 || check_index(self, index) < 0) return NULL;
    const Layout* L = &self->vec->layout;
    Py_ssize_t size = (Py_ssize_t)L->frame_h * L->frame_w * 3;
    PyObject* bytes = PyBytes_FromStringAndSize(NULL, size);
    if (!bytes) return NULL;
    memset(PyBytes_AS_STRING(bytes), 0, (size_t)size);
    self->vec->spec->render(self->vec->envs + (size_t)index * self->vec->spec->size,
                            (uint8_t*)PyBytes_AS_STRING(bytes));
    return bytes;
}

static PyObject* Vec_render_text(PyVec* self, PyObject* args) {
    int index = 0;
    if (!PyArg_ParseTuple(args, "|i", &index)) return NULL;
    if (check_ready(self) < 0 || check_index(self, index) < 0) return NULL;
    const Layout* L = &self->vec->layout;
    size_t cells = (size_t)L->text_h * L->text_w;
    char* text = PyMem_Malloc(cells + 1);
    if (!text) return PyErr_NoMemory();
    memset(text, ' ', cells);
    text[cells] = 0;
    self->vec->spec->render_text(self->vec->envs + (size_t)index * self->vec->spec->size, text);
    /* rows joined by newlines */
    PyObject* rows = PyList_New(L->text_h);
    for (int y = 0; y < L->text_h; y++)
        PyList_SET_ITEM(rows, y, PyUnicode_DecodeUTF8(text + (size_t)y * L->text_w, L->text_w, "replace"));
    PyMem_Free(text);
    PyObject* sep = PyUnicode_FromString("\n");
    PyObject* out = PyUnicode_Join(sep, rows);
    Py_DECREF(sep);
    Py_DECREF(rows);
    return out;
}

static PyObject* Vec_close(PyVec* self, PyObject* noargs) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "cannot close an Ocean vector while another thread steps it");
        return NULL;
    }
    release(self);
    Py_RETURN_NONE;
}

static PyObject* Vec_get_closed(PyVec* self, void* closure) { return PyBool_FromLong(self->vec == NULL); }
static PyObject* Vec_get_num_threads(PyVec* self, void* closure) {
    return PyLong_FromLong(self->vec ? self->vec->num_threads : 0);
}

static PyMethodDef Vec_methods[] = {
    {"step", (PyCFunction)Vec_step, METH_NOARGS, "Check the actions buffer, then step every env in place."},
    {"reset", (PyCFunction)Vec_reset, METH_VARARGS, "reset(seed=0): reseed every env from (seed, index) and reset it."},
    {"log", (PyCFunction)Vec_log, METH_NOARGS, "Mean of each Log field over finished episodes since the last call."},
    {"render", (PyCFunction)Vec_render, METH_VARARGS, "render(index=0) -> bytes of an HxWx3 uint8 frame."},
    {"render_text", (PyCFunction)Vec_render_text, METH_VARARGS, "render_text(index=0) -> str."},
    {"close", (PyCFunction)Vec_close, METH_NOARGS, "Stop the threads and free the envs; idempotent."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Vec_getset[] = {
    {"closed", (getter)Vec_get_closed, NULL, "True after close()", NULL},
    {"num_threads", (getter)Vec_get_num_threads, NULL, "threads stepping the envs", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject VecType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "appliance._ocean.Vec",
    .tp_basicsize = sizeof(PyVec),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Vec(name, num_envs, observations, actions, rewards, terminals, truncations, num_threads=1, "
              "seed=0, params=None, env_offset=0): Ocean envs stepped in place over caller-owned buffers; env i "
              "is seeded from (seed, env_offset + i).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Vec_init,
    .tp_dealloc = (destructor)Vec_dealloc,
    .tp_methods = Vec_methods,
    .tp_getset = Vec_getset,
};

/* ------------------------------------------------------------------ Engine
 *
 * Engine(vec, threads): the rollout engine over a Vec's envs (engine.h): len(threads) buffers of
 * consecutive envs, threads[b] env threads for buffer b. run(horizon, callback, rewards, dones) runs
 * callback(buffer, step) on each buffer's own thread (taking the GIL), then checks the buffer's actions
 * and steps its envs with the GIL released; run_graphs(...) launches a CUDA graph per buffer and step
 * instead. The caller's thread waits with the GIL released and checks for signals every 50 ms: a
 * KeyboardInterrupt stops every buffer at its next step and is raised after all threads have ended.
 */

typedef struct {
    PyGILState_STATE gil;
    PyThreadState* ts;
    PyObject *type, *value, *tb; /* the exception the callback raised */
} PyBufferState;

typedef struct PyEngine {
    PyObject_HEAD
    Engine* eng;
    PyVec* vec;
    struct PyEngine* next;
    PyObject* callback; /* during run() */
    PyBufferState* state;
    EngineGraphs graphs;
    int buffers;
    int running, close_requested;
} PyEngine;

static void clear_exceptions(PyEngine* self) {
    for (int b = 0; b < self->buffers; b++) {
        Py_CLEAR(self->state[b].type);
        Py_CLEAR(self->state[b].value);
        Py_CLEAR(self->state[b].tb);
    }
}

/* Free the C engine and unlink it from its Vec (the Vec stays open). */
static void engine_release(PyEngine* self) {
    if (self->eng) {
        Engine* eng = self->eng;
        self->eng = NULL;
        Py_BEGIN_ALLOW_THREADS
        engine_destroy(eng);
        Py_END_ALLOW_THREADS
    }
    if (self->vec) {
        struct PyEngine** link = &self->vec->engines;
        while (*link && *link != self) link = &(*link)->next;
        if (*link) *link = self->next;
        self->next = NULL;
    }
}

static void detach_engines(PyVec* vec) {
    while (vec->engines) engine_release(vec->engines);
}

static int Engine_init(PyEngine* self, PyObject* args, PyObject* kwds) {
    static char* kwlist[] = {"vec", "threads", NULL};
    PyObject *vec_obj, *threads_obj;
    if (self->eng || self->vec) {
        PyErr_SetString(PyExc_RuntimeError, "Engine is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O", kwlist, &VecType, &vec_obj, &threads_obj)) return -1;
    PyVec* vec = (PyVec*)vec_obj;
    if (check_ready(vec) < 0) return -1;
    PyObject* seq = PySequence_Fast(threads_obj, "threads must be a sequence of ints (one per buffer)");
    if (!seq) return -1;
    Py_ssize_t buffers = PySequence_Fast_GET_SIZE(seq);
    if (buffers < 1 || buffers > ENGINE_MAX_BUFFERS || vec->vec->num_envs % buffers != 0) {
        PyErr_Format(PyExc_ValueError, "%s: %zd buffers must be between 1 and %d and divide num_envs (%d)",
                     vec->vec->spec->name, buffers, ENGINE_MAX_BUFFERS, vec->vec->num_envs);
        Py_DECREF(seq);
        return -1;
    }
    int threads[ENGINE_MAX_BUFFERS];
    for (Py_ssize_t b = 0; b < buffers; b++) {
        long t = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, b));
        if (t == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (t < 1 || t > 4096) {
            PyErr_Format(PyExc_ValueError, "threads[%zd] = %ld: each buffer needs 1..4096 env threads", b, t);
            Py_DECREF(seq);
            return -1;
        }
        threads[b] = (int)t;
    }
    Py_DECREF(seq);
    self->state = PyMem_Calloc((size_t)buffers, sizeof(PyBufferState));
    if (!self->state) {
        PyErr_NoMemory();
        return -1;
    }
    Buffers arrays = {vec->obs.buf, vec->act.buf, vec->rew.buf, vec->term.buf, vec->trunc.buf};
    char err[256] = {0};
    Engine* eng;
    VecEnv* parent = vec->vec;
    Py_BEGIN_ALLOW_THREADS
    eng = engine_create(parent, arrays, (int)buffers, threads, err, sizeof(err));
    Py_END_ALLOW_THREADS
    if (!eng) {
        PyErr_Format(PyExc_RuntimeError, "%s: %s", parent->spec->name, err);
        return -1;
    }
    self->eng = eng;
    self->buffers = (int)buffers;
    Py_INCREF(vec);
    self->vec = vec;
    self->next = vec->engines;
    vec->engines = self;
    return 0;
}

static void Engine_dealloc(PyEngine* self) {
    engine_release(self);
    clear_exceptions(self);
    PyMem_Free(self->state);
    Py_CLEAR(self->callback);
    Py_CLEAR(self->vec);
    Py_TYPE(self)->tp_free((PyObject*)self);
}

/* The Python callback as an engine policy: each buffer thread keeps one thread state for the run and
 * takes the GIL only for its callback. */
static void py_begin(void* ctx, int b) {
    PyEngine* self = (PyEngine*)ctx;
    self->state[b].gil = PyGILState_Ensure();
    self->state[b].ts = PyEval_SaveThread();
}

static void py_end(void* ctx, int b) {
    PyEngine* self = (PyEngine*)ctx;
    PyEval_RestoreThread(self->state[b].ts);
    PyGILState_Release(self->state[b].gil);
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int py_step(void* ctx, int b, int t, EngineTimes* times, char* err, size_t err_size) {
    PyEngine* self = (PyEngine*)ctx;
    double t0 = wall_now();
    PyEval_RestoreThread(self->state[b].ts);
    times->gil_s += wall_now() - t0;
    int rc = 0;
    PyObject* result = PyObject_CallFunction(self->callback, "ii", b, t);
    if (result) {
        Py_DECREF(result);
    } else {
        PyBufferState* s = &self->state[b];
        PyErr_Fetch(&s->type, &s->value, &s->tb);
        PyErr_NormalizeException(&s->type, &s->value, &s->tb);
        if (s->tb && s->value) PyException_SetTraceback(s->value, s->tb);
        snprintf(err, err_size, "the policy callback raised an exception");
        rc = -1;
    }
    self->state[b].ts = PyEval_SaveThread();
    return rc;
}

static int check_engine(PyEngine* self) {
    if (!self->eng) {
        PyErr_SetString(PyExc_RuntimeError, "this engine is closed (or its Ocean vector was)");
        return -1;
    }
    if (self->running) {
        PyErr_SetString(PyExc_RuntimeError, "this engine is already running a horizon");
        return -1;
    }
    return check_ready(self->vec);
}

/* Optional [horizon, agents] history arrays; a NULL pointer when the argument is None. */
static int history(PyEngine* self, PyObject* obj, const char* what, char fmt, size_t itemsize, int horizon,
                   Py_buffer* view, void** ptr) {
    *ptr = NULL;
    if (obj == NULL || obj == Py_None) return 0;
    if (get_buffer(self->vec->vec->spec->name, obj, what, fmt, itemsize, horizon, engine_agents(self->eng), 0, view) < 0)
        return -1;
    *ptr = view->buf;
    return 1;
}

/* Add "(buffer b, step t)" to an exception before it is raised (Python 3.11+ notes). */
static void add_note(PyObject* value, int buffer, int step, int others) {
    if (!value) return;
    PyObject* note = PyUnicode_FromFormat("in rollout buffer %d at step %d%s", buffer, step,
                                          others ? " (other buffers failed too)" : "");
    if (!note) {
        PyErr_Clear();
        return;
    }
    PyObject* r = PyObject_CallMethod(value, "add_note", "O", note);
    Py_DECREF(note);
    if (r) Py_DECREF(r);
    else PyErr_Clear();
}

static PyObject* run_policy(PyEngine* self, int horizon, EnginePolicy policy, PyObject* rewards, PyObject* dones) {
    if (horizon < 0) {
        PyErr_Format(PyExc_ValueError, "horizon must be >= 0, got %d", horizon);
        return NULL;
    }
    Py_buffer rv, dv;
    void *rp, *dp;
    int has_r = history(self, rewards, "rewards history", 'f', 4, horizon, &rv, &rp);
    if (has_r < 0) return NULL;
    int has_d = history(self, dones, "dones history", 'B', 1, horizon, &dv, &dp);
    if (has_d < 0) {
        if (has_r) PyBuffer_Release(&rv);
        return NULL;
    }
    clear_exceptions(self);
    char err[ENGINE_ERR] = {0};
    self->running = 1;
    self->vec->busy = 1;
    int started = engine_start(self->eng, horizon, policy, (float*)rp, (uint8_t*)dp, err, sizeof(err));
    int interrupted = 0, first = -1;
    if (started == 0) {
        for (;;) {
            int finished;
            Engine* eng = self->eng;
            Py_BEGIN_ALLOW_THREADS
            finished = engine_wait(eng, 50);
            Py_END_ALLOW_THREADS
            if (finished) break;
            if (self->close_requested) engine_abort(self->eng);
            if (!interrupted && PyErr_CheckSignals() < 0) {
                interrupted = 1; /* the signal's exception stays set; stop the buffers, then raise it */
                engine_abort(self->eng);
            }
        }
        Engine* eng = self->eng;
        Py_BEGIN_ALLOW_THREADS
        first = engine_join(eng, err, sizeof(err));
        Py_END_ALLOW_THREADS
    }
    self->vec->busy = 0;
    self->running = 0;
    if (has_r) PyBuffer_Release(&rv);
    if (has_d) PyBuffer_Release(&dv);
    int failures = engine_failures(self->eng);
    int failed_step = first >= 0 ? engine_failed_step(self->eng, first) : -1;
    int failed_check = first >= 0 ? engine_failed_check(self->eng, first) : 0;
    if (self->close_requested) {
        self->close_requested = 0;
        engine_release(self);
    }
    if (started != 0) {
        clear_exceptions(self);
        PyErr_Format(PyExc_RuntimeError, "rollout engine: %s", err);
        return NULL;
    }
    if (interrupted) {
        clear_exceptions(self);
        return NULL;
    }
    if (first >= 0) {
        PyBufferState* s = &self->state[first];
        if (s->type) {
            PyObject *type = s->type, *value = s->value, *tb = s->tb;
            s->type = s->value = s->tb = NULL;
            add_note(value, first, failed_step, failures > 1);
            clear_exceptions(self);
            PyErr_Restore(type, value, tb);
        } else {
            clear_exceptions(self);
            PyErr_Format(failed_check ? PyExc_ValueError : PyExc_RuntimeError, "%s (rollout buffer %d, step %d)", err,
                         first, failed_step);
        }
        return NULL;
    }
    if (!self->eng) {
        PyErr_SetString(PyExc_RuntimeError, "the engine was closed during run(); the horizon is incomplete");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject* Engine_run(PyEngine* self, PyObject* args, PyObject* kwds) {
    static char* kwlist[] = {"horizon", "callback", "rewards", "dones", NULL};
    int horizon;
    PyObject *callback, *rewards = Py_None, *dones = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iO|OO", kwlist, &horizon, &callback, &rewards, &dones)) return NULL;
    if (check_engine(self) < 0) return NULL;
    if (!PyCallable_Check(callback)) {
        PyErr_SetString(PyExc_TypeError, "callback must be callable as callback(buffer, step)");
        return NULL;
    }
    Py_INCREF(callback);
    Py_XSETREF(self->callback, callback);
    EnginePolicy policy = {py_step, py_begin, py_end, self};
    PyObject* out = run_policy(self, horizon, policy, rewards, dones);
    Py_CLEAR(self->callback);
    return out;
}

static int handles(PyObject* obj, const char* what, int count, void** out) {
    PyObject* seq = PySequence_Fast(obj, "graph handles must be a sequence of ints");
    if (!seq) return -1;
    if (PySequence_Fast_GET_SIZE(seq) != count) {
        PyErr_Format(PyExc_ValueError, "%s: expected %d handles (one per buffer), got %zd", what, count,
                     PySequence_Fast_GET_SIZE(seq));
        Py_DECREF(seq);
        return -1;
    }
    for (int b = 0; b < count; b++) {
        out[b] = PyLong_AsVoidPtr(PySequence_Fast_GET_ITEM(seq, b));
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

static PyObject* Engine_run_graphs(PyEngine* self, PyObject* args, PyObject* kwds) {
    static char* kwlist[] = {"horizon", "execs", "streams", "rewards", "dones", NULL};
    int horizon;
    PyObject *execs, *streams, *rewards = Py_None, *dones = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iOO|OO", kwlist, &horizon, &execs, &streams, &rewards, &dones))
        return NULL;
    if (check_engine(self) < 0) return NULL;
    char err[256] = {0};
    if (engine_cuda_load(err, sizeof(err)) != 0) {
        PyErr_Format(PyExc_RuntimeError, "rollout engine: %s", err);
        return NULL;
    }
    if (handles(execs, "execs", self->buffers, self->graphs.exec) < 0) return NULL;
    if (handles(streams, "streams", self->buffers, self->graphs.stream) < 0) return NULL;
    for (int b = 0; b < self->buffers; b++) {
        if (!self->graphs.exec[b]) {
            PyErr_Format(PyExc_ValueError, "execs[%d] is a null graph", b);
            return NULL;
        }
    }
    self->graphs.context = engine_cuda_context(err, sizeof(err));
    if (!self->graphs.context) {
        PyErr_Format(PyExc_RuntimeError, "rollout engine: %s", err);
        return NULL;
    }
    return run_policy(self, horizon, engine_graph_policy(&self->graphs), rewards, dones);
}

static PyObject* Engine_take_times(PyEngine* self, PyObject* noargs) {
    if (!self->eng) return PyList_New(0);
    EngineTimes times[ENGINE_MAX_BUFFERS];
    engine_take_times(self->eng, times);
    PyObject* out = PyList_New(self->buffers);
    for (int b = 0; b < self->buffers; b++) {
        PyObject* d = Py_BuildValue("{s:d,s:d,s:d,s:L}", "policy", times[b].policy_s - times[b].gil_s, "gil",
                                    times[b].gil_s, "env", times[b].env_s, "steps", times[b].steps);
        if (!d) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, b, d);
    }
    return out;
}

static PyObject* Engine_close(PyEngine* self, PyObject* noargs) {
    if (self->running) { /* from a callback or another thread: stop, and free once run() has joined */
        self->close_requested = 1;
        if (self->eng) engine_abort(self->eng);
        Py_RETURN_NONE;
    }
    engine_release(self);
    Py_RETURN_NONE;
}

static PyObject* Engine_get_closed(PyEngine* self, void* c) { return PyBool_FromLong(self->eng == NULL); }
static PyObject* Engine_get_running(PyEngine* self, void* c) { return PyBool_FromLong(self->running); }
static PyObject* Engine_get_buffers(PyEngine* self, void* c) { return PyLong_FromLong(self->buffers); }
static PyObject* Engine_get_threads(PyEngine* self, void* c) {
    PyObject* out = PyList_New(self->buffers);
    for (int b = 0; b < self->buffers; b++)
        PyList_SET_ITEM(out, b, PyLong_FromLong(self->eng ? engine_buffer_threads(self->eng, b) : 0));
    return out;
}
static PyObject* Engine_get_buffer_agents(PyEngine* self, void* c) {
    return PyLong_FromLong(self->eng ? engine_buffer_agents(self->eng) : 0);
}

static PyMethodDef Engine_methods[] = {
    {"run", (PyCFunction)(void (*)(void))Engine_run, METH_VARARGS | METH_KEYWORDS,
     "run(horizon, callback, rewards=None, dones=None): callback(buffer, step) then the buffer's env step, "
     "horizon times per buffer, each buffer on its own thread; rewards/dones: [horizon, agents] float32/uint8 "
     "arrays that receive what the policy saw at each step."},
    {"run_graphs", (PyCFunction)(void (*)(void))Engine_run_graphs, METH_VARARGS | METH_KEYWORDS,
     "run_graphs(horizon, execs, streams, rewards=None, dones=None): per step cuGraphLaunch(execs[b], streams[b]) "
     "and cuStreamSynchronize instead of a callback."},
    {"take_times", (PyCFunction)Engine_take_times, METH_NOARGS,
     "Per-buffer seconds in the policy step (policy), waiting for the GIL (gil) and stepping envs (env) since "
     "the last call."},
    {"close", (PyCFunction)Engine_close, METH_NOARGS, "Stop the env threads; during run(): stop it first."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Engine_getset[] = {
    {"closed", (getter)Engine_get_closed, NULL, "True after close()", NULL},
    {"running", (getter)Engine_get_running, NULL, "True during run()", NULL},
    {"buffers", (getter)Engine_get_buffers, NULL, "number of buffers", NULL},
    {"threads", (getter)Engine_get_threads, NULL, "env threads of each buffer", NULL},
    {"buffer_agents", (getter)Engine_get_buffer_agents, NULL, "agents per buffer", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "appliance._ocean.Engine",
    .tp_basicsize = sizeof(PyEngine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Engine(vec, threads): the rollout engine's step loop over len(threads) buffers of a Vec's envs.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
    .tp_getset = Engine_getset,
};

static PyObject* py_cuda_driver(PyObject* self, PyObject* noargs) {
    char err[256] = {0};
    if (engine_cuda_load(err, sizeof(err)) == 0) Py_RETURN_NONE;
    return PyUnicode_FromString(err);
}

/* first_invalid(actions, nvec) -> flat index of the first value outside [0, nvec[d]), or -1.
 * actions: C-contiguous int32 or int64, shape (n,) or (n, len(nvec)). The vector backends' fast
 * range check: a numpy reduction costs microseconds of fixed overhead per call, this costs ~0. */
static PyObject* py_first_invalid(PyObject* self, PyObject* args) {
    PyObject *obj, *nvec_obj;
    if (!PyArg_ParseTuple(args, "OO", &obj, &nvec_obj)) return NULL;
    long long nvec[OCEAN_MAX_ACTION_DIMS];
    PyObject* seq = PySequence_Fast(nvec_obj, "nvec must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t dims = PySequence_Fast_GET_SIZE(seq);
    if (dims < 1 || dims > OCEAN_MAX_ACTION_DIMS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "nvec must have 1..%d entries", OCEAN_MAX_ACTION_DIMS);
        return NULL;
    }
    for (Py_ssize_t d = 0; d < dims; d++) nvec[d] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, d));
    Py_DECREF(seq);
    if (PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    const char* f = view.format ? view.format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    Py_ssize_t n = view.len / (view.itemsize ? view.itemsize : 1), bad = -1;
    if (view.itemsize == 4 && (f[0] == 'i' || f[0] == 'l')) {
        const int32_t* a = view.buf;
        for (Py_ssize_t i = 0; i < n; i++)
            if (a[i] < 0 || a[i] >= nvec[i % dims]) { bad = i; break; }
    } else if (view.itemsize == 8 && (f[0] == 'q' || f[0] == 'l')) {
        const int64_t* a = view.buf;
        for (Py_ssize_t i = 0; i < n; i++)
            if (a[i] < 0 || a[i] >= nvec[i % dims]) { bad = i; break; }
    } else {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_TypeError, "first_invalid takes int32 or int64 actions, got format '%s'", view.format);
        return NULL;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(bad);
}

static PyMethodDef module_methods[] = {
    {"first_invalid", py_first_invalid, METH_VARARGS, "first_invalid(actions, nvec) -> index of the first out-of-range action or -1."},
    {"names", py_names, METH_NOARGS, "Names of the compiled Ocean envs."},
    {"cuda_driver", py_cuda_driver, METH_NOARGS,
     "None when the CUDA driver's graph entry points load (libcuda.so.1), else why not."},
    {"describe", py_describe, METH_VARARGS, "describe(name, params=None) -> layout, spaces, params, log names."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_ocean", "Ocean C environments.", -1, module_methods};

PyMODINIT_FUNC PyInit__ocean(void) {
    if (PyType_Ready(&VecType) < 0 || PyType_Ready(&EngineType) < 0) return NULL;
    PyObject* m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&VecType);
    if (PyModule_AddObject(m, "Vec", (PyObject*)&VecType) < 0) {
        Py_DECREF(&VecType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject*)&EngineType) < 0) {
        Py_DECREF(&EngineType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
