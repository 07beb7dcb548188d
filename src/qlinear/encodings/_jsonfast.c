/* JSON helpers for large encodings files (plain C, no NumPy headers, loaded through ctypes).
 *
 * Writing (qlinear/encodings/_json.py): Python formats the numbers (orjson: shortest round-trip digits, as repr)
 * and lays out everything else with a NUL byte where each array goes; ql_json_emit streams the document to the
 * file, re-laying each array from orjson's compact text on the way: no 100 MB intermediate string is built.
 *
 * Reading (qlinear/encodings/_scan.py): ql_json_extract lifts every rectangular array of JSON numbers out of the
 * text into one float64 buffer (correctly rounded by strtod in the C locale) and leaves a small skeleton document
 * with a placeholder string "\u0000<k>" for array k, so the JSON parser builds thousands of objects, not millions.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <locale.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

/* Output either to a file descriptor (through a staging buffer) or into dst (cap bytes), or only counted. */
typedef struct {
    int fd;
    char *dst;
    int64_t cap, out;
    char *stage;
    int64_t staged;
} ql_sink;

#define QL_STAGE (1 << 20)

static int ql_flush(ql_sink *k) {
    int64_t done = 0;
    while (done < k->staged) {
        ssize_t w = write(k->fd, k->stage + done, (size_t)(k->staged - done));
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        done += w;
    }
    k->staged = 0;
    return 0;
}

static int ql_put(ql_sink *k, const char *p, int64_t len) {
    if (k->fd >= 0) {
        if (k->staged + len > QL_STAGE) {
            if (ql_flush(k)) return -1;
            if (len > QL_STAGE) {
                k->staged = 0;
                int64_t done = 0;
                while (done < len) {
                    ssize_t w = write(k->fd, p + done, (size_t)(len - done));
                    if (w < 0) {
                        if (errno == EINTR) continue;
                        return -1;
                    }
                    done += w;
                }
                k->out += len;
                return 0;
            }
        }
        memcpy(k->stage + k->staged, p, (size_t)len);
        k->staged += len;
    } else if (k->dst) {
        if (k->out + len > k->cap) return -1;
        memcpy(k->dst + k->out, p, (size_t)len);
    }
    k->out += len;
    return 0;
}

/* Array k of a group in the document layout. Compact groups (depth >= 1): src[begin, end) is orjson's compact text
 * of the array without its outer brackets: numbers separated by runs "]"*j "," "["*j, j < depth; each run becomes
 * seps[j], with head before and tail after. Verbatim groups (depth 0): src[begin, end) is copied as it is. */
static int ql_array_out(ql_sink *k, const char *src, int64_t begin, int64_t end, int32_t depth,
                        const char *const *seps, const int64_t *seplens, const char *head, int64_t head_len,
                        const char *tail, int64_t tail_len) {
    if (depth == 0) return ql_put(k, src + begin, end - begin);
    if (ql_put(k, head, head_len)) return -1;
    int64_t i = begin;
    while (i < end) {
        const char c = src[i];
        if (c != ']' && c != ',') {
            int64_t e = i;
            while (e < end && src[e] != ']' && src[e] != ',') e++;
            if (ql_put(k, src + i, e - i)) return -1;
            i = e;
            continue;
        }
        int32_t j = 0;
        while (i < end && src[i] == ']') { i++; j++; }
        if (i >= end || src[i] != ',' || j >= depth) return -2;
        i++;
        for (int32_t o = 0; o < j; o++, i++)
            if (i >= end || src[i] != '[') return -2;
        if (ql_put(k, seps[j], seplens[j])) return -1;
    }
    return ql_put(k, tail, tail_len);
}

/* Where each array of a compact stack text (outer brackets of the stack removed) begins and ends: the runs
 * "]"*depth "," "["*depth separate arrays. begin_end gets 2 * m offsets. Returns m, or -1. */
int64_t ql_json_index(const char *src, int64_t n, int32_t depth, int64_t *begin_end, int64_t m) {
    int64_t k = 0, i = 0;
    if (n < 2 * depth) return -1;
    for (int32_t o = 0; o < depth; o++)
        if (src[o] != '[' || src[n - 1 - o] != ']') return -1;
    begin_end[0] = depth;
    i = depth;
    const int64_t stop = n - depth;
    while (i < stop) {
        if (src[i] != ']') { i++; continue; }
        int64_t r = i;
        int32_t j = 0;
        while (r < stop && src[r] == ']') { r++; j++; }
        if (j == depth && r < stop && src[r] == ',') {
            if (k + 1 >= m) return -1;
            begin_end[2 * k + 1] = i;
            k++;
            begin_end[2 * k] = r + 1 + depth;
        }
        i = r;
    }
    begin_end[2 * k + 1] = stop;
    return k + 1;
}

/* The document: lit (its literal text with a NUL byte at each of the n_slots array slots, at cuts[]) with slot s
 * replaced by array slot_index[s] of group slot_group[s]. Group g: src[g], begin_end[g] (2 offsets per array),
 * depth[g], seps[g * 8 + j] / seplens[g * 8 + j], head[g] / head_len[g], tail[g] / tail_len[g] (see ql_array_out).
 * Writes to fd when fd >= 0, else into dst (cap bytes) when dst is given, else only counts. Returns the length,
 * -1 on a write error (errno set) or overflow, -2 on malformed input. */
int64_t ql_json_emit(const char *lit, int64_t lit_len, const int64_t *cuts, int64_t n_slots, const int64_t *slot_group,
                     const int64_t *slot_index, const char *const *src, const int64_t *const *begin_end,
                     const int32_t *depth, const char *const *seps, const int64_t *seplens, const char *const *head,
                     const int64_t *head_len, const char *const *tail, const int64_t *tail_len, int fd, char *dst,
                     int64_t cap) {
    ql_sink k = {fd, dst, cap, 0, NULL, 0};
    if (fd >= 0) {
        k.stage = (char *)malloc(QL_STAGE);
        if (!k.stage) return -1;
    }
    int64_t prev = 0, rc = 0;
    for (int64_t s = 0; s < n_slots && rc == 0; s++) {
        const int64_t c = cuts[s];
        if (c < prev || c >= lit_len) { rc = -2; break; }
        if (ql_put(&k, lit + prev, c - prev)) { rc = -1; break; }
        const int64_t g = slot_group[s], a = slot_index[s];
        const int64_t *be = begin_end[g];
        rc = ql_array_out(&k, src[g], be[2 * a], be[2 * a + 1], depth[g], seps + g * 8, seplens + g * 8, head[g],
                          head_len[g], tail[g], tail_len[g]);
        prev = c + 1;
    }
    if (rc == 0 && ql_put(&k, lit + prev, lit_len - prev)) rc = -1;
    if (rc == 0 && fd >= 0 && ql_flush(&k)) rc = -1;
    free(k.stage);
    return rc ? rc : k.out;
}

/* ---- reading ------------------------------------------------------------------------------------------------ */

#define QL_MAX_DIMS 8

static inline int ql_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static inline int ql_digit(char c) { return c >= '0' && c <= '9'; }

/* One JSON number at s[*pi] (RFC 8259 grammar), converted with strtod_l; integers of more than 18 digits are
 * refused (Python keeps those exact; a caller would not read them the same way). */
static int ql_number(const char *s, int64_t n, int64_t *pi, double *out, locale_t loc) {
    int64_t i = *pi;
    const int64_t start = i;
    if (i < n && s[i] == '-') i++;
    if (i >= n) return 0;
    const int64_t int_start = i;
    if (s[i] == '0') {
        i++;
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < n && ql_digit(s[i])) i++;
    } else {
        return 0;
    }
    int is_int = 1;
    if (i < n && s[i] == '.') {
        is_int = 0;
        i++;
        if (i >= n || !ql_digit(s[i])) return 0;
        while (i < n && ql_digit(s[i])) i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        is_int = 0;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || !ql_digit(s[i])) return 0;
        while (i < n && ql_digit(s[i])) i++;
    }
    if (is_int && i - int_start > 18) return 0;
    if (i >= n || !(ql_ws(s[i]) || s[i] == ',' || s[i] == ']')) return 0;
    char *end = NULL;
    *out = strtod_l(s + start, &end, loc);
    if (end != s + i) return 0;
    *pi = i;
    return 1;
}

typedef struct {
    const char *s;
    int64_t n;
    double *nums;
    int64_t cap, count;
    locale_t loc;
} ql_scan;

/* After an array item: skips whitespace and a comma (returns 1, next item follows), or stops at the closing ']'
 * (returns 0, i on it); anything else is -1. */
static int ql_after_item(const char *s, int64_t n, int64_t *pi) {
    int64_t i = *pi;
    while (i < n && ql_ws(s[i])) i++;
    if (i < n && s[i] == ',') {
        i++;
        while (i < n && ql_ws(s[i])) i++;
        *pi = i;
        return 1;
    }
    *pi = i;
    return (i < n && s[i] == ']') ? 0 : -1;
}

/* A rectangular array of numbers at s[*pi] == '[' (any depth up to QL_MAX_DIMS, no empty dimension): its numbers
 * appended to nums (row-major), its shape in shape[0..*ndim). Returns 1 and moves *pi past ']', else 0 (the caller
 * restores count). */
static int ql_array(ql_scan *sc, int64_t *pi, int depth, int64_t *shape, int *ndim) {
    const char *s = sc->s;
    const int64_t n = sc->n;
    if (depth >= QL_MAX_DIMS) return 0;
    int64_t i = *pi + 1;
    while (i < n && ql_ws(s[i])) i++;
    if (i >= n || s[i] == ']') return 0;
    int64_t count = 0;
    if (s[i] == '[') {
        int64_t sub[QL_MAX_DIMS];
        int subdim = 0;
        for (;;) {
            int64_t cur[QL_MAX_DIMS];
            int curdim = 0;
            if (i >= n || s[i] != '[' || !ql_array(sc, &i, depth + 1, cur, &curdim)) return 0;
            if (count == 0) {
                subdim = curdim;
                memcpy(sub, cur, sizeof(int64_t) * (size_t)curdim);
            } else if (curdim != subdim || memcmp(sub, cur, sizeof(int64_t) * (size_t)curdim) != 0) {
                return 0;
            }
            count++;
            int more = ql_after_item(s, n, &i);
            if (more < 0) return 0;
            if (!more) break;
        }
        if (subdim + 1 > QL_MAX_DIMS) return 0;
        shape[0] = count;
        memcpy(shape + 1, sub, sizeof(int64_t) * (size_t)subdim);
        *ndim = subdim + 1;
    } else {
        for (;;) {
            if (sc->count >= sc->cap) return 0;
            if (!ql_number(s, n, &i, sc->nums + sc->count, sc->loc)) return 0;
            sc->count++;
            count++;
            int more = ql_after_item(s, n, &i);
            if (more < 0) return 0;
            if (!more) break;
        }
        shape[0] = count;
        *ndim = 1;
    }
    *pi = i + 1;
    return 1;
}

/* Copies src to skel, replacing each rectangular array of numbers (outermost first) by the JSON string
 * "\u0000<k>" and recording in table[k * 10 ..] its first number's index in nums, its rank and its shape. Strings
 * are copied verbatim, runs of whitespace between tokens as one byte. Returns 0, or -1 when a buffer is too small or the text cannot be scanned (unterminated
 * string); the caller then parses the text as it is. */
int ql_json_extract(const char *src, int64_t n, char *skel, int64_t skel_cap, int64_t *skel_len, double *nums,
                    int64_t nums_cap, int64_t *n_nums, int64_t *table, int64_t table_cap, int64_t *n_arrays) {
    locale_t loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (loc == (locale_t)0) return -1;
    ql_scan sc = {src, n, nums, nums_cap, 0, loc};
    int64_t i = 0, o = 0, k = 0;
    int rc = 0;
    while (i < n) {
        const char c = src[i];
        if (c == '"') {
            int64_t e = i + 1;
            while (e < n && src[e] != '"') e += (src[e] == '\\') ? 2 : 1;
            if (e >= n) { rc = -1; break; }
            if (o + (e + 1 - i) > skel_cap) { rc = -1; break; }
            memcpy(skel + o, src + i, (size_t)(e + 1 - i));
            o += e + 1 - i;
            i = e + 1;
            continue;
        }
        if (c == '[') {
            int64_t shape[QL_MAX_DIMS];
            int ndim = 0;
            int64_t j = i;
            const int64_t first = sc.count;
            if (k < table_cap && ql_array(&sc, &j, 0, shape, &ndim)) {
                char tok[40];
                int len = snprintf(tok, sizeof tok, "\"\\u0000%lld\"", (long long)k);
                if (o + len > skel_cap) { rc = -1; break; }
                memcpy(skel + o, tok, (size_t)len);
                o += len;
                int64_t *row = table + k * 10;
                row[0] = first;
                row[1] = ndim;
                for (int d = 0; d < QL_MAX_DIMS; d++) row[2 + d] = d < ndim ? shape[d] : 0;
                k++;
                i = j;
                continue;
            }
            sc.count = first;
        }
        if (o >= skel_cap) { rc = -1; break; }
        skel[o++] = c;
        i++;
        if (ql_ws(c)) /* a run of whitespace outside strings becomes one byte: tokens stay apart, text shrinks */
            while (i < n && ql_ws(src[i])) i++;
    }
    freelocale(loc);
    *skel_len = o;
    *n_nums = sc.count;
    *n_arrays = k;
    return rc;
}

static struct PyModuleDef ql_module = {PyModuleDef_HEAD_INIT, "_jsonfast",
                                       "qlinear JSON helpers for large encodings files (use via ctypes)", -1, NULL, NULL, NULL,
                                       NULL, NULL};

PyMODINIT_FUNC PyInit__jsonfast(void) { return PyModule_Create(&ql_module); }
