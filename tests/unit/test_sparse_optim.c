/* test_sparse_optim — every sparse optimizer of a table part (SGD, Momentum
 * and Nesterov, Adagrad, LazyAdam, RMSProp, FTRL at two learning-rate powers)
 * runs several steps, each pushing a different subset of rows at a different
 * learning rate (never the config's), against a double-precision reference
 * kept per row: the whole record (t, values, slots) is compared through export
 * after every step, and a row outside the step's push keeps its record bit for
 * bit, so an untouched row's Adam moments do not decay and an untouched Adagrad
 * row does not move. Push-pull returns the updated rows.
 */
#include "sparse_table_fixture.h"

/* ---- optimizers against a double reference ---- */

#define OPT_ROWS 9 /* row 8 is pulled once and never pushed */
#define OPT_STEPS 7
#define OPT_MAXDIM 32

typedef struct ref_row {
    double w[OPT_MAXDIM], s0[OPT_MAXDIM], s1[OPT_MAXDIM];
    int64_t t;
} ref_row_t;

/* The sparse update of one row in double (sparse_table.h, optim.h). */
static void ref_apply(const psc_optim_config_t *c, double lr, ref_row_t *r, const float *gf, int dim)
{
    r->t++;
    double mom = c->momentum;
    for (int e = 0; e < dim; e++) {
        double g = gf[e], *w = &r->w[e], *s0 = &r->s0[e], *s1 = &r->s1[e];
        switch (c->kind) {
        case PSC_OPT_SGD: *w -= lr * g; break;
        case PSC_OPT_MOMENTUM:
            *s0 = mom * *s0 + g;
            *w -= c->use_nesterov ? lr * g + lr * mom * *s0 : lr * *s0;
            break;
        case PSC_OPT_ADAGRAD:
            *s0 += g * g;
            *w -= lr * g / sqrt(*s0);
            break;
        case PSC_OPT_ADAM: { /* LazyAdam: the row's own t */
            double b1 = c->beta1, b2 = c->beta2;
            double lr_t = lr * sqrt(1 - pow(b2, (double)r->t)) / (1 - pow(b1, (double)r->t));
            *s0 = b1 * *s0 + (1 - b1) * g;
            *s1 = b2 * *s1 + (1 - b2) * g * g;
            *w -= lr_t * *s0 / (sqrt(*s1) + (double)c->epsilon);
            break;
        }
        case PSC_OPT_RMSPROP:
            *s0 = c->decay * *s0 + (1 - (double)c->decay) * g * g;
            *s1 = mom * *s1 + lr * g / sqrt(*s0 + (double)c->epsilon);
            *w -= *s1;
            break;
        case PSC_OPT_FTRL: {
            double p = -(double)c->learning_rate_power, na = *s0 + g * g;
            *s1 += g - (pow(na, p) - pow(*s0, p)) / lr * *w;
            double quad = pow(na, p) / lr + 2 * (double)c->l2;
            *w = fabs(*s1) > c->l1 ? ((*s1 > 0 ? c->l1 : -c->l1) - *s1) / quad : 0.0;
            *s0 = na;
            break;
        }
        }
    }
}

static float opt_grad(int k, int e, int s)
{
    static const double mag[] = {1e-3, 0.02, 0.3, 1.0, 3.0};
    double sign = ((k * 7 + e * 3 + s * 5) % 5) < 2 ? -1.0 : 1.0;
    return (float)(sign * mag[(k + e + s) % 5] * (1.0 + 0.1 * cos((double)(k * 13 + e * 5 + s))));
}

/* Rows of step s: differing subsets, every row 0..7 in some and out of some. */
static int opt_in_step(int k, int s)
{
    static const unsigned masks[OPT_STEPS] = {0xb5, 0x6b, 0xd6, 0x39, 0x8e, 0x55, 0xff};
    return k < 8 && (masks[s] >> k & 1);
}

static void expect_close(const char *what, int s, int k, int e, double got, double want)
{
    double tol = 2e-5 * (1.0 + fabs(want));
    if (!(fabs(got - want) <= tol))
        fail_msg("%s step %d row %d element %d: got %.9g, double reference %.9g", what, s, k, e, got, want);
}

/* Every record against the reference; rows outside step s as they were. */
static void opt_compare(const char *label, const psc_optim_config_t *c, int dim, int s, const int64_t *ids,
                        const ref_row_t *ref, const rows_t *before, const rows_t *after)
{
    int ns = optim_slot_count(c);
    assert_int_equal(after->n, OPT_ROWS);
    for (int k = 0; k < OPT_ROWS; k++) {
        const unsigned char *rec = rows_find(after, ids[k]), *old = before ? rows_find(before, ids[k]) : NULL;
        assert_non_null(rec);
        if (old && !opt_in_step(k, s)) {
            if (memcmp(rec, old, after->len) != 0) fail_msg("%s step %d: untouched row %d changed", label, s, k);
            continue;
        }
        assert_int_equal(rec_t(rec), ref[k].t);
        for (int e = 0; e < dim; e++) {
            expect_close(label, s, k, e, rec_float(rec, (size_t)e), ref[k].w[e]);
            if (ns >= 1) expect_close(label, s, k, e, rec_float(rec, (size_t)(dim + e)), ref[k].s0[e]);
            if (ns >= 2) expect_close(label, s, k, e, rec_float(rec, (size_t)(2 * dim + e)), ref[k].s1[e]);
        }
    }
}

static void check_sparse_optimizer(const psc_optim_config_t *opt, int dim, const char *label)
{
    sparse_table_cfg_t c = cfg_of(PSC_TABLE_MAX_ROWS, 1, 0, PSC_PART_MOD, dim, *opt);
    c.opt.learning_rate = 100.0f; /* the table must use the lr it is given */
    sparse_table_t *t = make(&c);
    int64_t ids[OPT_ROWS];
    ref_row_t ref[OPT_ROWS];
    for (int k = 0; k < OPT_ROWS; k++) ids[k] = 1000 + (int64_t)k * 1234567891;
    float vals[OPT_ROWS * OPT_MAXDIM], init[OPT_MAXDIM], slot0[OPT_MAXDIM], slot1[OPT_MAXDIM];
    pull(t, ids, OPT_ROWS, vals);
    optim_init_slots(opt, slot0, slot1, (size_t)dim);
    for (int k = 0; k < OPT_ROWS; k++) {
        init_row(&c, ids[k], init);
        assert_memory_equal(vals + k * dim, init, 4 * (size_t)dim);
        ref[k].t = 0;
        for (int e = 0; e < dim; e++) {
            ref[k].w[e] = init[e];
            ref[k].s0[e] = slot0[e];
            ref[k].s1[e] = slot1[e];
        }
    }
    rows_t before = export_rows(t, 0, 1, NULL);
    opt_compare(label, opt, dim, 0, ids, ref, NULL, &before);
    for (int s = 0; s < OPT_STEPS; s++) {
        double lr = 0.05 * (1.0 + 0.25 * s);
        int64_t pids[OPT_ROWS];
        float g[OPT_ROWS * OPT_MAXDIM], out[OPT_ROWS * OPT_MAXDIM];
        int n = 0;
        for (int k = OPT_ROWS - 1; k >= 0; k--) { /* descending: the push's order is not the table's */
            if (!opt_in_step(k, s)) continue;
            pids[n] = ids[k];
            for (int e = 0; e < dim; e++) g[n * dim + e] = opt_grad(k, e, s);
            ref_apply(opt, (double)(float)lr, &ref[k], g + n * dim, dim);
            n++;
        }
        push(t, pids, (size_t)n, g, lr, s % 2 ? NULL : out);
        rows_t after = export_rows(t, 0, 1, NULL);
        opt_compare(label, opt, dim, s, ids, ref, &before, &after);
        if (s % 2 == 0) /* push-pull: the updated rows, in the push's order */
            for (int i = 0; i < n; i++) {
                const unsigned char *rec = rows_find(&after, pids[i]);
                for (int e = 0; e < dim; e++) assert_true(out[i * dim + e] == rec_float(rec, (size_t)e));
            }
        rows_free(&before);
        before = after;
    }
    rows_free(&before);
    sparse_table_stats_t st;
    sparse_table_get_stats(t, &st);
    assert_int_equal(st.version, OPT_STEPS);
    assert_int_equal(st.rows, OPT_ROWS);
    sparse_table_destroy(t);
}

static void test_sparse_optimizers(void **state)
{
    (void)state;
    const psc_optim_config_t cfgs[] = {
        {.kind = PSC_OPT_SGD},
        {.kind = PSC_OPT_MOMENTUM, .momentum = 0.9f},
        {.kind = PSC_OPT_MOMENTUM, .momentum = 0.9f, .use_nesterov = 1},
        {.kind = PSC_OPT_ADAGRAD, .initial_accumulator_value = 0.1f},
        {.kind = PSC_OPT_ADAM, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f},
        {.kind = PSC_OPT_RMSPROP, .decay = 0.9f, .momentum = 0.5f, .epsilon = 1e-10f},
        {.kind = PSC_OPT_FTRL,
         .learning_rate_power = -0.5f,
         .initial_accumulator_value = 0.1f,
         .l1 = 0.05f,
         .l2 = 0.01f},
        {.kind = PSC_OPT_FTRL,
         .learning_rate_power = -0.7f,
         .initial_accumulator_value = 0.1f,
         .l1 = 0.05f,
         .l2 = 0.01f},
    };
    const char *labels[] = {"sgd", "momentum", "nesterov", "adagrad", "lazy adam", "rmsprop", "ftrl -0.5", "ftrl -0.7"};
    const int dims[] = {5, 20, 32}; /* the row loops' tail, middle and head */
    for (size_t k = 0; k < PSC_ARRAY_LEN(cfgs); k++)
        for (size_t d = 0; d < PSC_ARRAY_LEN(dims); d++) check_sparse_optimizer(&cfgs[k], dims[d], labels[k]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sparse_optimizers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
