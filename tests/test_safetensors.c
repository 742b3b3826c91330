/* safetensors checkpoints: round trips of every dtype and layout, the byte
 * layout of saved files, a file written by PyTorch, a catalogue of broken
 * files that must be rejected without touching the output, all-or-nothing
 * load_into, and atomic saves. Files live in a fresh directory under /tmp. */
#define _GNU_SOURCE
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------ */

/* Room for a directory under $TMPDIR and a file name or two inside it. */
#define DIR_CAP 256
#define PATH_CAP (DIR_CAP + 128)

/* A new empty directory under $TMPDIR (/tmp when unset), its path in dir
 * (DIR_CAP bytes). */
static void make_dir(char *dir)
{
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(dir, DIR_CAP, "%s/tg_st_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_msg(n > 0 && n < DIR_CAP, "TMPDIR is too long for the test's buffers");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* Entries of dir other than . and .. */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* Removes dir and what the tests put in it (files and empty subdirectories). */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[PATH_CAP + 256];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0)
            rmdir(path);
    }
    closedir(d);
    rmdir(dir);
}

static void write_bytes(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

/* The whole file in a malloc'd buffer; its size in *n. */
static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)size + 1);
    ck_assert_uint_eq(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *n = (size_t)size;
    return buf;
}

/* A safetensors file from a header text and data_len data bytes (0, 1, 2, ...). */
static void write_st(const char *path, const char *header, size_t data_len)
{
    size_t hl = strlen(header), n = 8 + hl + data_len;
    unsigned char *buf = malloc(n);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + hl + i] = (unsigned char)i;
    write_bytes(path, buf, n);
    free(buf);
}

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* ---- round trips ------------------------------------------------------------------ */

/* The list that tests/fixtures/safetensors_ref.py's c_expected() describes:
 * a transposed float32, a 0-dim float64, int64, bool, an empty tensor and
 * bfloat16 (its bits: 1.5, -0.25, inf). */
static void interop_list(tg_params *ps)
{
    tg_tensor *w = T32(SHAPE(2, 3), 2, 1, 2, 3, 4, 5, 6);
    tg_tensor *wt = tg_transpose(w, 0, 1); /* [3,2], not contiguous */
    tg_tensor *b = tg_scalar(TG_FLOAT64, -0.125);
    tg_tensor *ids = tg_from_data(TG_INT64, 1, SHAPE(4), (const int64_t[]){3, -1, INT64_C(1) << 40, 0});
    tg_tensor *mask = tg_from_data(TG_BOOL, 2, SHAPE(2, 3),
                                   (const bool[]){false, true, true, false, false, true});
    tg_tensor *empty = tg_zeros(TG_FLOAT32, 2, SHAPE(0, 5));
    tg_tensor *half = tg_from_data(TG_BFLOAT16, 1, SHAPE(3), (const uint16_t[]){0x3fc0, 0xbe80, 0x7f80});
    ck_assert_int_eq(tg_params_add(ps, NULL, "w", wt), 0);
    ck_assert_int_eq(tg_params_add(ps, NULL, "b", b), 0);
    ck_assert_int_eq(tg_params_add(ps, NULL, "ids", ids), 0);
    ck_assert_int_eq(tg_params_add(ps, NULL, "mask", mask), 0);
    ck_assert_int_eq(tg_params_add(ps, NULL, "empty", empty), 0);
    ck_assert_int_eq(tg_params_add(ps, NULL, "half", half), 0);
    tg_release(half);
    tg_release(w);
    tg_release(wt);
    tg_release(b);
    tg_release(ids);
    tg_release(mask);
    tg_release(empty);
}

static const char *const meta_keys[] = {"format", "note"};
static const char *const meta_values[] = {"pt", "quote \" backslash \\ newline \n tab \t end"};

START_TEST(round_trip_keeps_every_dtype_layout_and_name_order)
{
    char dir[DIR_CAP], path[PATH_CAP];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/all.safetensors", dir);
    tg_params ps = {0}, back = {0};
    interop_list(&ps);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 2, meta_keys, meta_values), 0);
    /* TG_ST_INTEROP=file also writes the list there, for safetensors_ref.py to check. */
    const char *interop = getenv("TG_ST_INTEROP");
    if (interop)
        ck_assert_int_eq(tg_safetensors_save(interop, &ps, 2, meta_keys, meta_values), 0);
    ck_assert_int_eq(tg_safetensors_load(path, &back), 0);
    ck_assert_int_eq(back.count, ps.count);
    for (int i = 0; i < ps.count; i++) {
        const tg_tensor *want = ps.tensors[i], *got = back.tensors[i];
        ck_assert_str_eq(back.names[i], ps.names[i]);
        ck_assert_int_eq(tg_dtype_of(got), tg_dtype_of(want));
        ck_assert_int_eq(tg_ndim(got), tg_ndim(want));
        for (int d = 0; d < tg_ndim(want); d++)
            ck_assert_int_eq(tg_shape(got)[d], tg_shape(want)[d]);
        ck_assert(tg_is_contiguous(got));
    }
    ck_assert_values(back.tensors[0], 0, 1, 4, 2, 5, 3, 6); /* the transposed order */
    ck_assert_values(back.tensors[1], 0, -0.125);
    int64_t ids[4];
    ck_assert_int_eq(tg_copy_to(back.tensors[2], TG_INT64, ids, 4), 0);
    ck_assert(ids[0] == 3 && ids[1] == -1 && ids[2] == INT64_C(1) << 40 && ids[3] == 0);
    ck_assert_values(back.tensors[3], 0, 0, 1, 1, 0, 0, 1);
    ck_assert_int_eq(tg_numel(back.tensors[4]), 0);
    ck_assert_values(back.tensors[5], 0, 1.5, -0.25, INFINITY);
    tg_params_clear(&ps);
    tg_params_clear(&back);
    remove_dir(dir);
}
END_TEST

START_TEST(names_with_quotes_and_unicode_round_trip)
{
    char dir[DIR_CAP], path[PATH_CAP];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/names.safetensors", dir);
    const char *names[] = {"layers.0.\"quoted\"", "back\\slash", "caf\xc3\xa9.weight"};
    tg_params ps = {0}, back = {0};
    for (int i = 0; i < 3; i++) {
        tg_tensor *t = tg_full(TG_FLOAT32, 1, SHAPE(2), i + 1);
        ck_assert_int_eq(tg_params_add(&ps, NULL, names[i], t), 0);
        tg_release(t);
    }
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), 0);
    ck_assert_int_eq(tg_safetensors_load(path, &back), 0);
    ck_assert_int_eq(back.count, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_str_eq(back.names[i], names[i]);
        ck_assert_values(back.tensors[i], 0, i + 1, i + 1);
    }
    tg_params_clear(&ps);
    tg_params_clear(&back);
    remove_dir(dir);
}
END_TEST

START_TEST(saved_file_has_the_specified_layout)
{
    char dir[DIR_CAP], path[PATH_CAP];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/layout.safetensors", dir);
    tg_params ps = {0};
    interop_list(&ps);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 2, meta_keys, meta_values), 0);
    size_t n;
    unsigned char *bytes = read_bytes(path, &n);
    uint64_t header_len = le64(bytes);
    /* data: 6 floats, 1 double, 4 int64, 6 bools, nothing for the empty
     * tensor, 3 bfloat16 */
    size_t data_len = 6 * 4 + 8 + 4 * 8 + 6 + 3 * 2;
    ck_assert_uint_eq(n, 8 + header_len + data_len);
    ck_assert_uint_eq((8 + header_len) % 8, 0); /* the data starts aligned */
    ck_assert_int_eq(bytes[8], '{');
    size_t end = 8 + (size_t)header_len;
    while (bytes[end - 1] == ' ')
        end--; /* padding is spaces after the closing brace */
    ck_assert_int_eq(bytes[end - 1], '}');
    char *header = strndup((const char *)bytes + 8, (size_t)header_len);
    ck_assert_ptr_nonnull(strstr(header, "\"__metadata__\""));
    ck_assert_ptr_nonnull(strstr(header, "\"w\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]}"));
    ck_assert_ptr_nonnull(strstr(header, "\"b\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[24,32]}"));
    ck_assert_ptr_nonnull(strstr(header, "\"mask\":{\"dtype\":\"BOOL\",\"shape\":[2,3]"));
    ck_assert_ptr_nonnull(strstr(header, "\"half\":{\"dtype\":\"BF16\",\"shape\":[3],"
                                         "\"data_offsets\":[70,76]}"));
    /* The transposed float32 is written in its logical (row-major) order. */
    float w[6];
    memcpy(w, bytes + 8 + header_len, sizeof w);
    ck_assert(w[0] == 1 && w[1] == 4 && w[2] == 2 && w[3] == 5 && w[4] == 3 && w[5] == 6);
    free(header);
    free(bytes);
    tg_params_clear(&ps);
    remove_dir(dir);
}
END_TEST

START_TEST(empty_list_saves_an_empty_object)
{
    char dir[DIR_CAP], path[PATH_CAP];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/empty.safetensors", dir);
    tg_params ps = {0}, back = {0};
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), 0);
    size_t n;
    unsigned char *bytes = read_bytes(path, &n);
    ck_assert_uint_eq(n, 8 + le64(bytes));
    ck_assert_int_eq(bytes[8], '{');
    ck_assert_int_eq(bytes[9], '}');
    free(bytes);
    ck_assert_int_eq(tg_safetensors_load(path, &back), 0);
    ck_assert_int_eq(back.count, 0);
    tg_params_clear(&back);
    remove_dir(dir);
}
END_TEST

/* ---- PyTorch interop -------------------------------------------------------------- */

/* Values put there by tests/fixtures/safetensors_ref.py (torch_fixture()). */
START_TEST(file_written_by_pytorch_loads_with_its_values)
{
    char path[1000];
    fixture_path(path, sizeof path, "torch_written.safetensors");
    tg_params ps = {0};
    ck_assert_int_eq(tg_safetensors_load(path, &ps), 0);
    ck_assert_int_eq(ps.count, 4);
    ck_assert_str_eq(ps.names[0], "weight");
    ck_assert_str_eq(ps.names[1], "scale");
    ck_assert_str_eq(ps.names[2], "index");
    ck_assert_str_eq(ps.names[3], "mask");

    tg_tensor *w = tg_params_find(&ps, "weight");
    ck_assert_int_eq(tg_dtype_of(w), TG_FLOAT32);
    ck_assert_shape(w, 2, 3);
    const float wv[] = {1.5f, -2.25f, 3.0f, 0.1f, 1e-3f, -7.0f};
    ck_assert_int_eq(memcmp(tg_data(w), wv, sizeof wv), 0);

    tg_tensor *s = tg_params_find(&ps, "scale");
    ck_assert_int_eq(tg_dtype_of(s), TG_FLOAT64);
    ck_assert_shape(s, 4);
    const double sv[] = {0.1, -1.0 / 3.0, 2.5e10, 3.141592653589793};
    ck_assert_int_eq(memcmp(tg_data(s), sv, sizeof sv), 0);

    tg_tensor *ix = tg_params_find(&ps, "index");
    ck_assert_int_eq(tg_dtype_of(ix), TG_INT64);
    const int64_t iv[] = {-5, 0, (1LL << 40) + 3};
    ck_assert_int_eq(memcmp(tg_data(ix), iv, sizeof iv), 0);

    tg_tensor *m = tg_params_find(&ps, "mask");
    ck_assert_int_eq(tg_dtype_of(m), TG_BOOL);
    ck_assert_shape(m, 2, 2);
    ck_assert_values(m, 0, 1, 0, 0, 1);
    tg_params_clear(&ps);
}
END_TEST

/* ---- bad files ------------------------------------------------------------------ */

typedef struct {
    const char *header; /* NULL: raw bytes below */
    size_t data_len;
    const char *raw;
    size_t raw_len;
    tg_error code;
    const char *fragment;
} bad_file;

#define HDR(h, n, frag) {h, n, NULL, 0, TG_ERR_VALUE, frag}
static const bad_file bad_files[] = {
    {NULL, 0, "\x05\0\0\0\0", 5, TG_ERR_VALUE, "5 bytes, too short"},
    {NULL, 0, "\xe8\x03\0\0\0\0\0\0{}        ", 18, TG_ERR_VALUE,
     "header length 1000 runs past the end of the file (18 bytes)"},
    {NULL, 0, "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10, TG_ERR_VALUE, "runs past the end"},
    HDR("{\"w\":", 0, "malformed JSON header"),
    HDR("{} x", 0, "malformed JSON header: unexpected text after the value"),
    HDR("{\"\xff\":1}", 0, "invalid UTF-8"),
    HDR("[1,2]", 0, "header is an array, not an object"),
    HDR("{\"w\":3}", 0, "tensor 'w' is a number, not an object"),
    HDR("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'w' has no dtype"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor 'w' has no shape"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "'w' needs data_offsets"),
    HDR("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
        "dtype a number, not a string"),
    HDR("{\"w\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
        "unknown dtype 'Q7'"),
    HDR("{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
        "unsupported dtype 'F16'"),
    HDR("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
        "unsupported dtype 'F8_E4M3'"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
        "shape entry -1, not a non-negative integer"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,4]}}", 4,
        "shape entry 2.5"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":\"3\",\"data_offsets\":[0,4]}}", 4,
        "shape, not an array"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
        "9 dims, more than 8"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,40]}}", 48,
        "tensor 'w' has data_offsets [0,40] but shape [3,4] float32 needs 48 bytes"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,4]}}",
        4, "needs more than"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
        "[8,4] with begin past end"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8,
        "needs data_offsets as an array [begin, end]"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8,
        "data_offsets entry -4"),
    HDR("{\"w\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 12,
        "past the end of the data (12 bytes)"),
    HDR("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
        "tensors 'a' [0,8] and 'b' [4,12] overlap"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
        "duplicate tensor name 'w'"),
    /* A repeated key means one thing to one reader and another to the next. */
    HDR("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
        "tensor 'w' has key 'dtype' twice"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"shape\":[2]}}", 8,
        "tensor 'w' has key 'shape' twice"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
        "\"data_offsets\":[4,8]}}", 8, "tensor 'w' has key 'data_offsets' twice"),
    HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
        "\"x\":[{\"k\":1,\"k\":2}]}}", 4, "tensor 'w' holds an object with key 'k' twice"),
    HDR("{\"__metadata__\":{\"a\":\"1\"},\"__metadata__\":{\"a\":\"2\"}}", 0,
        "the header has __metadata__ twice"),
    HDR("{\"__metadata__\":{\"a\":\"1\",\"b\":\"2\",\"a\":\"3\"}}", 0,
        "__metadata__ has key 'a' twice"),
    /* past 16 members the keys are sorted; the first repeat in the text is named */
    HDR("{\"q\":0,\"b\":0,\"c\":0,\"d\":0,\"e\":0,\"f\":0,\"g\":0,\"h\":0,\"i\":0,\"j\":0,"
        "\"k\":0,\"l\":0,\"m\":0,\"n\":0,\"o\":0,\"p\":0,\"a\":0,\"q\":0,\"a\":0}", 0,
        "duplicate tensor name 'q'"),
    HDR("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty name"),
    HDR("{\"__metadata__\":{\"a\":1}}", 0, "__metadata__ entry 'a' is a number, not a string"),
    HDR("{\"__metadata__\":\"x\"}", 0, "__metadata__ is a string, not an object"),
    HDR("{\"keep\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
        "tensor 'keep' is already in the output list"),
};

START_TEST(bad_files_are_rejected_and_leave_out_unchanged)
{
    char dir[DIR_CAP], path[PATH_CAP];
    make_dir(dir);
    tg_tensor *keep = T32(SHAPE(1), 1, 9.0f);
    tg_params out = {0};
    ck_assert_int_eq(tg_params_add(&out, NULL, "keep", keep), 0);
    int64_t live = tg_live_tensors();
    for (size_t i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++) {
        const bad_file *b = &bad_files[i];
        snprintf(path, sizeof path, "%s/bad%zu.safetensors", dir, i);
        if (b->header)
            write_st(path, b->header, b->data_len);
        else
            write_bytes(path, b->raw, b->raw_len);
        ck_assert_msg(tg_safetensors_load(path, &out) == -1, "bad file %zu accepted", i);
        ck_assert_error(b->code, "tg_safetensors_load: ", path, b->fragment);
        ck_assert_int_eq(out.count, 1);
        ck_assert_ptr_eq(out.tensors[0], keep);
        ck_assert_str_eq(out.names[0], "keep");
        ck_assert_int_eq(tg_live_tensors(), live);
    }
    /* Files that cannot be read at all are I/O errors. */
    snprintf(path, sizeof path, "%s/missing.safetensors", dir);
    ck_assert_int_eq(tg_safetensors_load(path, &out), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_load", path, "cannot open", "No such file");
    ck_assert_int_eq(tg_safetensors_load(dir, &out), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_load", dir, "not a regular file");
    ck_assert_int_eq(out.count, 1);
    tg_release(keep);
    tg_params_clear(&out);
    remove_dir(dir);
}
END_TEST

START_TEST(bool_bytes_other_than_one_load_as_true)
{
    char dir[DIR_CAP], path[PATH_CAP];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/b.safetensors", dir);
    write_st(path, "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3);
    tg_params ps = {0};
    ck_assert_int_eq(tg_safetensors_load(path, &ps), 0);
    const unsigned char *p = tg_data(ps.tensors[0]); /* data bytes were 0, 1, 2 */
    ck_assert(p[0] == 0 && p[1] == 1 && p[2] == 1);
    tg_params_clear(&ps);
    remove_dir(dir);
}
END_TEST

/* Only regular files load. A device, a directory or a FIFO is named for
 * what it is, at once: a FIFO is never opened, so no writer is awaited (a
 * hang would trip the test's timeout). A file too short for the header
 * length keeps its own message. */
START_TEST(non_regular_files_are_refused_without_blocking)
{
    char dir[DIR_CAP], path[PATH_CAP];
    make_dir(dir);
    tg_params out = {0};
    ck_assert_int_eq(tg_safetensors_load("/dev/zero", &out), -1);
    ck_assert_error(TG_ERR_IO,
                    "tg_safetensors_load: /dev/zero: is not a regular file (it is a character device)");
    ck_assert_int_eq(tg_safetensors_load(dir, &out), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_load: ", dir,
                    ": is not a regular file (it is a directory)");
    snprintf(path, sizeof path, "%s/fifo", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    ck_assert_int_eq(tg_safetensors_load(path, &out), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_load: ", path, "is not a regular file (it is a FIFO)");
    ck_assert_int_eq(tg_safetensors_load_into(path, &out), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_load_into: ", path, "(it is a FIFO)");
    snprintf(path, sizeof path, "%s/short", dir);
    write_bytes(path, "abc", 3);
    ck_assert_int_eq(tg_safetensors_load(path, &out), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_safetensors_load: ", path, "file is 3 bytes, too short");
    ck_assert_int_eq(out.count, 0);
    remove_dir(dir);
}
END_TEST

START_TEST(null_and_bad_arguments_are_rejected)
{
    char dir[DIR_CAP], path[PATH_CAP];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    tg_params ps = {0};
    ck_assert_int_eq(tg_safetensors_save(NULL, &ps, 0, NULL, NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_safetensors_save", "path");
    ck_assert_int_eq(tg_safetensors_save(path, NULL, 0, NULL, NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_safetensors_save", "ps");
    ck_assert_int_eq(tg_safetensors_load(NULL, &ps), -1);
    ck_assert_error(TG_ERR_NULL, "tg_safetensors_load", "path");
    ck_assert_int_eq(tg_safetensors_load(path, NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_safetensors_load", "out");
    ck_assert_int_eq(tg_safetensors_load_into(path, NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_safetensors_load_into", "ps");
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 1, NULL, NULL), -1);
    ck_assert_error(TG_ERR_NULL, "tg_safetensors_save", "n_meta is 1");
    const char *k[] = {"a", "a"}, *v[] = {"1", "2"};
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 2, k, v), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_safetensors_save", "duplicate metadata key 'a'");
    tg_tensor *t = T32(SHAPE(1), 1, 1.0f);
    ck_assert_int_eq(tg_params_add(&ps, NULL, "__metadata__", t), 0);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_safetensors_save", "reserved", "__metadata__");
    ck_assert_int_eq(access(path, F_OK), -1);
    tg_release(t);
    tg_params_clear(&ps);
    remove_dir(dir);
}
END_TEST

/* ---- load_into ------------------------------------------------------------------ */

START_TEST(load_into_copies_into_existing_tensors_of_any_layout)
{
    char dir[DIR_CAP], path[PATH_CAP];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    tg_params src = {0}, dst = {0};
    tg_tensor *a = T32(SHAPE(2, 3), 2, 1, 2, 3, 4, 5, 6);
    tg_tensor *b = tg_from_data(TG_INT64, 1, SHAPE(2), (const int64_t[]){7, -8});
    ck_assert_int_eq(tg_params_add(&src, NULL, "a", a), 0);
    ck_assert_int_eq(tg_params_add(&src, NULL, "b", b), 0);
    ck_assert_int_eq(tg_safetensors_save(path, &src, 0, NULL, NULL), 0);
    /* Destination a is a transposed view of a [3,2] base; b is plain. */
    tg_tensor *base = tg_zeros(TG_FLOAT32, 2, SHAPE(3, 2));
    tg_tensor *da = tg_transpose(base, 0, 1);
    tg_tensor *db = tg_zeros(TG_INT64, 1, SHAPE(2));
    ck_assert_int_eq(tg_params_add(&dst, NULL, "b", db), 0); /* order differs from the file */
    ck_assert_int_eq(tg_params_add(&dst, NULL, "a", da), 0);
    ck_assert_int_eq(tg_safetensors_load_into(path, &dst), 0);
    ck_assert_values(da, 0, 1, 2, 3, 4, 5, 6);
    ck_assert_values(base, 0, 1, 4, 2, 5, 3, 6);
    ck_assert_values(db, 0, 7, -8);
    tg_release(a);
    tg_release(b);
    tg_release(base);
    tg_release(da);
    tg_release(db);
    tg_params_clear(&src);
    tg_params_clear(&dst);
    remove_dir(dir);
}
END_TEST

/* A file may place a tensor at any byte offset: here int64 elements start 3
 * bytes into an 8-aligned data section, behind 3 bool bytes 0, 1, 2. Both
 * land whole in a transposed view and a plain tensor. */
START_TEST(load_into_a_strided_tensor_takes_misaligned_elements_and_bool_bytes)
{
    char dir[DIR_CAP], path[PATH_CAP];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/o.safetensors", dir);
    const char *header = "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]},"
                         "\"w\":{\"dtype\":\"I64\",\"shape\":[2,2],\"data_offsets\":[3,35]}}";
    char padded[256];
    snprintf(padded, sizeof padded, "%-*s", (int)((strlen(header) + 7) / 8 * 8), header);
    write_st(path, padded, 35);
    unsigned char bytes[35]; /* what write_st wrote after the header */
    for (int i = 0; i < 35; i++)
        bytes[i] = (unsigned char)i;
    tg_tensor *base = tg_zeros(TG_INT64, 2, SHAPE(2, 2));
    tg_tensor *w = tg_transpose(base, 0, 1);
    tg_tensor *m = tg_zeros(TG_BOOL, 1, SHAPE(3));
    tg_params ps = {0};
    ck_assert_int_eq(tg_params_add(&ps, NULL, "w", w), 0);
    ck_assert_int_eq(tg_params_add(&ps, NULL, "m", m), 0);
    ck_assert_int_eq(tg_safetensors_load_into(path, &ps), 0);
    int64_t got[4];
    ck_assert_int_eq(tg_copy_to(base, TG_INT64, got, 4), 0);
    const int order[4] = {0, 2, 1, 3}; /* base is w transposed */
    for (int k = 0; k < 4; k++)
        ck_assert_uint_eq((uint64_t)got[k], le64(bytes + 3 + 8 * order[k]));
    const unsigned char *p = tg_data_const(m);
    ck_assert(p[0] == 0 && p[1] == 1 && p[2] == 1);
    tg_release(base);
    tg_release(w);
    tg_release(m);
    tg_params_clear(&ps);
    remove_dir(dir);
}
END_TEST

/* Loading inside an open scope: the tensors a load makes belong to out, not
 * to the scope, so ending the scope releases nothing twice and takes
 * nothing from out. */
START_TEST(load_and_load_into_work_inside_a_scope)
{
    char dir[DIR_CAP], path[PATH_CAP];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/s.safetensors", dir);
    tg_params src = {0}, dst = {0}, back = {0};
    tg_tensor *a = T32(SHAPE(2, 3), 2, 1, 2, 3, 4, 5, 6);
    ck_assert_int_eq(tg_params_add(&src, NULL, "a", a), 0);
    ck_assert_int_eq(tg_safetensors_save(path, &src, 0, NULL, NULL), 0);
    tg_tensor *base = tg_zeros(TG_FLOAT32, 2, SHAPE(3, 2));
    tg_tensor *da = tg_transpose(base, 0, 1);
    ck_assert_int_eq(tg_params_add(&dst, NULL, "a", da), 0);
    tg_scope_begin();
    ck_assert_int_eq(tg_safetensors_load_into(path, &dst), 0);
    ck_assert_int_eq(tg_safetensors_load(path, &back), 0);
    ck_assert_int_eq(tg_scope_end(), 0);
    ck_assert_int_eq(tg_error_code(), TG_OK);
    ck_assert_values(base, 0, 1, 4, 2, 5, 3, 6);
    ck_assert_int_eq(back.count, 1);
    ck_assert_values(back.tensors[0], 0, 1, 2, 3, 4, 5, 6);
    tg_release(a);
    tg_release(base);
    tg_release(da);
    tg_params_clear(&src);
    tg_params_clear(&dst);
    tg_params_clear(&back);
    remove_dir(dir);
}
END_TEST

START_TEST(load_into_is_all_or_nothing)
{
    char dir[DIR_CAP], path[PATH_CAP];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    /* The file: a [2,2] f32, b [4] f64, c [1] f32. */
    write_st(path,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
             "\"b\":{\"dtype\":\"F64\",\"shape\":[4],\"data_offsets\":[16,48]},"
             "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[48,52]}}",
             52);
    tg_tensor *a = T32(SHAPE(2, 2), 2, 1, 1, 1, 1);
    tg_tensor *b3 = T64(SHAPE(3), 1, 2, 2, 2);
    tg_tensor *b4 = T64(SHAPE(4), 1, 2, 2, 2, 2);
    tg_tensor *b4f = T32(SHAPE(4), 1, 2, 2, 2, 2);
    tg_tensor *c = T32(SHAPE(1), 1, 3);
    tg_tensor *d = T32(SHAPE(1), 1, 4);
    struct {
        tg_tensor *b;
        bool with_c, with_d;
        const char *fragment;
    } cases[] = {
        {b3, true, false, "tensor 'b' has shape [4] in the file but [3] in the parameters"},
        {b4f, true, false, "tensor 'b' is float64 in the file but float32 in the parameters"},
        {b4, false, false, "tensor 'c' in the file is not among the parameters"},
        {b4, true, true, "parameter 'd' is missing from the file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tg_params ps = {0};
        tg_params_add(&ps, NULL, "a", a);
        tg_params_add(&ps, NULL, "b", cases[i].b);
        if (cases[i].with_c)
            tg_params_add(&ps, NULL, "c", c);
        if (cases[i].with_d)
            tg_params_add(&ps, NULL, "d", d);
        ck_assert_int_eq(tg_safetensors_load_into(path, &ps), -1);
        ck_assert_error(TG_ERR_VALUE, "tg_safetensors_load_into: ", path, cases[i].fragment);
        ck_assert_values(a, 0, 1, 1, 1, 1);
        double bv[4];
        ck_assert_int_eq(tg_copy_to(cases[i].b, TG_FLOAT64, bv, 4), 0);
        for (int64_t j = 0; j < tg_numel(cases[i].b); j++)
            ck_assert_double_eq(bv[j], 2.0);
        ck_assert_values(c, 0, 3);
        tg_params_clear(&ps);
    }
    /* A bad file is rejected the same way by load_into. */
    tg_params ps = {0};
    tg_params_add(&ps, NULL, "a", a);
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 16);
    ck_assert_int_eq(tg_safetensors_load_into(path, &ps), -1);
    ck_assert_error(TG_ERR_VALUE, "tg_safetensors_load_into", "needs 16 bytes");
    ck_assert_values(a, 0, 1, 1, 1, 1);
    tg_params_clear(&ps);
    tg_release(a);
    tg_release(b3);
    tg_release(b4);
    tg_release(b4f);
    tg_release(c);
    tg_release(d);
    remove_dir(dir);
}
END_TEST

/* ---- atomic saves ------------------------------------------------------------------ */

START_TEST(save_to_unwritable_place_fails_with_io_and_leaves_no_temp_file)
{
    char dir[DIR_CAP], path[PATH_CAP];
    make_dir(dir);
    tg_params ps = {0};
    tg_tensor *t = T32(SHAPE(2), 1, 1, 2);
    ck_assert_int_eq(tg_params_add(&ps, NULL, "t", t), 0);

    snprintf(path, sizeof path, "%s/no/such/dir/m.safetensors", dir);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_save: ", path, "No such file or directory");

    /* The target is a directory: refused before any temporary file exists. */
    snprintf(path, sizeof path, "%s/target", dir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), -1);
    ck_assert_error(TG_ERR_IO, "tg_safetensors_save: ", path, "is a directory; not replacing it");
    ck_assert_int_eq(count_entries(dir), 1);
    rmdir(path);

    /* A read-only directory (root ignores permissions, so only as a user). */
    if (geteuid() != 0) {
        ck_assert_int_eq(chmod(dir, 0500), 0);
        snprintf(path, sizeof path, "%s/m.safetensors", dir);
        ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), -1);
        ck_assert_error(TG_ERR_IO, "tg_safetensors_save: ", path, "Permission denied");
        ck_assert_int_eq(count_entries(dir), 0);
        chmod(dir, 0700);
    }
    tg_release(t);
    tg_params_clear(&ps);
    remove_dir(dir);
}
END_TEST

START_TEST(save_over_an_existing_file_replaces_it)
{
    char dir[DIR_CAP], path[PATH_CAP];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    write_bytes(path, "old contents that are not a checkpoint at all", 46);
    tg_params ps = {0}, back = {0};
    tg_tensor *t = T64(SHAPE(3), 1, 1.25, 2.5, 3.75);
    ck_assert_int_eq(tg_params_add(&ps, NULL, "x", t), 0);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), 0);
    ck_assert_int_eq(tg_safetensors_load(path, &back), 0);
    ck_assert_int_eq(back.count, 1);
    ck_assert_values(back.tensors[0], 0, 1.25, 2.5, 3.75);
    tg_params_clear(&back);
    /* A second save with other contents replaces the first. */
    tg_params_clear(&ps);
    tg_tensor *u = tg_from_data(TG_INT64, 1, SHAPE(1), (const int64_t[]){42});
    ck_assert_int_eq(tg_params_add(&ps, NULL, "y", u), 0);
    ck_assert_int_eq(tg_safetensors_save(path, &ps, 0, NULL, NULL), 0);
    ck_assert_int_eq(tg_safetensors_load(path, &back), 0);
    ck_assert_int_eq(back.count, 1);
    ck_assert_str_eq(back.names[0], "y");
    ck_assert_values(back.tensors[0], 0, 42);
    ck_assert_int_eq(count_entries(dir), 1); /* no temporary file left behind */
    tg_release(t);
    tg_release(u);
    tg_params_clear(&ps);
    tg_params_clear(&back);
    remove_dir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("safetensors");
    TCase *trip = tcase_checked("round trips");
    tcase_add_test(trip, round_trip_keeps_every_dtype_layout_and_name_order);
    tcase_add_test(trip, names_with_quotes_and_unicode_round_trip);
    tcase_add_test(trip, saved_file_has_the_specified_layout);
    tcase_add_test(trip, empty_list_saves_an_empty_object);
    tcase_add_test(trip, file_written_by_pytorch_loads_with_its_values);
    suite_add_tcase(s, trip);
    TCase *bad = tcase_checked("bad input");
    tcase_add_test(bad, bad_files_are_rejected_and_leave_out_unchanged);
    tcase_add_test(bad, bool_bytes_other_than_one_load_as_true);
    tcase_add_test(bad, non_regular_files_are_refused_without_blocking);
    tcase_add_test(bad, null_and_bad_arguments_are_rejected);
    suite_add_tcase(s, bad);
    TCase *into = tcase_checked("load_into");
    tcase_add_test(into, load_into_copies_into_existing_tensors_of_any_layout);
    tcase_add_test(into, load_into_a_strided_tensor_takes_misaligned_elements_and_bool_bytes);
    tcase_add_test(into, load_into_is_all_or_nothing);
    tcase_add_test(into, load_and_load_into_work_inside_a_scope);
    suite_add_tcase(s, into);
    TCase *atomic = tcase_checked("atomic saves");
    tcase_add_test(atomic, save_to_unwritable_place_fails_with_io_and_leaves_no_temp_file);
    tcase_add_test(atomic, save_over_an_existing_file_replaces_it);
    suite_add_tcase(s, atomic);
    return run_suite(s);
}
