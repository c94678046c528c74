/* kbroker.protocol._speedups: the per-record walk of an uncompressed v2 batch, and the produce checks, compiled.
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
 *
 * The produce path's per-batch work for a client's plain batch, under the same rule (issue 17: one
 * Produce request of a small batch for each of 1,000 partitions spent a quarter of its time in the
 * Python header checks, the worker decision and the offset patching):
 *  - check_plain: log.validator.check_batches for uncompressed batches kept uncompressed, when every
 *    batch passes every check; None for anything else, and the Python checks then word the error.
 *  - needs_worker: log.validator.needs_worker (header reads only).
 *  - assign_plain: log.validator.assign_offsets' loop when no batch was recompressed; None, having
 *    changed nothing, otherwise.
 *  - check_assign_plain: both, in one call, for the leader's append (log.validator.check_and_assign_plain;
 *    the two calls and the CheckedBatch list between them were a tenth of the per-partition path).
 * tests/log/test_validator_compiled.py runs random and damaged batches through both paths.
 *
 * And two helpers for request frame buffers (kbroker.net.frames says why): frame_buffer(n), a bytearray
 * of n bytes left uninitialised, and buffer_exported(b), whether any memoryview of bytearray b is alive.
 *
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

/* The walk of `count` records from `pos` to `end` (walk_records' fast case). Returns 0 and fills the
 * out-parameters when every record is well formed, -1 otherwise. */
typedef struct {
    Py_ssize_t pos;
    int64_t min_ts, max_ts, null_keys, bad_offset;
} walk_t;

static int walk(const unsigned char *b, Py_ssize_t end, Py_ssize_t pos, Py_ssize_t count, walk_t *w) {
    int64_t min_ts = INT64_MAX, max_ts = INT64_MIN, null_keys = 0, bad_offset = -1;
    if (count <= 0 || pos < 0) return -1;
    for (Py_ssize_t index = 0; index < count; index++) {
        int64_t size, ts, off, n;
        if (read_var(b, end, &pos, &size) < 0 || size < 6 || size > end - pos) return -1;
        Py_ssize_t rec_end = pos + (Py_ssize_t)size;
        pos += 1; /* attributes: unused, any value */
        if (read_varl(b, rec_end, &pos, &ts) < 0) return -1;
        if (ts < min_ts) min_ts = ts;
        if (ts > max_ts) max_ts = ts;
        if (read_var(b, rec_end, &pos, &off) < 0) return -1;
        if (off != index && bad_offset < 0) bad_offset = index;
        if (read_var(b, rec_end, &pos, &n) < 0) return -1;  /* key length */
        if (n < 0) {
            if (n != -1) return -1;
            null_keys++;
        } else {
            if (n > rec_end - pos) return -1;
            pos += (Py_ssize_t)n;
        }
        if (read_var(b, rec_end, &pos, &n) < 0) return -1;  /* value length */
        if (n > 0) {
            if (n > rec_end - pos) return -1;
            pos += (Py_ssize_t)n;
        } else if (n < -1) return -1;
        if (read_var(b, rec_end, &pos, &n) < 0 || n < 0 || n > rec_end - pos) return -1;  /* headers */
        for (int64_t h = 0; h < n; h++) {
            int64_t hk, hv;
            if (read_var(b, rec_end, &pos, &hk) < 0 || hk < 0 || hk > rec_end - pos) return -1;
            pos += (Py_ssize_t)hk;
            if (read_var(b, rec_end, &pos, &hv) < 0) return -1;
            if (hv > 0) {
                if (hv > rec_end - pos) return -1;
                pos += (Py_ssize_t)hv;
            } else if (hv < -1) return -1;
        }
        if (pos != rec_end) return -1;
    }
    w->pos = pos;
    w->min_ts = min_ts;
    w->max_ts = max_ts;
    w->null_keys = null_keys;
    w->bad_offset = bad_offset;
    return 0;
}

static PyObject *walk_uncompressed(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, count;
    walk_t w;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &pos, &count)) return NULL;
    int ok = walk((const unsigned char *)view.buf, view.len, pos, count, &w) == 0;
    PyBuffer_Release(&view);
    if (!ok) Py_RETURN_NONE;
    return Py_BuildValue("(nnLLLL)", w.pos, count, (long long)w.min_ts, (long long)w.max_ts,
                         (long long)w.null_keys, (long long)w.bad_offset);
}

/* Big-endian reads of the v2 batch header (kbroker.protocol.record_format's offsets). */
static inline int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}
static inline int16_t be16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]); }

#define LOG_OVERHEAD 12
#define RECORD_BATCH_OVERHEAD 61
#define ATTRIBUTES_OFFSET 21
#define CODEC_MASK 0x07
#define TIMESTAMP_TYPE_MASK 0x08
#define TRANSACTIONAL_MASK 0x10
#define CONTROL_MASK 0x20

/* The CRC-32C of b[0:n] through the Python function `crc_fn` (the crc32c package's C code). */
static int call_crc(PyObject *crc_fn, unsigned char *b, Py_ssize_t n, uint32_t *out) {
    PyObject *section = PyMemoryView_FromMemory((char *)b, n, PyBUF_READ);
    if (section == NULL) return -1;
    PyObject *computed = PyObject_CallOneArg(crc_fn, section);
    Py_DECREF(section);
    if (computed == NULL) return -1;
    unsigned long value = PyLong_AsUnsignedLong(computed);
    Py_DECREF(computed);
    if (value == (unsigned long)-1 && PyErr_Occurred()) return -1;
    *out = (uint32_t)value;
    return 0;
}

/* The check's arguments after the records: max_message_bytes, lo_ts, hi_ts, now_ms, compacted,
 * log_append_time (check_plain's and check_assign_plain's args[1..6]). */
typedef struct {
    long long max_message_bytes, lo_ts, hi_ts, now_ms;
    int compacted, log_append_time;
} check_args_t;

static int parse_check_args(PyObject *const *args, check_args_t *ca) {
    long long *limits[4] = {&ca->max_message_bytes, &ca->lo_ts, &ca->hi_ts, &ca->now_ms};
    for (int i = 0; i < 4; i++) {
        *limits[i] = PyLong_AsLongLong(args[1 + i]);
        if (*limits[i] == -1 && PyErr_Occurred()) return -1;
    }
    ca->compacted = PyObject_IsTrue(args[5]);
    ca->log_append_time = PyObject_IsTrue(args[6]);
    return ca->compacted < 0 || ca->log_append_time < 0 ? -1 : 0;
}

/* One produced batch at b (size bytes) passes every check of log.validator.check_batch for a client's
 * uncompressed batch kept uncompressed: 1 with *final_max set, 0 when it does not (or when deciding
 * needs the Python path: any doubt is a 0), -1 with a Python exception set (the CRC call failed). */
static int check_one(const unsigned char *b, Py_ssize_t size, const check_args_t *ca, PyObject *crc_fn,
                     long long *final_max) {
    long long max_message_bytes = ca->max_message_bytes, lo_ts = ca->lo_ts, hi_ts = ca->hi_ts, now_ms = ca->now_ms;
    int compacted = ca->compacted, log_append_time = ca->log_append_time;
    if (size > max_message_bytes) return 0;
    int64_t base = be64(b);
    if (b[16] != 2) return 0; /* magic */
    uint32_t crc = (uint32_t)be32(b + 17);
    int16_t attrs = be16(b + ATTRIBUTES_OFFSET);
    int32_t delta = be32(b + 23);
    int64_t base_ts = be64(b + 27);
    int64_t pid = be64(b + 43);
    int32_t base_seq = be32(b + 53);
    int32_t count = be32(b + 57);
    if (attrs & (CODEC_MASK | CONTROL_MASK | TIMESTAMP_TYPE_MASK)) return 0;
    if (base != 0 || delta < 0 || count <= 0 || (int64_t)count != (int64_t)delta + 1) return 0;
    if (pid >= 0 && base_seq < 0) return 0;
    if ((attrs & TRANSACTIONAL_MASK) && pid < 0) return 0;
    walk_t w;
    if (walk(b, size, RECORD_BATCH_OVERHEAD, count, &w) < 0 || w.pos != size || w.bad_offset >= 0) return 0;
    if (compacted && w.null_keys) return 0;
    /* base_ts + delta as Python ints: a sum outside int64 is out of any range, so leave it to Python. */
    int64_t lo, hi;
    if (__builtin_add_overflow(base_ts, w.min_ts, &lo) || __builtin_add_overflow(base_ts, w.max_ts, &hi)) return 0;
    if (!log_append_time && (lo < lo_ts || hi > hi_ts)) return 0; /* lo <= hi: both ends inside */
    /* The CRC last: the dearest check, and only for a batch that passed the others. */
    uint32_t computed;
    if (call_crc(crc_fn, (unsigned char *)b + ATTRIBUTES_OFFSET, size - ATTRIBUTES_OFFSET, &computed) < 0) return -1;
    if (computed != crc) return 0;
    *final_max = log_append_time ? now_ms : hi;
    return 1;
}

/* check_plain(records, max_message_bytes, lo_ts, hi_ts, now_ms, compacted, log_append_time, crc32c) */
static PyObject *check_plain(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "check_plain takes 8 arguments");
        return NULL;
    }
    check_args_t ca;
    if (parse_check_args(args, &ca) < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len, pos = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL) goto fail;
    while (pos + LOG_OVERHEAD <= n) {
        Py_ssize_t size = (Py_ssize_t)be32(b + pos + 8) + LOG_OVERHEAD;
        if (size < RECORD_BATCH_OVERHEAD) goto none; /* CorruptRecordError: the Python path words it */
        if (size > n - pos) break;                   /* a trailing partial batch is dropped, as Kafka does */
        long long final_max;
        int ok = check_one(b + pos, size, &ca, args[7], &final_max);
        if (ok < 0) goto fail;
        if (ok == 0) goto none;
        PyObject *item = Py_BuildValue("(nnL)", pos, size, final_max);
        if (item == NULL) goto fail;
        int appended = PyList_Append(out, item);
        Py_DECREF(item);
        if (appended < 0) goto fail;
        pos += size;
    }
    PyBuffer_Release(&view);
    return out;
none:
    Py_DECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* needs_worker(records, target, max_bytes, max_records): log.validator.needs_worker, header reads only. */
static PyObject *needs_worker(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "needs_worker takes 4 arguments");
        return NULL;
    }
    long long target = PyLong_AsLongLong(args[1]), max_bytes = PyLong_AsLongLong(args[2]),
              max_records = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len, pos = 0;
    int heavy = n > max_bytes;
    while (!heavy && pos + RECORD_BATCH_OVERHEAD <= n) {
        int32_t length = be32(b + pos + 8);
        int codec = be16(b + pos + ATTRIBUTES_OFFSET) & CODEC_MASK;
        int32_t count = be32(b + pos + 57);
        if (codec || count > max_records || (target >= 0 && target != codec)) heavy = 1;
        else if (length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD) break;
        else pos += (Py_ssize_t)length + LOG_OVERHEAD;
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(heavy);
}

static inline void put64(unsigned char *p, int64_t v) {
    for (int i = 7; i >= 0; i--) { p[i] = (unsigned char)(v & 0xFF); v = (int64_t)((uint64_t)v >> 8); }
}
static inline void put32(unsigned char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)(u >> 24); p[1] = (unsigned char)(u >> 16); p[2] = (unsigned char)(u >> 8);
    p[3] = (unsigned char)u;
}

/* What assign_offsets sums over the batches it patches. */
typedef struct {
    int64_t max_seen, offset_of_max, num_messages, total;
} sums_t;

/* Patch one checked batch at b in place (maxTimestamp and timestamp type with a new CRC when they
 * differ from what the check decided, then baseOffset and partitionLeaderEpoch), advance *next_offset
 * and the sums, and return its header as a `header_type` tuple (NULL with an exception set). With
 * `info` set, also the (last_offset, max_timestamp, size) tuple the segment's append takes. */
static PyObject *patch_one(unsigned char *b, Py_ssize_t size, long long want_max, int want_lat, long long *next_offset,
                           long leader_epoch, PyTypeObject *header_type, PyObject *crc_fn, sums_t *sums,
                           PyObject **info) {
    int16_t attrs = be16(b + ATTRIBUTES_OFFSET);
    if (be64(b + 35) != want_max || ((attrs & TIMESTAMP_TYPE_MASK) != 0) != want_lat) {
        /* Kafka's setMaxTimestamp: the header carries the records' real max (or LogAppendTime). */
        attrs = want_lat ? (int16_t)(attrs | TIMESTAMP_TYPE_MASK) : (int16_t)(attrs & ~TIMESTAMP_TYPE_MASK);
        b[ATTRIBUTES_OFFSET] = (unsigned char)((uint16_t)attrs >> 8);
        b[ATTRIBUTES_OFFSET + 1] = (unsigned char)((uint16_t)attrs & 0xFF);
        put64(b + 35, want_max);
        uint32_t crc;
        if (call_crc(crc_fn, b + ATTRIBUTES_OFFSET, size - ATTRIBUTES_OFFSET, &crc) < 0) return NULL;
        put32(b + 17, (int32_t)crc);
    }
    long long base = *next_offset;
    put64(b, base);
    put32(b + 12, (int32_t)leader_epoch);
    int32_t delta = be32(b + 23), count = be32(b + 57);
    int64_t max_ts = be64(b + 35);
    PyObject *h = header_type->tp_alloc(header_type, 13);
    if (h == NULL) return NULL;
    PyObject *fields[13] = {
        PyLong_FromLongLong(base), PyLong_FromLong(be32(b + 8)), PyLong_FromLong(be32(b + 12)),
        PyLong_FromLong(b[16]), PyLong_FromUnsignedLong((uint32_t)be32(b + 17)), PyLong_FromLong(attrs),
        PyLong_FromLong(delta), PyLong_FromLongLong(be64(b + 27)), PyLong_FromLongLong(max_ts),
        PyLong_FromLongLong(be64(b + 43)), PyLong_FromLong(be16(b + 51)), PyLong_FromLong(be32(b + 53)),
        PyLong_FromLong(count)};
    int bad = 0;
    for (int f = 0; f < 13; f++) {
        if (fields[f] == NULL) bad = 1;
        PyTuple_SET_ITEM(h, f, fields[f]);
    }
    if (bad) {
        Py_DECREF(h);
        return NULL;
    }
    if (info != NULL) {
        *info = Py_BuildValue("(LLn)", base + (long long)delta, (long long)max_ts, size);
        if (*info == NULL) {
            Py_DECREF(h);
            return NULL;
        }
    }
    if (max_ts > sums->max_seen) {
        sums->max_seen = max_ts;
        sums->offset_of_max = base + delta;
    }
    sums->num_messages += count;
    sums->total += size;
    *next_offset = base + (long long)delta + 1;
    return h;
}

/* assign_plain(records, checked, next_offset, leader_epoch, header_type, crc32c): the loop of
 * log.validator.assign_offsets when no batch was rebuilt (recompressed). Returns None, having changed
 * nothing, when a batch was rebuilt or the buffer is not writable (the Python loop then runs); else
 * patches every batch in place (maxTimestamp and timestamp type with a new CRC when `checked` says
 * so, then baseOffset and partitionLeaderEpoch) and returns (headers, next_offset, max_timestamp,
 * offset_of_max_timestamp, num_messages, valid_bytes), the headers as `header_type` tuples. */
static PyObject *assign_plain(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "assign_plain takes 6 arguments");
        return NULL;
    }
    PyObject *checked = args[1];
    long long next_offset = PyLong_AsLongLong(args[2]);
    if (next_offset == -1 && PyErr_Occurred()) return NULL;
    long leader_epoch = PyLong_AsLong(args[3]);
    if (leader_epoch == -1 && PyErr_Occurred()) return NULL;
    PyTypeObject *header_type = (PyTypeObject *)args[4];
    if (!PyList_Check(checked) || !PyType_Check(args[4]) || !PyType_IsSubtype(header_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "assign_plain: checked must be a list and header_type a tuple type");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    unsigned char *buf = (unsigned char *)view.buf;
    Py_ssize_t n = PyList_GET_SIZE(checked);
    /* First pass: decide, touching nothing. */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *c = PyList_GET_ITEM(checked, i);
        if (!PyTuple_Check(c) || PyTuple_GET_SIZE(c) != 5 || PyTuple_GET_ITEM(c, 2) != Py_None) goto none;
        Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(c, 0)), size = PyLong_AsSsize_t(PyTuple_GET_ITEM(c, 1));
        if (PyErr_Occurred()) { PyErr_Clear(); goto none; }
        if (pos < 0 || size < RECORD_BATCH_OVERHEAD || size > view.len - pos) goto none;
        if (be32(buf + pos + 8) != (int32_t)(size - LOG_OVERHEAD)) goto none;
    }
    PyObject *headers = PyList_New(n);
    if (headers == NULL) goto fail;
    sums_t sums = {-1, -1, 0, 0};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *c = PyList_GET_ITEM(checked, i);
        Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(c, 0)), size = PyLong_AsSsize_t(PyTuple_GET_ITEM(c, 1));
        long long want_max = PyLong_AsLongLong(PyTuple_GET_ITEM(c, 3));
        if (want_max == -1 && PyErr_Occurred()) goto fail_headers;
        int want_lat = PyObject_IsTrue(PyTuple_GET_ITEM(c, 4));
        if (want_lat < 0) goto fail_headers;
        PyObject *h = patch_one(buf + pos, size, want_max, want_lat, &next_offset, leader_epoch, header_type, args[5],
                                &sums, NULL);
        if (h == NULL) goto fail_headers;
        PyList_SET_ITEM(headers, i, h);
    }
    PyBuffer_Release(&view);
    PyObject *out = Py_BuildValue("(NLLLLL)", headers, next_offset, (long long)sums.max_seen,
                                  (long long)sums.offset_of_max, (long long)sums.num_messages, (long long)sums.total);
    return out;
fail_headers:
    Py_DECREF(headers);
fail:
    PyBuffer_Release(&view);
    return NULL;
none:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* The most batches check_assign_plain decides itself (a Produce v3+ request carries one per partition);
 * more go to the two calls above. */
#define FUSED_MAX_BATCHES 64

/* check_assign_plain(records, max_message_bytes, lo_ts, hi_ts, now_ms, compacted, log_append_time,
 * next_offset, leader_epoch, header_type, crc32c): check_plain and assign_plain in one call, for the
 * leader's append of a client's batches (one call per partition of a Produce request instead of two,
 * and no CheckedBatch list in between). None, having changed nothing, when check_plain would return
 * None, when the buffer is not writable, or past FUSED_MAX_BATCHES batches; else patches every batch
 * as assign_plain does and returns (headers, infos, next_offset, max_timestamp,
 * offset_of_max_timestamp, num_messages, valid_bytes), infos being the segment's
 * [(last_offset, max_timestamp, size)]. */
static PyObject *check_assign_plain(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "check_assign_plain takes 11 arguments");
        return NULL;
    }
    check_args_t ca;
    if (parse_check_args(args, &ca) < 0) return NULL;
    long long next_offset = PyLong_AsLongLong(args[7]);
    if (next_offset == -1 && PyErr_Occurred()) return NULL;
    long leader_epoch = PyLong_AsLong(args[8]);
    if (leader_epoch == -1 && PyErr_Occurred()) return NULL;
    PyTypeObject *header_type = (PyTypeObject *)args[9];
    if (!PyType_Check(args[9]) || !PyType_IsSubtype(header_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "check_assign_plain: header_type must be a tuple type");
        return NULL;
    }
    PyObject *crc_fn = args[10];
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    unsigned char *b = (unsigned char *)view.buf;
    Py_ssize_t n = view.len, pos = 0;
    Py_ssize_t spans[FUSED_MAX_BATCHES][2];
    long long final_max[FUSED_MAX_BATCHES];
    int batches = 0;
    /* First pass: check_plain's decision, touching nothing. */
    while (pos + LOG_OVERHEAD <= n) {
        Py_ssize_t size = (Py_ssize_t)be32(b + pos + 8) + LOG_OVERHEAD;
        if (size < RECORD_BATCH_OVERHEAD || batches == FUSED_MAX_BATCHES) goto none;
        if (size > n - pos) break; /* a trailing partial batch is dropped, as Kafka does */
        int ok = check_one(b + pos, size, &ca, crc_fn, &final_max[batches]);
        if (ok < 0) goto fail;
        if (ok == 0) goto none;
        spans[batches][0] = pos;
        spans[batches][1] = size;
        batches++;
        pos += size;
    }
    /* Second pass: assign_plain's patching. */
    PyObject *headers = PyList_New(batches), *infos = PyList_New(batches);
    if (headers == NULL || infos == NULL) goto fail_lists;
    sums_t sums = {-1, -1, 0, 0};
    for (int i = 0; i < batches; i++) {
        PyObject *info = NULL;
        PyObject *h = patch_one(b + spans[i][0], spans[i][1], final_max[i], ca.log_append_time, &next_offset,
                                leader_epoch, header_type, crc_fn, &sums, &info);
        if (h == NULL) goto fail_lists;
        PyList_SET_ITEM(headers, i, h);
        PyList_SET_ITEM(infos, i, info);
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NNLLLLL)", headers, infos, next_offset, (long long)sums.max_seen,
                         (long long)sums.offset_of_max, (long long)sums.num_messages, (long long)sums.total);
fail_lists:
    Py_XDECREF(headers);
    Py_XDECREF(infos);
fail:
    PyBuffer_Release(&view);
    return NULL;
none:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* frame_buffer(n): PyByteArray_FromStringAndSize(NULL, n) allocates without writing the bytes, where
 * bytearray(n) zero-fills them. Only ever read after the socket has filled every byte. */
static PyObject *frame_buffer(PyObject *Py_UNUSED(self), PyObject *arg) {
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "a frame buffer's size must not be negative");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, n);
}

/* buffer_exported(b): whether a buffer of bytearray b is exported (a memoryview of it, or of a slice of
 * one, is alive): bytearray's own ob_exports count, which is what makes it refuse to resize. */
static PyObject *buffer_exported(PyObject *Py_UNUSED(self), PyObject *arg) {
    if (!PyByteArray_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "buffer_exported() takes a bytearray");
        return NULL;
    }
    return PyBool_FromLong(((PyByteArrayObject *)arg)->ob_exports > 0);
}

static PyMethodDef methods[] = {
    {"buffer_exported", buffer_exported, METH_O,
     "buffer_exported(b: bytearray) -> bool: whether a memoryview of b (or of a slice of one) is alive."},
    {"frame_buffer", frame_buffer, METH_O,
     "frame_buffer(n) -> bytearray: n bytes, not initialised (the socket fills them before any is read)."},
    {"walk_uncompressed", walk_uncompressed, METH_VARARGS,
     "walk_uncompressed(buf, pos, count) -> (pos, count, min_ts_delta, max_ts_delta, null_keys, "
     "bad_offset_index) | None: walk_records(buf, pos, 0, count) for well-formed records, else None."},
    {"check_plain", (PyCFunction)(void (*)(void))check_plain, METH_FASTCALL,
     "check_plain(records, max_message_bytes, lo_ts, hi_ts, now_ms, compacted, log_append_time, crc32c) -> "
     "[(pos, size, final_max_timestamp)] | None: log.validator.check_batches for clients' uncompressed batches "
     "that pass every check, else None."},
    {"needs_worker", (PyCFunction)(void (*)(void))needs_worker, METH_FASTCALL,
     "needs_worker(records, target_codec, max_bytes, max_records) -> bool: log.validator.needs_worker."},
    {"assign_plain", (PyCFunction)(void (*)(void))assign_plain, METH_FASTCALL,
     "assign_plain(records, checked, next_offset, leader_epoch, header_type, crc32c) -> (headers, next_offset, "
     "max_timestamp, offset_of_max_timestamp, num_messages, valid_bytes) | None: log.validator.assign_offsets' "
     "loop when no batch was rebuilt, else None (nothing changed)."},
    {"check_assign_plain", (PyCFunction)(void (*)(void))check_assign_plain, METH_FASTCALL,
     "check_assign_plain(records, max_message_bytes, lo_ts, hi_ts, now_ms, compacted, log_append_time, next_offset, "
     "leader_epoch, header_type, crc32c) -> (headers, infos, next_offset, max_timestamp, offset_of_max_timestamp, "
     "num_messages, valid_bytes) | None: check_plain then assign_plain in one call, else None (nothing changed)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
