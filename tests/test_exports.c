/* The shared libraries' exported symbols are the public API, no more and no
 * less: nm lists what libtensorgrad.so (and libtensorgrad-dist.so) exports,
 * and the public headers (given as arguments) say what they should. */
#include "testutil.h"

#include <ctype.h>

/* From the environment and the command line (tests/meson.build). */
static const char *nm_path, *lib_path;
static char **header_paths;
static int n_headers;

/* A sorted list of names. */
typedef struct {
    char **names;
    int count, capacity;
} name_list;

static void list_add(name_list *l, const char *name, size_t len)
{
    if (l->count == l->capacity) {
        l->capacity = l->capacity ? 2 * l->capacity : 256;
        l->names = realloc(l->names, (size_t)l->capacity * sizeof *l->names);
        ck_assert_ptr_nonnull(l->names);
    }
    l->names[l->count] = strndup(name, len);
    ck_assert_ptr_nonnull(l->names[l->count]);
    l->count++;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorts and drops duplicates. */
static void list_sort(name_list *l)
{
    qsort(l->names, (size_t)l->count, sizeof *l->names, cmp_name);
    int kept = 0;
    for (int i = 0; i < l->count; i++) {
        if (kept > 0 && strcmp(l->names[kept - 1], l->names[i]) == 0)
            free(l->names[i]);
        else
            l->names[kept++] = l->names[i];
    }
    l->count = kept;
}

static bool list_has(const name_list *l, const char *name)
{
    return bsearch(&name, l->names, (size_t)l->count, sizeof *l->names, cmp_name) != NULL;
}

static void list_free(name_list *l)
{
    for (int i = 0; i < l->count; i++)
        free(l->names[i]);
    free(l->names);
}

/* The defined dynamic symbols of the shared libraries (TG_SHARED_LIB names
 * them, separated by ':'), as nm lists them: "address type name" per line,
 * after a "file:" line per library. */
static name_list exported_symbols(void)
{
    ck_assert_msg(nm_path && lib_path, "TG_NM and TG_SHARED_LIB must be set");
    char cmd[4096];
    int at = snprintf(cmd, sizeof cmd, "'%s' -D --defined-only", nm_path);
    for (const char *lib = lib_path; *lib != '\0';) {
        size_t len = strcspn(lib, ":");
        ck_assert_int_lt(at, (int)sizeof cmd);
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, " '%.*s'", (int)len, lib);
        lib += len + (lib[len] == ':');
    }
    ck_assert_int_lt(at, (int)sizeof cmd);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    name_list l = {0};
    char line[1024], name[512];
    while (fgets(line, sizeof line, p))
        if (sscanf(line, "%*s %*c %511s", name) == 1)
            list_add(&l, name, strlen(name));
    ck_assert_int_eq(pclose(p), 0);
    list_sort(&l);
    return l;
}

/* A header's text without comments and preprocessor lines, so that only
 * declarations are left. */
static char *header_code(const char *path)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *src = malloc((size_t)n + 1), *out = malloc((size_t)n + 1);
    ck_assert(src && out && fread(src, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    src[n] = '\0';
    size_t o = 0;
    bool line_start = true;
    for (long i = 0; i < n;) {
        if (src[i] == '/' && src[i + 1] == '*') {
            char *end = strstr(src + i + 2, "*/");
            i = end ? end - src + 2 : n;
        } else if ((src[i] == '/' && src[i + 1] == '/') || (line_start && src[i] == '#')) {
            while (i < n && !(src[i] == '\n' && src[i - 1] != '\\'))
                i++;
        } else {
            if (!isspace((unsigned char)src[i]))
                line_start = false;
            else if (src[i] == '\n')
                line_start = true;
            out[o++] = src[i++];
        }
    }
    out[o] = '\0';
    free(src);
    return out;
}

/* Functions the public headers declare: a tg_ name followed by "(". A
 * function pointer type, (*tg_name)(...), has ")" after its name instead. */
static name_list declared_functions(void)
{
    name_list l = {0};
    for (int h = 0; h < n_headers; h++) {
        char *code = header_code(header_paths[h]);
        for (char *s = code; (s = strstr(s, "tg_")) != NULL;) {
            bool starts = s == code || !(isalnum((unsigned char)s[-1]) || s[-1] == '_');
            size_t len = 0;
            while (isalnum((unsigned char)s[len]) || s[len] == '_')
                len++;
            const char *after = s + len;
            while (isspace((unsigned char)*after))
                after++;
            if (starts && *after == '(')
                list_add(&l, s, len);
            s += len;
        }
        free(code);
    }
    list_sort(&l);
    return l;
}

/* Fails listing up to 8 of the names in `bad` (count of them in all). */
static void report(const char *what, char **bad, int count)
{
    char msg[1024] = "";
    for (int i = 0; i < count && i < 8; i++) {
        strncat(msg, " ", sizeof msg - strlen(msg) - 1);
        strncat(msg, bad[i], sizeof msg - strlen(msg) - 1);
    }
    ck_assert_msg(count == 0, "%d %s:%s%s", count, what, msg, count > 8 ? " ..." : "");
}

START_TEST(headers_declare_the_public_functions)
{
    name_list decl = declared_functions();
    /* The parser finds the API, so the tests below compare against it. */
    ck_assert_int_gt(decl.count, 150);
    ck_assert(list_has(&decl, "tg_matmul"));
    ck_assert(list_has(&decl, "tg_safetensors_load_into"));
    ck_assert(!list_has(&decl, "tg_gradcheck_fn")); /* a function pointer type */
    list_free(&decl);
}
END_TEST

START_TEST(exports_only_public_tg_names)
{
    name_list exp = exported_symbols();
    ck_assert_int_gt(exp.count, 0);
    char **bad = malloc((size_t)exp.count * sizeof *bad);
    int nbad = 0;
    for (int i = 0; i < exp.count; i++)
        if (strncmp(exp.names[i], "tg_", 3) != 0 || strncmp(exp.names[i], "tg__", 4) == 0)
            bad[nbad++] = exp.names[i];
    report("exported symbols are not public tg_ names", bad, nbad);
    free(bad);
    list_free(&exp);
}
END_TEST

START_TEST(every_export_is_declared_in_a_public_header)
{
    name_list exp = exported_symbols(), decl = declared_functions();
    char **bad = malloc((size_t)exp.count * sizeof *bad);
    int nbad = 0;
    for (int i = 0; i < exp.count; i++)
        if (!list_has(&decl, exp.names[i]))
            bad[nbad++] = exp.names[i];
    report("exported symbols are in no public header", bad, nbad);
    free(bad);
    list_free(&exp);
    list_free(&decl);
}
END_TEST

START_TEST(every_public_function_is_exported)
{
    name_list exp = exported_symbols(), decl = declared_functions();
    char **bad = malloc((size_t)decl.count * sizeof *bad);
    int nbad = 0;
    for (int i = 0; i < decl.count; i++)
        if (!list_has(&exp, decl.names[i]))
            bad[nbad++] = decl.names[i];
    report("public functions are not exported (missing TG_API?)", bad, nbad);
    free(bad);
    list_free(&exp);
    list_free(&decl);
}
END_TEST

int main(int argc, char **argv)
{
    nm_path = getenv("TG_NM");
    lib_path = getenv("TG_SHARED_LIB");
    header_paths = argv + 1;
    n_headers = argc - 1;
    Suite *s = suite_create("exports");
    TCase *tc = tcase_checked("exports");
    tcase_add_test(tc, headers_declare_the_public_functions);
    tcase_add_test(tc, exports_only_public_tg_names);
    tcase_add_test(tc, every_export_is_declared_in_a_public_header);
    tcase_add_test(tc, every_public_function_is_exported);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
