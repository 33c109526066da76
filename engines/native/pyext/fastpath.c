/* probe-tui: the per-entry statistics call as a CPython extension (issue 21, docs/CAPTURE.md "The fourth pass").
 *
 * `host_row(t, high)` is the first case of engines/adapters/torch/tensor_stats.py's `StatsBatch.add`: a CPU float
 * tensor of at least one dimension, contiguous, not a negative view, not empty, its data pointer aligned to its
 * item. It asks the tensor exactly what that Python code asks (dtype, is_cpu, dim(), is_contiguous(), is_neg(),
 * numel(), data_ptr()), calls the fused kernel `pt_stats` (stats.c, bound by address from the kernel library that
 * engines/native/build.py loaded: one copy of the kernel in the process) and returns the statistics row, the same
 * tuple that code builds: (max, min, sum, norm, numel, valid, nan, +inf, -inf). Any other case returns None
 * and the caller's Python path runs unchanged; an exception raised by the tensor's methods propagates (the
 * Python path would have raised it too), except data_ptr()'s RuntimeError, which means "no readable pointer"
 * there as here: None.
 *
 * Why: from Python the same call costs a bytecode frame, seven method calls through the interpreter, a ctypes
 * foreign call (argument conversion, ~1 us) and the tuple's nine items read back from a ctypes array; here it is
 * the seven method calls and the kernel. No framework headers: the tensor is asked through its Python methods.
 *
 * `crc32_at(ptr, nbytes)` is md5 mode's CRC-32 of a CPU tensor's memory (engines/adapters/torch/entries.py's
 * `_hash`): crc32.c's `pt_crc32`, bound by address once `configure_crc` is given it (engines/native/crc32.py), in
 * place of a ctypes call.
 *
 * `configure(pt_stats_address, codes, float32_code, threads_from, get_num_threads, valid_stats)` is called
 * once by engines/native/fastpath.py: codes maps each float dtype object to (kernel code, item size - 1).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef int (*pt_stats_fn)(const void *data, int64_t count, int dtype, int out_dtype, int nthreads, double *out);

static pt_stats_fn stats_fn = NULL;
static PyObject *codes = NULL;           /* dtype -> (code, align mask) */
static PyObject *get_num_threads = NULL; /* torch.get_num_threads */
static int float32_code = 0;
static int half_codes_from = 2;          /* codes >= this are the half types (FLOAT16, BFLOAT16) */
static long long threads_from = 1 << 20;
static long valid_stats = 15;

/* From this many elements the kernel runs without the GIL (as the ctypes call did for every size): below it
 * the read takes less than releasing and taking the GIL back. */
#define RELEASE_FROM 65536

static PyObject *s_dtype, *s_is_cpu, *s_dim, *s_is_contiguous, *s_is_neg, *s_numel, *s_data_ptr;

static PyObject *call0(PyObject *self, PyObject *name) {
    PyObject *args[1] = {self};
    return PyObject_VectorcallMethod(name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* -1 on error, else 0 / 1 */
static int call_truth(PyObject *self, PyObject *name) {
    PyObject *r = call0(self, name);
    if (r == NULL)
        return -1;
    int v = PyObject_IsTrue(r);
    Py_DECREF(r);
    return v;
}

static PyObject *host_row(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "host_row(t, high)");
        return NULL;
    }
    if (stats_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "host_row: not configured");
        return NULL;
    }
    PyObject *t = args[0];
    int high = PyObject_IsTrue(args[1]);
    if (high < 0)
        return NULL;
    PyObject *dtype = PyObject_GetAttr(t, s_dtype);
    if (dtype == NULL)
        return NULL;
    PyObject *entry = PyDict_GetItemWithError(codes, dtype); /* borrowed */
    Py_DECREF(dtype);
    if (entry == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    long code = PyLong_AsLong(PyTuple_GET_ITEM(entry, 0));
    long align = PyLong_AsLong(PyTuple_GET_ITEM(entry, 1));
    PyObject *cpu = PyObject_GetAttr(t, s_is_cpu);
    if (cpu == NULL)
        return NULL;
    int is_cpu = PyObject_IsTrue(cpu);
    Py_DECREF(cpu);
    if (is_cpu <= 0)
        return is_cpu < 0 ? NULL : (Py_INCREF(Py_None), Py_None);
    int v = call_truth(t, s_dim);
    if (v <= 0)
        return v < 0 ? NULL : (Py_INCREF(Py_None), Py_None);
    v = call_truth(t, s_is_contiguous);
    if (v <= 0)
        return v < 0 ? NULL : (Py_INCREF(Py_None), Py_None);
    v = call_truth(t, s_is_neg);
    if (v != 0)
        return v < 0 ? NULL : (Py_INCREF(Py_None), Py_None);
    PyObject *n_obj = call0(t, s_numel);
    if (n_obj == NULL)
        return NULL;
    long long numel = PyLong_AsLongLong(n_obj);
    Py_DECREF(n_obj);
    if (numel == -1 && PyErr_Occurred())
        return NULL;
    if (numel <= 0)
        Py_RETURN_NONE;
    PyObject *p_obj = call0(t, s_data_ptr);
    if (p_obj == NULL) {
        if (PyErr_ExceptionMatches(PyExc_RuntimeError)) { /* no readable pointer: the Python path */
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        return NULL;
    }
    unsigned long long ptr = PyLong_AsUnsignedLongLong(p_obj);
    Py_DECREF(p_obj);
    if (ptr == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (ptr == 0 || (ptr & (unsigned long long)align))
        Py_RETURN_NONE;
    int threads = 1;
    if (numel >= threads_from) {
        PyObject *n = PyObject_CallNoArgs(get_num_threads);
        if (n == NULL)
            return NULL;
        threads = (int)PyLong_AsLong(n);
        Py_DECREF(n);
        if (threads == -1 && PyErr_Occurred())
            return NULL;
    }
    int out_code = (high && code >= half_codes_from) ? float32_code : (int)code;
    double out[7];
    int rc;
    if (threads > 1 || numel >= RELEASE_FROM) {
        Py_BEGIN_ALLOW_THREADS
        rc = stats_fn((const void *)(uintptr_t)ptr, (int64_t)numel, (int)code, out_code, threads, out);
        Py_END_ALLOW_THREADS
    } else {
        rc = stats_fn((const void *)(uintptr_t)ptr, (int64_t)numel, (int)code, out_code, threads, out);
    }
    if (rc != 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(ddddLlLLL)", out[0], out[1], out[2], out[3], numel, valid_stats, (long long)out[4],
                         (long long)out[5], (long long)out[6]);
}

/* ---- the CRC-32 of memory (md5 mode): crc32.c's `pt_crc32`, bound by address like `pt_stats` ---- */
typedef uint32_t (*pt_crc_fn)(uint32_t crc, const void *buf, size_t len);
static pt_crc_fn crc_fn = NULL;

/* crc32_at(ptr, nbytes): the CRC-32 of nbytes at ptr (from 0), as NativeCrc32.at(ptr, nbytes) on one thread. */
static PyObject *crc32_at(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "crc32_at(ptr, nbytes)");
        return NULL;
    }
    if (crc_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "crc32_at: not configured");
        return NULL;
    }
    unsigned long long ptr = PyLong_AsUnsignedLongLong(args[0]);
    if (ptr == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    long long nbytes = PyLong_AsLongLong(args[1]);
    if (nbytes == -1 && PyErr_Occurred())
        return NULL;
    if (nbytes < 0 || (nbytes > 0 && ptr == 0)) {
        PyErr_SetString(PyExc_ValueError, "crc32_at: no memory to read");
        return NULL;
    }
    uint32_t crc;
    if (nbytes >= RELEASE_FROM * 4) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc_fn(0, (const void *)(uintptr_t)ptr, (size_t)nbytes);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc_fn(0, (const void *)(uintptr_t)ptr, (size_t)nbytes);
    }
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *configure_crc(PyObject *module, PyObject *args) {
    (void)module;
    unsigned long long address;
    if (!PyArg_ParseTuple(args, "K", &address))
        return NULL;
    if (address == 0) {
        PyErr_SetString(PyExc_ValueError, "configure_crc: no kernel address");
        return NULL;
    }
    crc_fn = (pt_crc_fn)(uintptr_t)address;
    Py_RETURN_NONE;
}

static PyObject *configure(PyObject *module, PyObject *args) {
    (void)module;
    unsigned long long address;
    PyObject *code_map, *threads_fn;
    int f32, half_from;
    long long from;
    long valid;
    if (!PyArg_ParseTuple(args, "KO!iiLOl", &address, &PyDict_Type, &code_map, &f32, &half_from, &from,
                          &threads_fn, &valid))
        return NULL;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(code_map, &pos, &key, &value)) {
        if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 2 || !PyLong_Check(PyTuple_GET_ITEM(value, 0))
            || !PyLong_Check(PyTuple_GET_ITEM(value, 1))) {
            PyErr_SetString(PyExc_TypeError, "configure: codes maps a dtype to (code, align)");
            return NULL;
        }
    }
    if (address == 0) {
        PyErr_SetString(PyExc_ValueError, "configure: no kernel address");
        return NULL;
    }
    Py_INCREF(code_map);
    Py_XSETREF(codes, code_map);
    Py_INCREF(threads_fn);
    Py_XSETREF(get_num_threads, threads_fn);
    stats_fn = (pt_stats_fn)(uintptr_t)address;
    float32_code = f32;
    half_codes_from = half_from;
    threads_from = from;
    valid_stats = valid;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"host_row", (PyCFunction)(void (*)(void))host_row, METH_FASTCALL,
     "host_row(t, high): the statistics row of a contiguous CPU float tensor, or None (the Python path)."},
    {"configure", configure, METH_VARARGS, "configure(address, codes, float32, half_from, threads_from, "
                                           "get_num_threads, valid_stats)"},
    {"crc32_at", (PyCFunction)(void (*)(void))crc32_at, METH_FASTCALL,
     "crc32_at(ptr, nbytes): the CRC-32 of nbytes bytes at address ptr."},
    {"configure_crc", configure_crc, METH_VARARGS, "configure_crc(address of pt_crc32)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_probe_fastpath", NULL, -1, methods,
                                        NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__probe_fastpath(void) {
    s_dtype = PyUnicode_InternFromString("dtype");
    s_is_cpu = PyUnicode_InternFromString("is_cpu");
    s_dim = PyUnicode_InternFromString("dim");
    s_is_contiguous = PyUnicode_InternFromString("is_contiguous");
    s_is_neg = PyUnicode_InternFromString("is_neg");
    s_numel = PyUnicode_InternFromString("numel");
    s_data_ptr = PyUnicode_InternFromString("data_ptr");
    if (!s_dtype || !s_is_cpu || !s_dim || !s_is_contiguous || !s_is_neg || !s_numel || !s_data_ptr)
        return NULL;
    return PyModule_Create(&module_def);
}
