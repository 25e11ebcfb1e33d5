/* engine_binding.c: the Engine type of appliance._ocean (its module is binding.c).
 *
 * Engine(vec, threads): the rollout engine over a Vec's envs (engine.h): len(threads) buffers of
 * consecutive envs, threads[b] env threads for buffer b. run(horizon, callback, rewards, dones) runs
 * callback(buffer, step) on each buffer's own thread (taking the GIL), then checks the buffer's actions
 * and steps its envs with the GIL released; run_graphs(...) launches a CUDA graph per buffer and step
 * instead. The caller's thread waits with the GIL released and checks for signals every 50 ms: a
 * KeyboardInterrupt stops every buffer at its next step and is raised after all threads have ended.
 */
#include "binding.h"
#include "engine.h"

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

void detach_engines(PyVec* vec) {
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

PyTypeObject EngineType = {
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

PyObject* py_cuda_driver(PyObject* self, PyObject* noargs) {
    char err[256] = {0};
    if (engine_cuda_load(err, sizeof(err)) == 0) Py_RETURN_NONE;
    return PyUnicode_FromString(err);
}
