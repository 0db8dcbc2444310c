/* CRC-32C of journal entries (layout 4, persistence/protocols/checksums.py), in C.
 *
 * CRC-32C (Castagnoli, reflected polynomial 0x82F63B78: iSCSI's, ext4's, Kafka's record
 * batches', RocksDB's) is computed with the SSE 4.2 instruction where the CPU has it (three
 * values in flight at once when three rows are checked together: the instruction's latency
 * is three times its throughput), else eight bytes at a time from tables. checksums.py holds
 * the same functions in Python, used when this module was not built; tests compare them.
 *
 * open_rows strips the four bytes of each checked value without copying it where nothing
 * else can see the value: a bytes object held by nothing but its row, a tuple held by
 * nothing but the list (both fresh from the engine), is shrunk in place, as CPython shrinks
 * a string it alone holds. Any other value is copied. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define AOS_CRC_HW 1
#endif

#define SEAL 4

static uint32_t table[8][256];
static int hardware;

static void make_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) {
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        }
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        for (int t = 1; t < 8; t++) {
            table[t][n] = (table[t - 1][n] >> 8) ^ table[0][table[t - 1][n] & 0xff];
        }
    }
}

/* The register after `n` bytes from `state` (no inversion: a CRC is ~update(~0, ...)). */
static uint32_t update_sw(uint32_t state, const uint8_t *p, size_t n) {
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= state; /* little-endian hosts; others take the byte loop below */
        state = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
                table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
                table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) {
        state = table[0][(state ^ *p++) & 0xff] ^ (state >> 8);
    }
    return state;
}

#ifdef AOS_CRC_HW
__attribute__((target("sse4.2"))) static uint32_t update_hw(uint32_t state, const uint8_t *p,
                                                             size_t n) {
    uint64_t c = state;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) {
        c32 = _mm_crc32_u8(c32, *p++);
    }
    return c32;
}

/* Three registers over `n` bytes of three buffers each (`n` a multiple of 8), in step. */
__attribute__((target("sse4.2"))) static void update_hw3(uint32_t state[3], const uint8_t *p[3],
                                                         size_t n) {
    uint64_t a = state[0], b = state[1], c = state[2];
    const uint8_t *pa = p[0], *pb = p[1], *pc = p[2];
    for (size_t at = 0; at < n; at += 8) {
        uint64_t wa, wb, wc;
        memcpy(&wa, pa + at, 8);
        memcpy(&wb, pb + at, 8);
        memcpy(&wc, pc + at, 8);
        a = _mm_crc32_u64(a, wa);
        b = _mm_crc32_u64(b, wb);
        c = _mm_crc32_u64(c, wc);
    }
    state[0] = (uint32_t)a;
    state[1] = (uint32_t)b;
    state[2] = (uint32_t)c;
    p[0] += n;
    p[1] += n;
    p[2] += n;
}
#endif

static int little_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

static uint32_t update(uint32_t state, const uint8_t *p, size_t n) {
#ifdef AOS_CRC_HW
    if (hardware) {
        return update_hw(state, p, n);
    }
#endif
    if (!little_endian()) {
        while (n--) {
            state = table[0][(state ^ *p++) & 0xff] ^ (state >> 8);
        }
        return state;
    }
    return update_sw(state, p, n);
}

static uint32_t stored_sum(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Whether the row is a fresh (key, value) pair of bytes, its value sealed (at least SEAL
 * bytes); its key and value then in `key`, `value`. */
static int pair_of(PyObject *row, PyObject **key, PyObject **value) {
    if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != 2) {
        return 0;
    }
    *key = PyTuple_GET_ITEM(row, 0);
    *value = PyTuple_GET_ITEM(row, 1);
    return PyBytes_CheckExact(*key) && PyBytes_CheckExact(*value) &&
           PyBytes_GET_SIZE(*value) >= SEAL;
}

/* Whether the value of each of `count` rows from `rows` ends with CRC-32C of its key and
 * the rest of it. */
static int sound(PyObject **keys, PyObject **values, Py_ssize_t count) {
    Py_ssize_t i = 0;
#ifdef AOS_CRC_HW
    for (; hardware && i + 3 <= count; i += 3) {
        uint32_t state[3];
        const uint8_t *at[3];
        size_t left[3], common = SIZE_MAX;
        for (int j = 0; j < 3; j++) {
            PyObject *key = keys[i + j], *value = values[i + j];
            state[j] = update_hw(0xFFFFFFFFu, (const uint8_t *)PyBytes_AS_STRING(key),
                                 (size_t)PyBytes_GET_SIZE(key));
            at[j] = (const uint8_t *)PyBytes_AS_STRING(value);
            left[j] = (size_t)PyBytes_GET_SIZE(value) - SEAL;
            common = left[j] < common ? left[j] : common;
        }
        common -= common % 8;
        update_hw3(state, at, common);
        for (int j = 0; j < 3; j++) {
            uint32_t sum = ~update_hw(state[j], at[j], left[j] - common);
            if (sum != stored_sum(at[j] + left[j] - common)) {
                return 0;
            }
        }
    }
#endif
    for (; i < count; i++) {
        const uint8_t *value = (const uint8_t *)PyBytes_AS_STRING(values[i]);
        size_t length = (size_t)PyBytes_GET_SIZE(values[i]) - SEAL;
        uint32_t state = update(0xFFFFFFFFu, (const uint8_t *)PyBytes_AS_STRING(keys[i]),
                                (size_t)PyBytes_GET_SIZE(keys[i]));
        if (~update(state, value, length) != stored_sum(value + length)) {
            return 0;
        }
    }
    return 1;
}

static PyObject *crc_of(PyObject *args, const char *format, int portable) {
    Py_buffer data;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, format, &data, &value)) {
        return NULL;
    }
    uint32_t state = ~(uint32_t)value;
    state = portable && little_endian() ? update_sw(state, data.buf, (size_t)data.len)
                                        : update(state, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(~state);
}

static PyObject *crc32c(PyObject *module, PyObject *args) {
    (void)module;
    return crc_of(args, "y*|I:crc32c", 0);
}

static PyObject *crc32c_tables(PyObject *module, PyObject *args) {
    (void)module;
    return crc_of(args, "y*|I:crc32c_tables", 1);
}

static PyObject *seal(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer key, payload;
    if (!PyArg_ParseTuple(args, "y*y*:seal", &key, &payload)) {
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, payload.len + SEAL);
    if (out != NULL) {
        uint8_t *into = (uint8_t *)PyBytes_AS_STRING(out);
        uint32_t sum = ~update(update(0xFFFFFFFFu, key.buf, (size_t)key.len), payload.buf,
                               (size_t)payload.len);
        memcpy(into, payload.buf, (size_t)payload.len);
        for (int k = 0; k < SEAL; k++) {
            into[payload.len + k] = (uint8_t)(sum >> (8 * k));
        }
    }
    PyBuffer_Release(&key);
    PyBuffer_Release(&payload);
    return out;
}

static PyObject *open_rows(PyObject *module, PyObject *rows) {
    (void)module;
    if (!PyList_CheckExact(rows)) {
        PyErr_SetString(PyExc_TypeError, "open_rows: rows must be a list");
        return NULL;
    }
    /* Everything that may run Python code (a collection run by allocating a list may call
     * finalizers, which may change the rows) comes before the first borrowed reference is
     * taken: from there to the end nothing allocates a tracked object. */
    Py_ssize_t count = PyList_GET_SIZE(rows);
    PyObject *out = PyList_New(count);
    if (out == NULL) {
        return NULL;
    }
    PyObject **keys = PyMem_New(PyObject *, count + 1);
    PyObject **values = PyMem_New(PyObject *, count + 1);
    if (keys == NULL || values == NULL) {
        Py_CLEAR(out);
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!pair_of(PyList_GET_ITEM(rows, i), &keys[i], &values[i])) {
            Py_SETREF(out, Py_NewRef(Py_None));
            goto done;
        }
    }
    if (!sound(keys, values, count)) {
        Py_SETREF(out, Py_NewRef(Py_None));
        goto done;
    }
    /* A failure past here (no memory) leaves the rows before it holding None: the list is
     * the caller's, and a read that fails is discarded. */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i), *value = values[i], *payload;
        Py_ssize_t length = PyBytes_GET_SIZE(value) - SEAL;
        if (Py_REFCNT(row) == 1 && Py_REFCNT(value) == 1 && length > 1) {
            /* the list's own row holds the only reference: take the value out of it
             * (None in its place) and shrink it; _PyBytes_Resize clears its cached hash */
            PyTuple_SET_ITEM(row, 1, Py_NewRef(Py_None));
            payload = value;
            if (_PyBytes_Resize(&payload, length) < 0) {
                Py_CLEAR(out);
                goto done;
            }
        } else {
            payload = PyBytes_FromStringAndSize(PyBytes_AS_STRING(value), length);
            if (payload == NULL) {
                Py_CLEAR(out);
                goto done;
            }
        }
        PyList_SET_ITEM(out, i, payload);
    }
done:
    PyMem_Free(keys);
    PyMem_Free(values);
    return out;
}

static PyMethodDef methods[] = {
    {"crc32c", crc32c, METH_VARARGS,
     "crc32c(data, value=0, /): CRC-32C of data, continuing from value (as zlib.crc32)."},
    {"crc32c_tables", crc32c_tables, METH_VARARGS,
     "crc32c_tables(data, value=0, /): crc32c from the tables, as on a CPU without the "
     "instruction (tests compare the two)."},
    {"seal", seal, METH_VARARGS,
     "seal(key, payload, /): payload followed by CRC-32C of key and payload, little-endian."},
    {"open_rows", open_rows, METH_O,
     "open_rows(rows, /): the payloads of a list of (key, sealed value) pairs, values "
     "stripped in place where nothing else holds them; None unless every pair is bytes "
     "and checks."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_checksums", "CRC-32C of journal entries, in C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__checksums(void) {
    make_tables();
#ifdef AOS_CRC_HW
    __builtin_cpu_init();
    hardware = __builtin_cpu_supports("sse4.2") != 0;
#endif
    PyObject *made = PyModule_Create(&module);
    if (made != NULL && PyModule_AddIntConstant(made, "HARDWARE", hardware) < 0) {
        Py_DECREF(made);
        return NULL;
    }
    return made;
}
