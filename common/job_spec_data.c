/* job_spec_data.c — the job spec's "data" section (see job_spec.h and
 * docs/job-spec.md): the format, the files, how replicas shard them, the bad-record
 * limit and the features; and, at a task's start, the check that the files of
 * a criteo, libsvm or tfrecord data set can be read.
 *
 * Design: data.format picks one of two shapes. idx (the default) keeps the
 * IDX prefixes of data.train/data.test and takes none of the other formats'
 * keys. criteo, libsvm and tfrecord take data.train (required) and data.test
 * (absent: the chief does not evaluate) as a file name or glob(3) pattern or
 * an array of them, and data.shard and data.bad_record_limit; their features
 * are fixed for criteo (label, I1..I13 dense with log1p, C1..C26 categorical)
 * and libsvm (label, "features": one variable-length categorical feature of
 * the row's indices) and declared by data.features for tfrecord. Every
 * feature then gets its place: dense features their first column in the
 * (n, num_dense) dense input in feature order, categorical ones their index
 * among the categorical features. data.follow (online training,
 * docs/online-training.md) makes data.train one followed directory or
 * last-component pattern: it turns shuffle off and refuses record sharding,
 * train_examples and (jspec_check_follow, once "epochs" is parsed) epochs
 * other than 1; data.test_files sizes a rolling data.test directory.
 *
 * Invariants after a parse: exactly one feature has role label (length 1,
 * int64 or float); dense features are float or int64 with length >= 1;
 * categorical features are int64 or bytes; names are unique; dense_offset is
 * -1 except for dense features and cat_index -1 except for categorical ones.
 */
#include "job_spec_internal.h"

#include "psc.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILES 256         /* patterns per data set */
#define MAX_FILE_NAME 511     /* characters per pattern */
#define MAX_FEATURE_LEN 65536 /* values of one fixed-length feature */

/* ---- idx ---- */

static int get_path(const jspec_ctx_t *c, const json_t *obj, const char *key, char *dst, size_t dstlen)
{
    const char *s = NULL;
    char p[64];
    int rc = jspec_get_string(c, obj, key, "data", 0, &s);
    if (rc || !s) return rc;
    jspec_join(p, sizeof p, "data", key);
    if (!*s) return jspec_fail(c, p, "expected a non-empty path");
    if (strlen(s) >= dstlen) return jspec_fail(c, p, "path too long (%zu bytes, max %zu)", strlen(s), dstlen - 1);
    snprintf(dst, dstlen, "%s", s);
    return 0;
}

/* The keys that only the record formats take. */
static int refuse_record_keys(const jspec_ctx_t *c, const json_t *o)
{
    static const char *const keys[] = {"shard", "bad_record_limit", "features", "follow", "test_files"};
    for (size_t i = 0; i < PSC_ARRAY_LEN(keys); i++) {
        if (!json_object_get(o, keys[i])) continue;
        char p[64];
        jspec_join(p, sizeof p, "data", keys[i]);
        return jspec_fail(c, p, "applies to data.format criteo, libsvm and tfrecord, not idx");
    }
    return 0;
}

/* ---- criteo, libsvm, tfrecord: files ---- */

/* data.<key>: a file name or pattern, or an array of 1..MAX_FILES of them, into
 * a new array (*files, *n); absent: *n = 0. */
static int get_files(const jspec_ctx_t *c, const json_t *o, const char *key, char ***files, int *n)
{
    char p[64], e[80], got[64];
    jspec_join(p, sizeof p, "data", key);
    const json_t *v = json_object_get(o, key);
    *files = NULL;
    *n = 0;
    if (!v) return 0;
    int single = json_is_string(v);
    if (!single && (!json_is_array(v) || json_array_size(v) < 1 || json_array_size(v) > MAX_FILES))
        return jspec_fail(c, p, "expected a file name or glob pattern, or an array of 1 to %d of them, got %s",
                          MAX_FILES, jspec_show(v, got, sizeof got));
    int count = single ? 1 : (int)json_array_size(v);
    for (int i = 0; i < count; i++) {
        const json_t *x = single ? v : json_array_get(v, (size_t)i);
        if (single)
            snprintf(e, sizeof e, "%s", p);
        else
            snprintf(e, sizeof e, "%s[%d]", p, i);
        if (!json_is_string(x) || json_string_length(x) < 1 || json_string_length(x) > MAX_FILE_NAME ||
            strlen(json_string_value(x)) != json_string_length(x))
            return jspec_fail(c, e, "expected a file name or glob pattern of 1 to %d characters, got %s", MAX_FILE_NAME,
                              jspec_show(x, got, sizeof got));
    }
    *files = psc_xcalloc((size_t)count, sizeof **files);
    for (int i = 0; i < count; i++) {
        const char *name = json_string_value(single ? v : json_array_get(v, (size_t)i));
        size_t len = strlen(name) + 1;
        (*files)[i] = psc_xmalloc(len);
        memcpy((*files)[i], name, len);
    }
    *n = count;
    return 0;
}

/* ---- features ---- */

static void set_feature(psc_feature_spec_t *F, const char *name, enum psc_feature_role role, enum psc_feature_kind kind,
                        int length, enum psc_dense_transform tr)
{
    memset(F, 0, sizeof *F);
    snprintf(F->name, sizeof F->name, "%s", name);
    F->role = role;
    F->kind = kind;
    F->length = length;
    F->transform = tr;
}

/* Criteo's and LIBSVM's own features (docs/recommendation.md). */
static void builtin_features(psc_job_spec_t *s)
{
    char name[16];
    if (s->data_format == PSC_DATA_CRITEO) {
        s->num_features = 1 + 13 + 26;
        s->features = psc_xcalloc((size_t)s->num_features, sizeof *s->features);
        set_feature(&s->features[0], "label", PSC_FEATURE_LABEL, PSC_FEATURE_INT64, 1, PSC_TRANSFORM_NONE);
        for (int i = 0; i < 13; i++) {
            snprintf(name, sizeof name, "I%d", i + 1);
            set_feature(&s->features[1 + i], name, PSC_FEATURE_DENSE, PSC_FEATURE_INT64, 1, PSC_TRANSFORM_LOG1P);
        }
        for (int i = 0; i < 26; i++) {
            snprintf(name, sizeof name, "C%d", i + 1);
            set_feature(&s->features[14 + i], name, PSC_FEATURE_CATEGORICAL, PSC_FEATURE_INT64, 1, PSC_TRANSFORM_NONE);
        }
    } else { /* libsvm */
        s->num_features = 2;
        s->features = psc_xcalloc(2, sizeof *s->features);
        set_feature(&s->features[0], "label", PSC_FEATURE_LABEL, PSC_FEATURE_FLOAT, 1, PSC_TRANSFORM_NONE);
        set_feature(&s->features[1], "features", PSC_FEATURE_CATEGORICAL, PSC_FEATURE_INT64, 0, PSC_TRANSFORM_NONE);
    }
}

/* A feature name: 1..63 characters, none a control character. */
static int valid_feature_name(const char *n, size_t len)
{
    if (len < 1 || len > 63 || strlen(n) != len) return 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)n[i] < 0x20 || n[i] == 0x7f) return 0;
    return 1;
}

/* The rules of a feature's role (path: "data.features[i]"). */
static int check_feature_role(const jspec_ctx_t *c, const char *path, const psc_feature_spec_t *F, int has_transform)
{
    char p[96];
    const char *kind = jspec_kind_names[F->kind];
    if (has_transform && F->role != PSC_FEATURE_DENSE) {
        jspec_join(p, sizeof p, path, "transform");
        return jspec_fail(c, p, "only a dense feature takes a transform; \"%s\" is %s", F->name,
                          jspec_role_names[F->role]);
    }
    switch (F->role) {
    case PSC_FEATURE_LABEL:
        jspec_join(p, sizeof p, path, "kind");
        if (F->kind == PSC_FEATURE_BYTES) return jspec_fail(c, p, "a label is int64 or float, got %s", kind);
        jspec_join(p, sizeof p, path, "length");
        if (F->length != 1) return jspec_fail(c, p, "a label has length 1, got %d", F->length);
        break;
    case PSC_FEATURE_DENSE:
        jspec_join(p, sizeof p, path, "kind");
        if (F->kind == PSC_FEATURE_BYTES) return jspec_fail(c, p, "a dense feature is float or int64, got %s", kind);
        jspec_join(p, sizeof p, path, "length");
        if (F->length < 1)
            return jspec_fail(c, p,
                              "a dense feature has a fixed length >= 1 (0, variable, is for categorical "
                              "features only)");
        break;
    case PSC_FEATURE_CATEGORICAL:
        jspec_join(p, sizeof p, path, "kind");
        if (F->kind == PSC_FEATURE_FLOAT)
            return jspec_fail(c, p, "a categorical feature is int64 or bytes, got %s", kind);
        break;
    }
    return 0;
}

/* data.features[i] into *F; names unique among features[0..i). */
static int parse_feature(const jspec_ctx_t *c, const json_t *fj, int i, const psc_feature_spec_t *before,
                         psc_feature_spec_t *F)
{
    static const char *const keys[] = {"name", "role", "kind", "length", "transform", NULL};
    char path[32], p[64], got[64];
    snprintf(path, sizeof path, "data.features[%d]", i);
    if (!json_is_object(fj)) return jspec_fail(c, path, "expected an object, got %s", jspec_show(fj, got, sizeof got));
    int rc, role = 0, kind = 0, tr = PSC_TRANSFORM_NONE;
    if ((rc = jspec_check_keys(c, fj, path, keys))) return rc;
    const char *name = NULL;
    if ((rc = jspec_get_string(c, fj, "name", path, 1, &name))) return rc;
    jspec_join(p, sizeof p, path, "name");
    if (!valid_feature_name(name, json_string_length(json_object_get(fj, "name"))))
        return jspec_fail(c, p, "expected 1 to 63 characters (no control characters), got %s",
                          jspec_show(json_object_get(fj, "name"), got, sizeof got));
    for (int j = 0; j < i; j++)
        if (strcmp(before[j].name, name) == 0)
            return jspec_fail(c, p, "\"%s\" is already the name of data.features[%d]", name, j);
    int64_t length = 1;
    if ((rc = jspec_get_enum(c, fj, "role", path, 1, jspec_role_names, 3, &role))) return rc;
    if ((rc = jspec_get_enum(c, fj, "kind", path, 1, jspec_kind_names, 3, &kind))) return rc;
    if ((rc = jspec_get_int(c, fj, "length", path, 0, 0, MAX_FEATURE_LEN, &length))) return rc;
    if ((rc = jspec_get_enum(c, fj, "transform", path, 0, jspec_transform_names, 2, &tr))) return rc;
    set_feature(F, name, (enum psc_feature_role)role, (enum psc_feature_kind)kind, (int)length,
                (enum psc_dense_transform)tr);
    return check_feature_role(c, path, F, json_object_get(fj, "transform") != NULL);
}

/* tfrecord's data.features: 1..PSC_MAX_FEATURES features, exactly one label. */
static int parse_features(const jspec_ctx_t *c, const json_t *o, psc_job_spec_t *s)
{
    char got[64];
    const json_t *arr = json_object_get(o, "features");
    if (!arr) return jspec_missing(c, "data.features");
    if (!json_is_array(arr) || json_array_size(arr) < 1 || json_array_size(arr) > PSC_MAX_FEATURES)
        return jspec_fail(c, "data.features", "expected an array of 1 to %d features, got %s", PSC_MAX_FEATURES,
                          jspec_show(arr, got, sizeof got));
    int n = (int)json_array_size(arr), label = -1, rc = 0;
    s->features = psc_xcalloc((size_t)n, sizeof *s->features);
    s->num_features = n;
    for (int i = 0; i < n && !rc; i++) {
        rc = parse_feature(c, json_array_get(arr, (size_t)i), i, s->features, &s->features[i]);
        if (rc || s->features[i].role != PSC_FEATURE_LABEL) continue;
        if (label >= 0) {
            char p[48];
            snprintf(p, sizeof p, "data.features[%d].role", i);
            rc = jspec_fail(c, p,
                            "a second label (data.features[%d] \"%s\" is one); exactly one feature has role "
                            "label",
                            label, s->features[label].name);
        }
        label = i;
    }
    if (!rc && label < 0) rc = jspec_fail(c, "data.features", "no feature has role label; exactly one must");
    return rc;
}

/* dense_offset, cat_index, num_dense, num_cat. */
static void place_features(psc_job_spec_t *s)
{
    s->num_dense = s->num_cat = 0;
    for (int i = 0; i < s->num_features; i++) {
        psc_feature_spec_t *F = &s->features[i];
        F->dense_offset = F->cat_index = -1;
        if (F->role == PSC_FEATURE_DENSE) {
            F->dense_offset = s->num_dense;
            s->num_dense += F->length; /* <= PSC_MAX_FEATURES * MAX_FEATURE_LEN */
        } else if (F->role == PSC_FEATURE_CATEGORICAL) {
            F->cat_index = s->num_cat++;
        }
    }
}

/* ---- data.follow: online training (docs/online-training.md) ---- */

#define FOLLOW_IDLE_MAX (366.0 * 86400) /* idle_secs: at most a year */
#define MAX_TEST_WINDOW 4096            /* data.test_files */

int psc_job_spec_follow_dir(const char *train, char *dir, size_t dirlen, const char **pattern)
{
    const char *slash = strrchr(train, '/');
    size_t n = strlen(train);
    *pattern = NULL;
    if (strpbrk(train, "*?[")) {
        size_t dlen = slash ? (size_t)(slash - train) : 0;
        for (size_t i = 0; i < dlen; i++) /* wildcards in the last component only */
            if (strchr("*?[", train[i])) return PSC_EINVAL;
        *pattern = slash ? slash + 1 : train;
        if (!**pattern) return PSC_EINVAL;
        n = dlen;
        if (slash && n == 0) {
            n = 1; /* "/x*": the root */
        } else if (!slash) {
            train = "."; /* "x*": the working directory */
            n = 1;
        }
    }
    while (n > 1 && train[n - 1] == '/') n--; /* "/logs/train/" is "/logs/train" */
    if (n == 0 || n >= dirlen) return PSC_EINVAL;
    memcpy(dir, train, n);
    dir[n] = '\0';
    return 0;
}

/* With data.follow: the keys it refuses or changes. */
static int follow_rules(const jspec_ctx_t *c, const json_t *o, psc_job_spec_t *s)
{
    char dir[512];
    const char *pattern;
    if (s->num_train_files != 1)
        return jspec_fail(c, "data.train",
                          "with data.follow, one directory or pattern (wildcards in its last component), not %d",
                          s->num_train_files);
    if (psc_job_spec_follow_dir(s->train_files[0], dir, sizeof dir, &pattern) != 0)
        return jspec_fail(c, "data.train",
                          "with data.follow, a directory or a pattern whose wildcards are in its last component "
                          "(\"/logs/train/part-*.tsv\"), got \"%s\"",
                          s->train_files[0]);
    if (s->shard == PSC_SHARD_RECORD)
        return jspec_fail(c, "data.shard",
                          "a followed directory is sharded by file (replica r of W takes files r, r+W, ... in name "
                          "order): \"record\" is not available with data.follow");
    if (json_object_get(o, "train_examples"))
        return jspec_fail(c, "data.train_examples",
                          "not with data.follow (a followed directory has no end to count "
                          "from; \"steps\" bounds the steps)");
    if (json_object_get(o, "shuffle") && s->shuffle)
        return jspec_fail(c, "data.shuffle",
                          "true is not available with data.follow: files are read in name order, so that a restarted "
                          "replica finds its place");
    s->shuffle = 0;
    return 0;
}

/* data.follow and data.test_files (defaults when absent). */
static int parse_follow(const jspec_ctx_t *c, const json_t *o, psc_job_spec_t *s)
{
    static const char *const keys[] = {"idle_secs", "poll_secs", NULL};
    static const jspec_range_t idle = {0, 1, FOLLOW_IDLE_MAX, 0}, poll = {0.05, 0, 60, 0};
    const json_t *f;
    int64_t window = 1;
    int rc;
    s->follow_idle_secs = 600;
    s->follow_poll_secs = 1;
    s->test_window = 1;
    if ((rc = jspec_get_object(c, o, "follow", "data", 0, &f))) return rc;
    if (!f) {
        if (json_object_get(o, "test_files"))
            return jspec_fail(c, "data.test_files", "applies with data.follow only (a rolling data.test directory)");
        return 0;
    }
    s->follow = 1;
    if ((rc = jspec_check_keys(c, f, "data.follow", keys))) return rc;
    if ((rc = jspec_get_number(c, f, "idle_secs", "data.follow", 0, idle, &s->follow_idle_secs))) return rc;
    if ((rc = jspec_get_number(c, f, "poll_secs", "data.follow", 0, poll, &s->follow_poll_secs))) return rc;
    if ((rc = jspec_get_int_in(c, o, "test_files", "data", 0, 1, MAX_TEST_WINDOW, &window))) return rc;
    s->test_window = (int)window;
    return follow_rules(c, o, s);
}

int jspec_check_follow(const jspec_ctx_t *c, const psc_job_spec_t *s)
{
    if (s->follow && s->epochs != 1)
        return jspec_fail(
            c, "epochs", "a followed directory is read once: epochs 1 (or absent) with data.follow, got %d", s->epochs);
    return 0;
}

/* ---- the section ---- */

static int parse_record_data(const jspec_ctx_t *c, const json_t *o, psc_job_spec_t *s)
{
    int rc, shard = PSC_SHARD_AUTO;
    /* the IDX prefixes are idx's alone */
    s->train_path[0] = s->test_path[0] = '\0';
    if (!json_object_get(o, "train")) return jspec_missing(c, "data.train");
    if ((rc = get_files(c, o, "train", &s->train_files, &s->num_train_files))) return rc;
    if ((rc = get_files(c, o, "test", &s->test_files, &s->num_test_files))) return rc;
    if ((rc = jspec_get_enum(c, o, "shard", "data", 0, jspec_shard_names, 3, &shard))) return rc;
    s->shard = (enum psc_data_shard)shard;
    if ((rc = jspec_get_int(c, o, "bad_record_limit", "data", 0, 0, INT64_MAX, &s->bad_record_limit))) return rc;
    if (s->data_format == PSC_DATA_TFRECORD) {
        if ((rc = parse_features(c, o, s))) return rc;
    } else {
        if (json_object_get(o, "features"))
            return jspec_fail(c, "data.features",
                              "only data.format tfrecord declares its features (%s's are fixed: see docs/recommendation.md)",
                              jspec_format_names[s->data_format]);
        builtin_features(s);
    }
    place_features(s);
    return 0;
}

int jspec_parse_data(const jspec_ctx_t *c, const json_t *o, psc_job_spec_t *s)
{
    static const char *const keys[] = {"format",           "train",          "test",          "shard",
                                       "bad_record_limit", "train_examples", "test_examples", "shuffle",
                                       "features",         "follow",         "test_files",    NULL};
    int rc, format = PSC_DATA_IDX;
    s->data_format = PSC_DATA_IDX;
    s->shard = PSC_SHARD_AUTO;
    s->bad_record_limit = 0;
    if (!o) return 0;
    if ((rc = jspec_check_keys(c, o, "data", keys))) return rc;
    if ((rc = jspec_get_enum(c, o, "format", "data", 0, jspec_format_names, 4, &format))) return rc;
    s->data_format = (enum psc_data_format)format;
    if (s->data_format == PSC_DATA_IDX) {
        if ((rc = refuse_record_keys(c, o))) return rc;
        if ((rc = get_path(c, o, "train", s->train_path, sizeof s->train_path))) return rc;
        if ((rc = get_path(c, o, "test", s->test_path, sizeof s->test_path))) return rc;
    } else if ((rc = parse_record_data(c, o, s))) {
        return rc;
    }
    if ((rc = jspec_get_int(c, o, "train_examples", "data", 0, 0, INT64_MAX, &s->train_examples))) return rc;
    if ((rc = jspec_get_int(c, o, "test_examples", "data", 0, 0, INT64_MAX, &s->test_examples))) return rc;
    if ((rc = jspec_get_bool(c, o, "shuffle", "data", &s->shuffle))) return rc;
    return s->data_format == PSC_DATA_IDX ? 0 : parse_follow(c, o, s);
}

/* ---- at a task's start: the files can be read ---- */

/* 0 when path is a readable file (not a directory), else an errno. */
static int file_unreadable(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) return errno ? errno : ENOENT;
    if (S_ISDIR(st.st_mode)) return EISDIR;
    if (access(path, R_OK) != 0) return errno ? errno : EACCES;
    return 0;
}

/* One pattern of data.<key>: a name without glob characters is the file
 * itself; a pattern must match at least one file; every file must be readable. */
static int check_pattern(const char *pfx, const char *key, const char *pattern, char *err, size_t errlen)
{
    int e;
    if (!strpbrk(pattern, "*?[")) {
        if ((e = file_unreadable(pattern)))
            return psc_seterr(err, errlen, PSC_ECONFIG, "%s%s: cannot read %s: %s", pfx, key, pattern, strerror(e));
        return 0;
    }
    glob_t g;
    memset(&g, 0, sizeof g);
    int grc = glob(pattern, 0, NULL, &g), rc = 0;
    if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0))
        rc = psc_seterr(err, errlen, PSC_ECONFIG, "%s%s: no file matches %s", pfx, key, pattern);
    else if (grc != 0)
        rc = psc_seterr(err, errlen, PSC_ECONFIG, "%s%s: cannot expand %s: %s", pfx, key, pattern,
                        grc == GLOB_NOSPACE ? "out of memory" : "a directory could not be read");
    for (size_t i = 0; !rc && grc == 0 && i < g.gl_pathc; i++)
        if ((e = file_unreadable(g.gl_pathv[i])))
            rc = psc_seterr(err, errlen, PSC_ECONFIG, "%s%s: cannot read %s: %s", pfx, key, g.gl_pathv[i], strerror(e));
    globfree(&g);
    return rc;
}

/* 0 when path is a directory that can be listed, else an errno. */
static int dir_unlistable(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) return errno ? errno : ENOENT;
    if (!S_ISDIR(st.st_mode)) return ENOTDIR;
    if (access(path, R_OK | X_OK) != 0) return errno ? errno : EACCES;
    return 0;
}

/* data.follow: the followed directory is there (its files may come later). */
static int check_followed(const char *pfx, const psc_job_spec_t *s, char *err, size_t errlen)
{
    char dir[512];
    const char *pattern;
    if (psc_job_spec_follow_dir(s->train_files[0], dir, sizeof dir, &pattern) != 0)
        return psc_seterr(err, errlen, PSC_ECONFIG, "%sdata.train: cannot follow \"%s\"", pfx, s->train_files[0]);
    int e = dir_unlistable(dir);
    if (e)
        return psc_seterr(err, errlen, PSC_ECONFIG, "%sdata.train: cannot follow directory %s: %s", pfx, dir,
                          strerror(e));
    return 0;
}

int jspec_check_data_files(const char *pfx, const psc_job_spec_t *s, int train, int test, char *err, size_t errlen)
{
    int rc;
    if (train && s->follow && s->num_train_files == 1) {
        if ((rc = check_followed(pfx, s, err, errlen))) return rc;
        train = 0;
    }
    for (int i = 0; train && i < s->num_train_files; i++)
        if ((rc = check_pattern(pfx, "data.train", s->train_files[i], err, errlen))) return rc;
    for (int i = 0; test && i < s->num_test_files; i++) {
        if (s->follow && dir_unlistable(s->test_files[i]) == 0) continue; /* a rolling directory: files come later */
        if ((rc = check_pattern(pfx, "data.test", s->test_files[i], err, errlen))) return rc;
    }
    return 0;
}
