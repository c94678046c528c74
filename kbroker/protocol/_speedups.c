/* kbroker.protocol._speedups: the per-record walk of an uncompressed v2 batch, compiled.
 *
 * Why: on the produce path every record of every batch is walked (Kafka's LogValidator reads every
 * record; issue 19), and in CPython that walk was a third of the broker's CPU under 100-byte records
 * (issue 17: py-spy --native on the P2 load, ~1.1 us per record). This is the same walk in C.
 *
 * Contract (kept small on purpose): walk_uncompressed(buf, pos, count) returns the tuple
 * (pos, count, min_ts_delta, max_ts_delta, null_keys, bad_offset_index) of
 * kbroker.protocol.record_format.walk_records(buf, pos, 0, count) when every one of the `count`
 * records is well formed, and None for anything else: a malformed record, a varint longer than this
 * walk decodes (5 bytes for varints, 9 for varlongs), a read past the buffer. On None the caller runs
 * the Python walk, which raises Kafka's exact error (or, for a long but valid varint, succeeds), so
 * this module only ever decides the fast, successful case and never words an error itself.
 * The module is optional: kbroker works without it (setup.py builds it when a C compiler exists).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Unsigned LEB128 of at most max_bytes bytes; 0 on success, -1 when it runs out or is too long. */
static inline int read_uvar(const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos, int max_bytes,
                            uint64_t *out) {
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= end) return -1;
        unsigned char c = b[p++];
        raw |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80) {
            *pos = p;
            *out = raw;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* Zig-zag varint (32-bit: at most 5 bytes, value kept in 32 bits like Java's). */
static inline int read_var(const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos, int64_t *out) {
    uint64_t raw;
    if (read_uvar(b, end, pos, 5, &raw) < 0 || raw > 0xFFFFFFFFULL) return -1;
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

/* Zig-zag varlong, at most 9 bytes (63 bits of raw value: no overflow in int64). */
static inline int read_varl(const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos, int64_t *out) {
    uint64_t raw;
    if (read_uvar(b, end, pos, 9, &raw) < 0) return -1;
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

static PyObject *walk_uncompressed(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, count;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &pos, &count)) return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len;
    int64_t min_ts = INT64_MAX, max_ts = INT64_MIN, null_keys = 0, bad_offset = -1;
    int ok = count > 0 && pos >= 0;
    for (Py_ssize_t index = 0; ok && index < count; index++) {
        int64_t size, ts, off, n;
        if (read_var(b, end, &pos, &size) < 0 || size < 6 || size > end - pos) { ok = 0; break; }
        Py_ssize_t rec_end = pos + (Py_ssize_t)size;
        pos += 1; /* attributes: unused, any value */
        if (read_varl(b, rec_end, &pos, &ts) < 0) { ok = 0; break; }
        if (ts < min_ts) min_ts = ts;
        if (ts > max_ts) max_ts = ts;
        if (read_var(b, rec_end, &pos, &off) < 0) { ok = 0; break; }
        if (off != index && bad_offset < 0) bad_offset = index;
        if (read_var(b, rec_end, &pos, &n) < 0) { ok = 0; break; }  /* key length */
        if (n < 0) {
            if (n != -1) { ok = 0; break; }
            null_keys++;
        } else {
            if (n > rec_end - pos) { ok = 0; break; }
            pos += (Py_ssize_t)n;
        }
        if (read_var(b, rec_end, &pos, &n) < 0) { ok = 0; break; }  /* value length */
        if (n > 0) {
            if (n > rec_end - pos) { ok = 0; break; }
            pos += (Py_ssize_t)n;
        } else if (n < -1) { ok = 0; break; }
        if (read_var(b, rec_end, &pos, &n) < 0 || n < 0 || n > rec_end - pos) { ok = 0; break; }  /* headers */
        for (int64_t h = 0; h < n; h++) {
            int64_t hk, hv;
            if (read_var(b, rec_end, &pos, &hk) < 0 || hk < 0 || hk > rec_end - pos) { ok = 0; break; }
            pos += (Py_ssize_t)hk;
            if (read_var(b, rec_end, &pos, &hv) < 0) { ok = 0; break; }
            if (hv > 0) {
                if (hv > rec_end - pos) { ok = 0; break; }
                pos += (Py_ssize_t)hv;
            } else if (hv < -1) { ok = 0; break; }
        }
        if (!ok || pos != rec_end) { ok = 0; break; }
    }
    PyBuffer_Release(&view);
    if (!ok) Py_RETURN_NONE;
    return Py_BuildValue("(nnLLLL)", pos, count, (long long)min_ts, (long long)max_ts, (long long)null_keys,
                         (long long)bad_offset);
}

static PyMethodDef methods[] = {
    {"walk_uncompressed", walk_uncompressed, METH_VARARGS,
     "walk_uncompressed(buf, pos, count) -> (pos, count, min_ts_delta, max_ts_delta, null_keys, "
     "bad_offset_index) | None: walk_records(buf, pos, 0, count) for well-formed records, else None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
