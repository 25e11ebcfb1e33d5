/* binding.h: what the two files of the CPython module appliance._ocean share. binding.c holds the
 * module, the env binding (Vec, describe, names) and its checks; engine_binding.c the Engine type,
 * the rollout engine's step loop over a Vec's envs. */
#pragma once
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "vecenv.h"

struct PyEngine;

typedef struct {
    PyObject_HEAD
    VecEnv* vec;
    Py_buffer obs, act, rew, term, trunc;
    int busy;
    struct PyEngine* engines; /* engines over this Vec's envs (a list through PyEngine.next) */
} PyVec;

/* binding.c */
extern PyTypeObject VecType;
/* A RuntimeError (and -1) if the Vec is closed or being stepped by another thread. */
int check_ready(PyVec* self);
/* Take a writable, C-contiguous, aligned (rows, cols) buffer of format fmt; -1 with an exception set. */
int get_buffer(const char* env, PyObject* obj, const char* what, char fmt, size_t itemsize, Py_ssize_t rows,
               Py_ssize_t cols, int allow_1d, Py_buffer* view);

/* engine_binding.c */
extern PyTypeObject EngineType;
/* Free every Engine over this Vec's envs (at close); the Engine objects stay, closed. */
void detach_engines(PyVec* vec);
/* cuda_driver() -> None when the CUDA driver's graph entry points load, else why not. */
PyObject* py_cuda_driver(PyObject* self, PyObject* noargs);
