/* binding.c: CPython module appliance._ocean.
 *
 * A Vec steps N envs of one kind in place over NumPy buffers the caller owns, so C writes each
 * observation straight into the array the trainer will copy to the GPU. Everything is checked here,
 * at the boundary: buffer dtype, shape, contiguity and alignment once at creation; action values on
 * every step (an out-of-range action is a ValueError naming the env, never undefined behaviour).
 * The Engine type, the rollout engine over a Vec's envs, is in engine_binding.c.
 */
#include "binding.h"
#include "registry.h"

#include <dlfcn.h>

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
        if (p->type == PARAM_INT && (double)(long long)v != v) {
            PyErr_Format(PyExc_ValueError, "%s: parameter '%s' = %S must be a whole number", spec->name, name, value);
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
    PyObject* types = PyDict_New();
    for (int i = 0; spec->params[i].name; i++) {
        PyObject* t = PyUnicode_FromString(spec->params[i].type == PARAM_INT ? "int" : "float");
        PyDict_SetItemString(types, spec->params[i].name, t);
        Py_DECREF(t);
        PyObject* v = PyFloat_FromDouble(spec->params[i].value);
        PyDict_SetItemString(defaults, spec->params[i].name, v);
        Py_DECREF(v);
        PyObject* r = Py_BuildValue("(dd)", spec->params[i].min, spec->params[i].max);
        PyDict_SetItemString(ranges, spec->params[i].name, r);
        Py_DECREF(r);
    }
    PyObject* logs = PyList_New(spec->log_fields);
    for (int f = 0; f < spec->log_fields; f++) PyList_SET_ITEM(logs, f, PyUnicode_FromString(spec->log_names[f]));
    PyObject* out = Py_BuildValue(
        "{s:s,s:i,s:i,s:s,s:f,s:f,s:i,s:f,s:f,s:N,s:(ii),s:(ii),s:N,s:N,s:N,s:N,s:n}", "name", spec->name, "agents_per_env",
        L.agents_per_env, "obs_size", L.obs_size, "obs_dtype", dtype_name(L.obs_dtype), "obs_low", L.obs_low,
        "obs_high", L.obs_high, "obs_tail", L.obs_tail, "tail_low", L.tail_low, "tail_high", L.tail_high, "action_nvec", nvec, "frame", L.frame_h, L.frame_w, "text", L.text_h, L.text_w,
        "params", defaults, "param_ranges", ranges, "param_types", types, "log_names", logs, "env_bytes", (Py_ssize_t)spec->size);
    if (!out) return NULL;
    /* obs_shape: (C, H, W) for an image observation (Layout.obs_channels > 0), else None */
    PyObject* shape = L.obs_channels > 0 ? Py_BuildValue("(iii)", L.obs_channels, L.obs_height, L.obs_width)
                                         : (Py_INCREF(Py_None), Py_None);
    if (!shape || PyDict_SetItemString(out, "obs_shape", shape) < 0) {
        Py_XDECREF(shape);
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(shape);
    if (PyDict_SetItemString(out, "action_continuous", L.action_continuous ? Py_True : Py_False) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    PyObject* mask = PyLong_FromLong(L.action_mask);
    if (!mask || PyDict_SetItemString(out, "action_mask", mask) < 0) {
        Py_XDECREF(mask);
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(mask);
    return out;
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

int get_buffer(const char* env, PyObject* obj, const char* what, char fmt, size_t itemsize,
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
    Py_ssize_t trailing = 1; /* (rows, cols) or (rows, *dims) with prod(dims) == cols: an image's (C, H, W) */
    for (int d = 1; d < view->ndim; d++) trailing *= view->shape[d];
    int shape_ok = (view->ndim >= 2 && view->shape[0] == rows && trailing == cols) ||
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
    if (get_buffer(name, act, "actions", L.action_continuous ? 'f' : 'i', 4, rows, L.action_dims, 1, &self->act) < 0)
        goto fail_obs;
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
        /* memory and threads: MemoryError; an env's own whole-vector init (vec_init) names itself */
        int own = strncmp(err, name, strlen(name)) == 0;
        if (own) PyErr_SetString(PyExc_ValueError, err);
        else PyErr_Format(PyExc_MemoryError, "%s: %s", name, err);
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

int check_ready(PyVec* self) {
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
    if (L->action_continuous) {
        char value[32];
        snprintf(value, sizeof(value), "%g", (double)((const float*)a)[bad]);
        PyErr_Format(PyExc_ValueError, "%s: action %s for agent %zd (env %zd%s) is not a finite number",
                     vec->spec->name, value, r, r / L->agents_per_env, dim);
        return -1;
    }
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
    float sums[OCEAN_MAX_LOG_FIELDS];
    vecenv_log(self->vec, sums);
    int fields = spec->log_fields, n_at = spec_log_n(spec);
    float n = sums[n_at];
    PyObject* out = PyDict_New();
    if (n <= 0.0f) return out;
    for (int f = 0; f < fields; f++) {
        if (f == n_at) continue;
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

PyTypeObject VecType = {
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

/* ------------------------------------------------------------------ plugins (envs/compat4/) */

typedef int (*PluginAbiFn)(void);
typedef const EnvSpec* (*PluginSpecFn)(void);
typedef const char* (*PluginProbeFn)(const double*, unsigned long long*);

/* load_plugin(path) -> name: a library `puffer-bench envs build` made, opened once and its env
 * registered like a compiled-in one (a second load of the same name is the first's). The library
 * stays loaded for the process: its spec and functions are in the registry. */
static PyObject* py_load_plugin(PyObject* self, PyObject* args) {
    const char* path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        PyErr_Format(PyExc_ValueError, "cannot load env library %s: %s", path, dlerror());
        return NULL;
    }
    PluginAbiFn abi = (PluginAbiFn)dlsym(lib, "ocean_plugin_abi");
    PluginSpecFn spec_fn = (PluginSpecFn)dlsym(lib, "ocean_plugin_spec");
    if (!abi || !spec_fn) {
        dlclose(lib);
        PyErr_Format(PyExc_ValueError, "%s is not an env library built by `puffer-bench envs build`", path);
        return NULL;
    }
    if (abi() != OCEAN_PLUGIN_ABI) {
        dlclose(lib);
        PyErr_Format(PyExc_ValueError, "%s was built against other runtime headers: build it again", path);
        return NULL;
    }
    const EnvSpec* spec = spec_fn();
    if (spec->log_fields < 1 || spec->log_fields > OCEAN_MAX_LOG_FIELDS) {
        dlclose(lib);
        PyErr_Format(PyExc_ValueError, "%s: its Log has %d fields, the runtime takes 1..%d", path,
                     spec->log_fields, OCEAN_MAX_LOG_FIELDS);
        return NULL;
    }
    const EnvSpec* known = ocean_find(spec->name);
    if (known) return PyUnicode_FromString(known->name);
    if (ocean_registry_full()) {
        PyErr_Format(PyExc_ValueError, "cannot register %s: the env registry is full", spec->name);
        return NULL;
    }
    ocean_register(spec);
    return PyUnicode_FromString(spec->name);
}

/* plugin_probe(path, name, params=None) -> (missing, read): the kwarg its my_init reads that params
 * lack (or None), and the names of the parameters it read. */
static PyObject* py_plugin_probe(PyObject* self, PyObject* args) {
    const char *path, *name;
    PyObject* params = Py_None;
    if (!PyArg_ParseTuple(args, "ss|O", &path, &name, &params)) return NULL;
    const EnvSpec* spec = find_spec(name);
    if (!spec) return NULL;
    double values[OCEAN_MAX_PARAMS];
    if (parse_params(spec, params, values) < 0) return NULL;
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    PluginProbeFn fn = lib ? (PluginProbeFn)dlsym(lib, "ocean_plugin_probe") : NULL;
    if (!fn) {
        if (lib) dlclose(lib);
        PyErr_Format(PyExc_ValueError, "%s is not loaded: load_plugin it first", path);
        return NULL;
    }
    unsigned long long mask = 0;
    const char* missing = fn(values, &mask);
    dlclose(lib); /* RTLD_NOLOAD took a reference: give it back, load_plugin's stays */
    PyObject* read = PyList_New(0);
    for (int i = 0; spec->params[i].name && i < 64; i++) {
        if (!(mask & (1ULL << i))) continue;
        PyObject* s = PyUnicode_FromString(spec->params[i].name);
        PyList_Append(read, s);
        Py_DECREF(s);
    }
    if (!missing) return Py_BuildValue("(ON)", Py_None, read);
    return Py_BuildValue("(sN)", missing, read);
}

static PyMethodDef module_methods[] = {
    {"first_invalid", py_first_invalid, METH_VARARGS, "first_invalid(actions, nvec) -> index of the first out-of-range action or -1."},
    {"names", py_names, METH_NOARGS, "Names of the compiled Ocean envs."},
    {"cuda_driver", py_cuda_driver, METH_NOARGS,
     "None when the CUDA driver's graph entry points load (libcuda.so.1), else why not."},
    {"describe", py_describe, METH_VARARGS, "describe(name, params=None) -> layout, spaces, params (defaults, ranges, types), log names."},
    {"load_plugin", py_load_plugin, METH_VARARGS, "load_plugin(path) -> name: register the env of a library `envs build` made."},
    {"plugin_probe", py_plugin_probe, METH_VARARGS,
     "plugin_probe(path, name, params=None) -> (kwarg my_init reads that params lack or None, params it read)."},
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
