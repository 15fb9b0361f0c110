/* test_job_spec_tables — the job spec's FTRL, learning-rate schedules and
 * sparse tables: defaults, every refusal naming its key (table names against
 * the model's variables included), the fuzz seeds that use them, and the job
 * id: unchanged for specs without them, changed by each of their settings.
 * The shared helpers are job_spec_fixture.h.
 */
#include "job_spec_fixture.h"

/* ---- optimizer ftrl, schedules, tables ---- */

/* The job id of a spec that must parse (a static copy). */
/* The job id of a spec (legacy: the id psc gave it before the id left out
 * the placement and the partition strategies). */
static const char *id_of(const char *json, int legacy)
{
    static char id[4][17];
    static int next;
    psc_job_spec_t s;
    parse_ok(json, &s);
    char *out = id[next++ % 4];
    memcpy(out, legacy ? s.legacy_job_id : s.job_id, sizeof id[0]);
    psc_job_spec_deinit(&s);
    return out;
}

static const char *job_id_of(const char *json) { return id_of(json, 0); }

static void test_ftrl(void **state)
{
    (void)state;
    char buf[1024];
    psc_job_spec_t s;
    parse_ok(spec3(buf, sizeof buf, MLP, "\"name\": \"ftrl\"", ""), &s);
    assert_int_equal(s.optimizer.kind, PSC_OPT_FTRL);
    assert_true(s.optimizer.learning_rate == 0.001f);
    assert_true(s.optimizer.learning_rate_power == -0.5f);
    assert_true(s.optimizer.initial_accumulator_value == 0.1f);
    assert_true(s.optimizer.l1 == 0.0f && s.optimizer.l2 == 0.0f);
    assert_true(s.optimizer.momentum == 0.0f && s.optimizer.beta1 == 0.0f && s.optimizer.epsilon == 0.0f);
    assert_int_equal(s.optimizer.schedule.kind, PSC_LR_CONSTANT);
    psc_job_spec_deinit(&s);

    parse_ok(spec3(buf, sizeof buf, MLP,
                   "\"name\": \"ftrl\", \"learning_rate\": 0.05, \"learning_rate_power\": 0, "
                   "\"l1_regularization_strength\": 0.001, \"l2_regularization_strength\": 0.5, "
                   "\"initial_accumulator_value\": 1",
                   ""),
             &s);
    assert_true(s.optimizer.learning_rate == 0.05f);
    assert_true(s.optimizer.learning_rate_power == 0.0f);
    assert_true(s.optimizer.l1 == 0.001f);
    assert_true(s.optimizer.l2 == 0.5f);
    assert_true(s.optimizer.initial_accumulator_value == 1.0f);
    psc_job_spec_deinit(&s);
    assert_string_equal(psc_optim_name(PSC_OPT_FTRL), "ftrl");
    assert_string_equal(psc_optim_name((enum psc_optim_kind)99), "unknown");

    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"ftrl\", \"learning_rate_power\": 0.5", ""),
                 "optimizer.learning_rate_power: expected a number <= 0, got 0.5");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"ftrl\", \"l1_regularization_strength\": -1", ""),
                 "optimizer.l1_regularization_strength: expected a number >= 0");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"ftrl\", \"l2_regularization_strength\": \"x\"", ""),
                 "optimizer.l2_regularization_strength: expected a number >= 0");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"ftrl\", \"initial_accumulator_value\": 0", ""),
                 "optimizer.initial_accumulator_value: expected a number > 0");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"ftrl\", \"epsilon\": 0.1", ""),
                 "optimizer.epsilon: not a parameter of ftrl");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"ftrl\", \"l1\": 0.1", ""), "optimizer.l1: unknown key");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adagrad\", \"learning_rate_power\": -0.5", ""),
                 "optimizer.learning_rate_power: not a parameter of adagrad");
}

/* "schedule": {"name": ...} inside the optimizer: *s gets it. */
static void parse_schedule_ok(const char *sched, psc_job_spec_t *s)
{
    char opt[512], buf[1024];
    snprintf(opt, sizeof opt, "\"name\": \"sgd\", \"learning_rate\": 0.5, \"schedule\": %s", sched);
    parse_ok(spec3(buf, sizeof buf, MLP, opt, ""), s);
}

static void expect_schedule_error(int line, const char *sched, const char *want)
{
    char opt[1024], buf[2048];
    snprintf(opt, sizeof opt, "\"name\": \"adam\", \"schedule\": %s", sched);
    expect_error_at(line, spec3(buf, sizeof buf, MLP, opt, ""), want);
}
#define expect_sched_error(sched, want) expect_schedule_error(__LINE__, sched, want)

static void test_schedules(void **state)
{
    (void)state;
    psc_job_spec_t s;
    char buf[1024];
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, ""), &s);
    assert_int_equal(s.optimizer.schedule.kind, PSC_LR_CONSTANT);
    psc_job_spec_deinit(&s);
    parse_schedule_ok("{\"name\": \"constant\"}", &s);
    assert_int_equal(s.optimizer.schedule.kind, PSC_LR_CONSTANT);
    psc_job_spec_deinit(&s);

    parse_schedule_ok("{\"name\": \"exponential_decay\", \"decay_steps\": 1000, \"decay_rate\": 0.96}", &s);
    const psc_lr_schedule_t *sc = &s.optimizer.schedule;
    assert_int_equal(sc->kind, PSC_LR_EXPONENTIAL);
    assert_int_equal(sc->decay_steps, 1000);
    assert_true(sc->decay_rate == 0.96f);
    assert_int_equal(sc->staircase, 0);
    psc_job_spec_deinit(&s);
    parse_schedule_ok("{\"name\": \"exponential_decay\", \"decay_steps\": 5, \"decay_rate\": 2, \"staircase\": true}",
                      &s);
    assert_int_equal(s.optimizer.schedule.staircase, 1);
    assert_true(s.optimizer.schedule.decay_rate == 2.0f);
    psc_job_spec_deinit(&s);

    parse_schedule_ok("{\"name\": \"piecewise_constant\", \"boundaries\": [0, 100, 200], \"values\": [1, 0.5, 0.1, "
                      "0.01]}",
                      &s);
    sc = &s.optimizer.schedule;
    assert_int_equal(sc->kind, PSC_LR_PIECEWISE);
    assert_int_equal(sc->nboundaries, 3);
    assert_int_equal(sc->boundaries[0], 0);
    assert_int_equal(sc->boundaries[2], 200);
    assert_true(sc->values[0] == 1.0f && sc->values[1] == 0.5f && sc->values[3] == 0.01f);
    psc_job_spec_deinit(&s);

    parse_schedule_ok("{\"name\": \"cosine_decay\", \"decay_steps\": 10000}", &s);
    sc = &s.optimizer.schedule;
    assert_int_equal(sc->kind, PSC_LR_COSINE);
    assert_int_equal(sc->decay_steps, 10000);
    assert_true(sc->alpha == 0.0f && sc->warmup_target == 0.0f);
    assert_int_equal(sc->warmup_steps, 0);
    psc_job_spec_deinit(&s);
    parse_schedule_ok("{\"name\": \"cosine_decay\", \"decay_steps\": 10, \"alpha\": 1, \"warmup_steps\": 5, "
                      "\"warmup_target\": 2.5}",
                      &s);
    sc = &s.optimizer.schedule;
    assert_true(sc->alpha == 1.0f && sc->warmup_target == 2.5f);
    assert_int_equal(sc->warmup_steps, 5);
    psc_job_spec_deinit(&s);

    expect_sched_error("3", "optimizer.schedule: expected an object, got 3");
    expect_sched_error("{}", "optimizer.schedule.name: missing");
    expect_sched_error("{\"name\": \"linear\"}", "optimizer.schedule.name: unknown value \"linear\"");
    expect_sched_error("{\"name\": \"constant\", \"decay_steps\": 10}", "optimizer.schedule.decay_steps: unknown key");
    expect_sched_error("{\"name\": \"exponential_decay\", \"decay_rate\": 0.5}",
                       "optimizer.schedule.decay_steps: missing");
    expect_sched_error("{\"name\": \"exponential_decay\", \"decay_steps\": 10}",
                       "optimizer.schedule.decay_rate: missing");
    expect_sched_error("{\"name\": \"exponential_decay\", \"decay_steps\": 0, \"decay_rate\": 0.5}",
                       "optimizer.schedule.decay_steps: expected a positive integer");
    expect_sched_error("{\"name\": \"exponential_decay\", \"decay_steps\": 10, \"decay_rate\": 0}",
                       "optimizer.schedule.decay_rate: expected a number > 0");
    expect_sched_error("{\"name\": \"exponential_decay\", \"decay_steps\": 10, \"decay_rate\": 0.5, \"staircase\": 1}",
                       "optimizer.schedule.staircase: expected true or false");
    expect_sched_error("{\"name\": \"exponential_decay\", \"decay_steps\": 10, \"decay_rate\": 0.5, \"alpha\": 0}",
                       "optimizer.schedule.alpha: unknown key");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"values\": [1]}", "optimizer.schedule.boundaries: missing");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [], \"values\": [1]}",
                       "optimizer.schedule.boundaries: expected an array of 1 to 16 non-negative integers");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],"
                       " \"values\": [1]}",
                       "optimizer.schedule.boundaries: expected an array of 1 to 16");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [5, -1], \"values\": [1, 1, 1]}",
                       "optimizer.schedule.boundaries[1]: expected a non-negative integer, got -1");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [1.5], \"values\": [1, 1]}",
                       "optimizer.schedule.boundaries[0]: expected a non-negative integer, got 1.5");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [10, 10], \"values\": [1, 1, 1]}",
                       "optimizer.schedule.boundaries[1]: 10 is not greater than the boundary before it (10)");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [10, 20]}",
                       "optimizer.schedule.values: missing");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [10, 20], \"values\": [1, 0.5]}",
                       "optimizer.schedule.values: expected an array of 3 numbers > 0 (one more than boundaries)");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [10, 20], \"values\": [1, 0, 1]}",
                       "optimizer.schedule.values[1]: expected a number > 0");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [10], \"values\": [1, \"x\"]}",
                       "optimizer.schedule.values[1]: expected a number > 0");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [10], \"values\": [1e39, 1]}",
                       "optimizer.schedule.values[0]: expected a number > 0 that fits a float32");
    expect_sched_error("{\"name\": \"cosine_decay\"}", "optimizer.schedule.decay_steps: missing");
    expect_sched_error("{\"name\": \"cosine_decay\", \"decay_steps\": 10, \"alpha\": 1.5}",
                       "optimizer.schedule.alpha: expected a number in [0, 1]");
    expect_sched_error("{\"name\": \"cosine_decay\", \"decay_steps\": 10, \"alpha\": -0.1}",
                       "optimizer.schedule.alpha: expected a number in [0, 1]");
    expect_sched_error("{\"name\": \"cosine_decay\", \"decay_steps\": 10, \"warmup_steps\": -1}",
                       "optimizer.schedule.warmup_steps: expected a non-negative integer");
    expect_sched_error("{\"name\": \"cosine_decay\", \"decay_steps\": 10, \"warmup_target\": -1}",
                       "optimizer.schedule.warmup_target: expected a number >= 0");
    expect_sched_error("{\"name\": \"cosine_decay\", \"decay_steps\": 10, \"staircase\": true}",
                       "optimizer.schedule.staircase: unknown key");
}

/* A spec with the MLP (variables global_step, dense/kernel, dense/bias) and these tables. */
static const char *tables_spec(char *buf, size_t n, const char *tables)
{
    char extra[4096];
    snprintf(extra, sizeof extra, "\"tables\": [%s]", tables);
    return spec3(buf, n, MLP, ADAM, extra);
}
#define T_EMB "{\"name\": \"emb\", \"rows\": 1000, \"dim\": 8}"

static void test_tables(void **state)
{
    (void)state;
    char buf[8192];
    psc_job_spec_t s;
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, ""), &s);
    assert_null(s.tables);
    assert_int_equal(s.num_tables, 0);
    psc_job_spec_deinit(&s);

    parse_ok(tables_spec(buf, sizeof buf,
                         T_EMB ", {\"name\": \"user/emb.v2-x\", \"rows\": 1099511627776, \"dim\": 4096, "
                               "\"initializer\": {\"name\": \"normal\", \"mean\": 0.5, \"stddev\": 0.01}, "
                               "\"partition_strategy\": \"div\", \"optimizer\": {\"name\": \"ftrl\", "
                               "\"l1_regularization_strength\": 0.1, \"schedule\": {\"name\": \"cosine_decay\", "
                               "\"decay_steps\": 100}}}, "
                               "{\"name\": \"z\", \"rows\": 1, \"dim\": 1, \"initializer\": {\"name\": \"zeros\"}}, "
                               "{\"name\": \"u\", \"rows\": 5, \"dim\": 2, \"initializer\": {\"name\": \"uniform\", "
                               "\"minval\": -1, \"maxval\": 2}}"),
             &s);
    assert_int_equal(s.num_tables, 4);
    const psc_table_spec_t *T = s.tables;
    assert_string_equal(T[0].name, "emb");
    assert_int_equal(T[0].rows, 1000);
    assert_int_equal(T[0].dim, 8);
    assert_int_equal(T[0].init.kind, PSC_INIT_UNIFORM);
    assert_true(T[0].init.a == -0.05f && T[0].init.b == 0.05f);
    assert_int_equal(T[0].partition, PSC_PART_MOD);
    assert_int_equal(T[0].own_optimizer, 0);
    assert_memory_equal(&T[0].optimizer, &s.optimizer, sizeof s.optimizer); /* a copy of the job's */
    assert_string_equal(T[1].name, "user/emb.v2-x");
    assert_int_equal(T[1].rows, (int64_t)1 << 40);
    assert_int_equal(T[1].dim, 4096);
    assert_int_equal(T[1].init.kind, PSC_INIT_NORMAL);
    assert_true(T[1].init.a == 0.5f && T[1].init.b == 0.01f);
    assert_int_equal(T[1].partition, PSC_PART_DIV);
    assert_int_equal(T[1].own_optimizer, 1);
    assert_int_equal(T[1].optimizer.kind, PSC_OPT_FTRL);
    assert_true(T[1].optimizer.l1 == 0.1f && T[1].optimizer.learning_rate_power == -0.5f);
    assert_true(T[1].optimizer.learning_rate == 0.001f);
    assert_int_equal(T[1].optimizer.schedule.kind, PSC_LR_COSINE);
    assert_int_equal(s.optimizer.kind, PSC_OPT_ADAM); /* the job's own is untouched */
    assert_int_equal(T[2].init.kind, PSC_INIT_ZEROS);
    assert_true(T[3].init.a == -1.0f && T[3].init.b == 2.0f);
    psc_job_spec_deinit(&s);
    assert_spec_empty(&s);

    /* normal's defaults; an empty list is no tables */
    parse_ok(tables_spec(buf, sizeof buf,
                         "{\"name\": \"n\", \"rows\": 3, \"dim\": 3, \"initializer\": {\"name\": "
                         "\"normal\"}}"),
             &s);
    assert_true(s.tables[0].init.a == 0.0f && s.tables[0].init.b == 0.05f);
    psc_job_spec_deinit(&s);
    parse_ok(tables_spec(buf, sizeof buf, ""), &s);
    assert_null(s.tables);
    psc_job_spec_deinit(&s);

    /* 64 tables are fine, 65 are not */
    char many[8192] = "";
    for (int i = 0; i < 65; i++) {
        size_t l = strlen(many);
        snprintf(many + l, sizeof many - l, "%s{\"name\": \"t%d\", \"rows\": 10, \"dim\": 2}", i ? ", " : "", i);
        if (i == 63) {
            parse_ok(tables_spec(buf, sizeof buf, many), &s);
            assert_int_equal(s.num_tables, 64);
            assert_string_equal(s.tables[63].name, "t63");
            psc_job_spec_deinit(&s);
        }
    }
    expect_error(tables_spec(buf, sizeof buf, many), "tables: expected an array of at most 64 tables");
}

static void test_table_errors(void **state)
{
    (void)state;
    char buf[8192]; /* room for the 4096-byte tables member and the rest */
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"tables\": {}"), "tables: expected an array");
    expect_error(tables_spec(buf, sizeof buf, "3"), "tables[0]: expected an object, got 3");
    expect_error(tables_spec(buf, sizeof buf, T_EMB ", {\"name\": \"e2\", \"rows\": 1, \"dim\": 1, \"size\": 3}"),
                 "tables[1].size: unknown key");
    expect_error(tables_spec(buf, sizeof buf, "{\"rows\": 10, \"dim\": 2}"), "tables[0].name: missing");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": 5, \"rows\": 10, \"dim\": 2}"),
                 "tables[0].name: expected a string");
    static const char *const bad_names[] = {
        "", "a b", "/emb", "emb/", "a//b", "é", "0123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t i = 0; i < PSC_ARRAY_LEN(bad_names); i++) {
        char t[256];
        snprintf(t, sizeof t, "{\"name\": \"%s\", \"rows\": 10, \"dim\": 2}", bad_names[i]);
        expect_error(tables_spec(buf, sizeof buf, t), "tables[0].name: ");
        expect_error(tables_spec(buf, sizeof buf, t), "is not a valid table name");
    }
    /* the model's variables: equal, or one a /-prefix of the other */
    static const char *const clashes[] = {"global_step", "dense/kernel", "dense", "dense/bias/x", "global_step/a"};
    for (size_t i = 0; i < PSC_ARRAY_LEN(clashes); i++) {
        char t[256];
        snprintf(t, sizeof t, "{\"name\": \"%s\", \"rows\": 10, \"dim\": 2}", clashes[i]);
        expect_error(tables_spec(buf, sizeof buf, t), "tables[0].name: ");
        expect_error(tables_spec(buf, sizeof buf, t), "clashes with the model variable");
    }
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"dense\", \"rows\": 10, \"dim\": 2}"),
                 "tables[0].name: \"dense\" clashes with the model variable \"dense/kernel\"");
    /* near misses are fine: a layer without variables, a longer name, another layer's name */
    psc_job_spec_t s;
    parse_ok(tables_spec(buf, sizeof buf,
                         "{\"name\": \"flatten\", \"rows\": 1, \"dim\": 1}, {\"name\": \"dense_1\", \"rows\": 1, "
                         "\"dim\": 1}, {\"name\": \"dense/kernelx\", \"rows\": 1, \"dim\": 1}, {\"name\": "
                         "\"global_steps\", \"rows\": 1, \"dim\": 1}"),
             &s);
    assert_int_equal(s.num_tables, 4);
    psc_job_spec_deinit(&s);
    /* and among tables */
    expect_error(tables_spec(buf, sizeof buf, T_EMB ", " T_EMB),
                 "tables[1].name: \"emb\" clashes with tables[0].name \"emb\"");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"emb/a\", \"rows\": 1, \"dim\": 1}, " T_EMB),
                 "tables[1].name: \"emb\" clashes with tables[0].name \"emb/a\"");

    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"dim\": 2}"), "tables[0].rows: missing");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"rows\": 0, \"dim\": 2}"),
                 "tables[0].rows: expected an integer 1..1099511627776, got 0");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"rows\": 1099511627777, \"dim\": 2}"),
                 "tables[0].rows: expected an integer 1..1099511627776, got 1099511627777");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"rows\": 1.5, \"dim\": 2}"),
                 "tables[0].rows: expected an integer 1..1099511627776");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"rows\": \"10\", \"dim\": 2}"),
                 "tables[0].rows: expected an integer");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"rows\": 10}"), "tables[0].dim: missing");
    expect_error(tables_spec(buf, sizeof buf, T_EMB ", {\"name\": \"e\", \"rows\": 10, \"dim\": 0}"),
                 "tables[1].dim: expected an integer 1..4096, got 0");
    expect_error(tables_spec(buf, sizeof buf, T_EMB ", {\"name\": \"e\", \"rows\": 10, \"dim\": 4097}"),
                 "tables[1].dim: expected an integer 1..4096, got 4097");

#define T_INIT(i) "{\"name\": \"e\", \"rows\": 10, \"dim\": 2, \"initializer\": " i "}"
    expect_error(tables_spec(buf, sizeof buf, T_INIT("\"zeros\"")), "tables[0].initializer: expected an object");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{}")), "tables[0].initializer.name: missing");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"glorot_uniform\"}")),
                 "tables[0].initializer.name: unknown value \"glorot_uniform\" (expected uniform|normal|zeros)");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"uniform\", \"stddev\": 1}")),
                 "tables[0].initializer.stddev: unknown key");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"zeros\", \"minval\": 0}")),
                 "tables[0].initializer.minval: unknown key");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"uniform\", \"minval\": 0.1, \"maxval\": 0.1}")),
                 "tables[0].initializer.maxval: 0.1 is not greater than minval 0.1");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"uniform\", \"minval\": 0.06}")),
                 "tables[0].initializer.maxval: 0.05 is not greater than minval 0.06");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"uniform\", \"maxval\": \"1\"}")),
                 "tables[0].initializer.maxval: expected a number, got \"1\"");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"uniform\", \"maxval\": 1e39}")),
                 "tables[0].initializer.maxval: 1e+39 does not fit a float32");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"normal\", \"stddev\": 0}")),
                 "tables[0].initializer.stddev: expected a number > 0");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"normal\", \"mean\": null}")),
                 "tables[0].initializer.mean: expected a number");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"normal\", \"stddev\": 1e38}")),
                 "tables[0].initializer: mean 0 and stddev 1e+38 would give values beyond float32");
#undef T_INIT
    expect_error(tables_spec(buf, sizeof buf,
                             "{\"name\": \"e\", \"rows\": 10, \"dim\": 2, \"partition_strategy\": "
                             "\"range\"}"),
                 "tables[0].partition_strategy: unknown value \"range\" (expected mod|div)");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"rows\": 10, \"dim\": 2, \"optimizer\": 1}"),
                 "tables[0].optimizer: expected an object");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"rows\": 10, \"dim\": 2, \"optimizer\": {}}"),
                 "tables[0].optimizer.name: missing");
    expect_error(tables_spec(buf, sizeof buf,
                             "{\"name\": \"e\", \"rows\": 10, \"dim\": 2, \"optimizer\": "
                             "{\"name\": \"ftrl\", \"beta1\": 0.9}}"),
                 "tables[0].optimizer.beta1: not a parameter of ftrl");
    expect_error(tables_spec(buf, sizeof buf,
                             "{\"name\": \"e\", \"rows\": 10, \"dim\": 2, \"optimizer\": "
                             "{\"name\": \"adam\", \"beta2\": 0.9999999999}}"),
                 "tables[0].optimizer.beta2: rounds to 1 as a float32");
    expect_error(tables_spec(buf, sizeof buf,
                             "{\"name\": \"e\", \"rows\": 10, \"dim\": 2, \"optimizer\": "
                             "{\"name\": \"sgd\", \"schedule\": {\"name\": \"cosine_decay\"}}}"),
                 "tables[0].optimizer.schedule.decay_steps: missing");
    /* the model is checked before the tables: its error comes first */
    expect_error("{\"model\": {\"input_shape\": [784], \"layers\": [{\"type\": \"dense\", \"units\": 1}]}, "
                 "\"optimizer\": {\"name\": \"sgd\"}, \"tables\": [5]}",
                 "at least 2");
}

/* Job ids: the legacy ids unchanged for specs without the new keys (the ids of
 * psc-job-v1 before tables, schedules and ftrl existed), every id changed by
 * every new setting; the partition strategy changes only the legacy id. */
static void test_job_id_new_keys(void **state)
{
    (void)state;
    char buf[8192], buf2[8192];
    assert_string_equal(id_of(design_example, 1), "b22ce90fabdb9546");
    assert_string_equal(id_of("{\"model\": {\"input_shape\": [784], \"layers\": [{\"type\": \"dense\", \"units\": "
                              "10}]}, \"optimizer\": {\"name\": \"rmsprop\", \"momentum\": 0.5}}",
                              1),
                        "4923250d49a3617e");
    assert_string_equal(id_of("{\"model\": {\"input_shape\": [784], \"layers\": [{\"type\": \"dense\", \"units\": "
                              "10}]}, \"optimizer\": {\"name\": \"adagrad\"}}",
                              1),
                        "e91f07548f607828");
    /* spelled-out defaults are the same job */
    const char *plain = job_id_of(spec3(buf, sizeof buf, MLP, ADAM, ""));
    assert_string_equal(job_id_of(spec3(buf, sizeof buf, MLP, ADAM ", \"schedule\": {\"name\": \"constant\"}", "")),
                        plain);
    assert_string_equal(job_id_of(spec3(buf, sizeof buf, MLP, ADAM, "\"tables\": []")), plain);
    assert_string_not_equal(job_id_of(tables_spec(buf, sizeof buf, T_EMB)), plain);
    assert_string_equal(
        job_id_of(tables_spec(buf, sizeof buf, T_EMB)),
        job_id_of(tables_spec(buf2, sizeof buf2,
                              "{\"dim\": 8, \"name\": \"emb\", \"rows\": 1000, \"initializer\": "
                              "{\"name\": \"uniform\", \"minval\": -0.05, \"maxval\": 0.05}, "
                              "\"partition_strategy\": \"mod\", \"optimizer\": {\"name\": \"adam\"}}")));

    /* a base with every new key, and one change at a time */
    static const char *const base =
        "{\"model\": {\"input_shape\": [784], \"layers\": [{\"type\": \"dense\", \"units\": 10}]}, "
        "\"optimizer\": {\"name\": \"ftrl\", \"learning_rate_power\": -0.5, \"l1_regularization_strength\": 0.1, "
        "\"l2_regularization_strength\": 0.2, \"initial_accumulator_value\": 0.1, "
        "\"schedule\": {\"name\": \"piecewise_constant\", \"boundaries\": [10, 20], \"values\": [0.3, 0.2, 0.1]}}, "
        "\"tables\": [{\"name\": \"user\", \"rows\": 1000, \"dim\": 8, \"partition_strategy\": \"mod\", "
        "\"initializer\": {\"name\": \"normal\", \"mean\": 0, \"stddev\": 0.05}, "
        "\"optimizer\": {\"name\": \"adagrad\", \"schedule\": {\"name\": \"exponential_decay\", \"decay_steps\": 100, "
        "\"decay_rate\": 0.5, \"staircase\": false}}}, "
        "{\"name\": \"item\", \"rows\": 50, \"dim\": 4, \"optimizer\": {\"name\": \"sgd\", \"schedule\": "
        "{\"name\": \"cosine_decay\", \"decay_steps\": 100, \"alpha\": 0.1, \"warmup_steps\": 5, \"warmup_target\": "
        "1}}}]}";
    static const char *const variants[][2] = {
        {"\"learning_rate_power\": -0.5", "\"learning_rate_power\": -0.25"},
        {"\"l1_regularization_strength\": 0.1", "\"l1_regularization_strength\": 0.3"},
        {"\"l2_regularization_strength\": 0.2", "\"l2_regularization_strength\": 0.3"},
        {"\"initial_accumulator_value\": 0.1,", "\"initial_accumulator_value\": 0.2,"},
        {"[10, 20]", "[10, 21]"},
        {"[0.3, 0.2, 0.1]", "[0.3, 0.2, 0.05]"},
        {"{\"name\": \"piecewise_constant\", \"boundaries\": [10, 20], \"values\": [0.3, 0.2, 0.1]}",
         "{\"name\": \"constant\"}"},
        {"\"name\": \"user\"", "\"name\": \"users\""},
        {"\"rows\": 1000", "\"rows\": 1001"},
        {"\"dim\": 8", "\"dim\": 16"},
        {"\"name\": \"normal\", \"mean\": 0,", "\"name\": \"normal\", \"mean\": 0.5,"},
        {"\"stddev\": 0.05", "\"stddev\": 0.06"},
        {"{\"name\": \"normal\", \"mean\": 0, \"stddev\": 0.05}", "{\"name\": \"zeros\"}"},
        {"{\"name\": \"adagrad\",", "{\"name\": \"adagrad\", \"learning_rate\": 0.5,"},
        {"\"decay_steps\": 100, \"decay_rate\"", "\"decay_steps\": 101, \"decay_rate\""},
        {"\"decay_rate\": 0.5", "\"decay_rate\": 0.6"},
        {"\"staircase\": false", "\"staircase\": true"},
        {"\"alpha\": 0.1", "\"alpha\": 0.2"},
        {"\"warmup_steps\": 5", "\"warmup_steps\": 6"},
        {"\"warmup_target\": 1", "\"warmup_target\": 2"},
        {"\"cosine_decay\", \"decay_steps\": 100", "\"cosine_decay\", \"decay_steps\": 99"},
        {"\"rows\": 50, \"dim\": 4, \"optimizer\": {\"name\": \"sgd\", \"schedule\": {\"name\": \"cosine_decay\", "
         "\"decay_steps\": 100, \"alpha\": 0.1, \"warmup_steps\": 5, \"warmup_target\": 1}}}",
         "\"rows\": 50, \"dim\": 4}"},
        {", {\"name\": \"item\"", ", {\"name\": \"item2\", \"rows\": 1, \"dim\": 1}, {\"name\": \"item\""},
    };
    char base_id[17];
    snprintf(base_id, sizeof base_id, "%s", job_id_of(base));
    for (size_t i = 0; i < PSC_ARRAY_LEN(variants); i++) {
        const char *at = strstr(base, variants[i][0]);
        if (!at) fail_msg("variant %zu: \"%s\" not in the base", i, variants[i][0]);
        char text[4096];
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, variants[i][1], at + strlen(variants[i][0]));
        if (strcmp(job_id_of(text), base_id) == 0)
            fail_msg("variant %zu (%s) kept job id %s", i, variants[i][1], base_id);
    }
    /* the partition strategy: the same job (a checkpoint restores re-split), another legacy id */
    const char *at = strstr(base, "\"partition_strategy\": \"mod\"");
    assert_non_null(at);
    char text[4096], legacy[17];
    snprintf(text, sizeof text, "%.*s\"partition_strategy\": \"div\"%s", (int)(at - base), base,
             at + strlen("\"partition_strategy\": \"mod\""));
    assert_string_equal(job_id_of(text), base_id);
    snprintf(legacy, sizeof legacy, "%s", id_of(base, 1));
    assert_string_not_equal(id_of(text, 1), legacy);
}

/* The fuzzer's seeds are valid specs (each is a starting point for mutations). */
/* "warm_start": defaults, every refusal, the job id it changes */
static void test_warm_start(void **state)
{
    (void)state;
    char buf[8192];
    psc_job_spec_t s;
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, "\"warm_start\": {\"from\": \"0123456789abcdef\"}"), &s);
    assert_true(s.warm_start.on && s.warm_start.from_job && s.warm_start.all_tables);
    assert_int_equal(s.warm_start.checkpoint, 0);
    assert_string_equal(s.warm_start.variables, ".*");
    const char *id = job_id_of(spec3(buf, sizeof buf, MLP, ADAM, "\"warm_start\": {\"from\": \"0123456789abcdef\"}"));
    assert_string_not_equal(id, job_id_of(spec3(buf, sizeof buf, MLP, ADAM, "")));
    psc_job_spec_deinit(&s);
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM,
                   "\"warm_start\": {\"from\": \"0123456789abcdef\", \"checkpoint\": 7, \"variables\": \"dense/.*\"}"),
             &s);
    assert_int_equal(s.warm_start.checkpoint, 7);
    assert_true(!s.warm_start.slots && !s.warm_start.carry_step);
    psc_job_spec_deinit(&s);
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM,
                   "\"warm_start\": {\"from\": \"0123456789abcdef\", \"slots\": true, \"global_step\": true}"),
             &s);
    assert_true(s.warm_start.slots && s.warm_start.carry_step);
    psc_job_spec_deinit(&s);
    assert_string_not_equal(id, job_id_of(spec3(buf, sizeof buf, MLP, ADAM,
                                                "\"warm_start\": {\"from\": \"0123456789abcdef\", \"slots\": true}")));
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, "\"warm_start\": {\"from\": \"day1.st\", \"global_step\": true}"), &s);
    assert_true(!s.warm_start.slots && s.warm_start.carry_step);
    psc_job_spec_deinit(&s);
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, "\"warm_start\": {\"from\": \"/m/day1.safetensors\", \"tables\": []}"),
             &s);
    assert_true(!s.warm_start.from_job && !s.warm_start.all_tables && s.warm_start.ntables == 0);
    psc_job_spec_deinit(&s);
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM,
                   "\"tables\": [" T_EMB "], \"warm_start\": {\"from\": \"x.st\", \"tables\": [\"emb\"]}"),
             &s);
    assert_int_equal(s.warm_start.ntables, 1);
    psc_job_spec_deinit(&s);
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"warm_start\": {}"), "warm_start.from: missing");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"warm_start\": {\"from\": \"\"}"), "warm_start.from: expected");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"warm_start\": {\"from\": \"f\", \"x\": 1}"),
                 "warm_start.x: unknown key");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"warm_start\": {\"from\": \"f.st\", \"checkpoint\": 3}"),
                 "warm_start.checkpoint: only a warm start from a job id");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"warm_start\": {\"from\": \"0123456789abcdef\", \"checkpoint\": 0}"),
                 "warm_start.checkpoint: expected \"latest\" or a checkpoint id");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"warm_start\": {\"from\": \"f\", \"variables\": \"(\"}"),
                 "warm_start.variables: \"(\" is not a POSIX extended regular expression");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"warm_start\": {\"from\": \"f\", \"tables\": [\"emb\"]}"),
                 "warm_start.tables[0]: \"emb\" is not one of the job's tables");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM,
                       "\"tables\": [" T_EMB "], \"warm_start\": {\"from\": \"f\", \"tables\": [\"emb\", \"emb\"]}"),
                 "warm_start.tables[1]: named twice");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"warm_start\": {\"from\": \"f.st\", \"slots\": true}"),
                 "warm_start.slots: a safetensors file holds no optimizer slots");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"warm_start\": {\"from\": \"f.st\", \"global_step\": 1}"),
                 "warm_start.global_step: expected true or false");
}

static void test_fuzz_seeds(void **state)
{
    (void)state;
    const char *src = getenv("PSC_SRC");
    if (!src) src = ".";
    static const char *const seeds[] = {"mlp.json", "tables_ftrl.json", "tables_div_cosine.json",
                                        "schedule_piecewise.json"};
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/tests/fuzz/seeds/fuzz_job_spec/mlp.json", src);
    if (access(path, R_OK) != 0) skip();
    for (size_t i = 0; i < PSC_ARRAY_LEN(seeds); i++) {
        psc_job_spec_t s;
        snprintf(path, sizeof path, "%s/tests/fuzz/seeds/fuzz_job_spec/%s", src, seeds[i]);
        if (psc_job_spec_load(path, &s, err, sizeof err)) fail_msg("%s", err);
        if (i > 0) assert_true(s.num_tables > 0 || s.optimizer.schedule.kind != PSC_LR_CONSTANT);
        psc_job_spec_deinit(&s);
    }
}

/* tables[].eviction and .admission: parsed, refused out of range naming the
 * key, and outside the job id (and the legacy id). */
static void test_table_life(void **state)
{
    (void)state;
    char buf[8192], buf2[8192];
    psc_job_spec_t s;
#define T_LIFE(x) "{\"name\": \"emb\", \"rows\": 1000, \"dim\": 8, " x "}"
    parse_ok(tables_spec(buf, sizeof buf,
                         T_LIFE("\"eviction\": {\"ttl_steps\": 500, \"ttl_secs\": 86400, \"max_rows\": 4096}, "
                                "\"admission\": {\"min_count\": 3, \"filter_bytes\": 65536}")),
             &s);
    assert_int_equal(s.tables[0].ttl_steps, 500);
    assert_true(s.tables[0].ttl_secs == 86400);
    assert_int_equal(s.tables[0].max_rows, 4096);
    assert_int_equal(s.tables[0].min_count, 3);
    assert_int_equal(s.tables[0].filter_bytes, 65536);
    psc_job_spec_deinit(&s);
    parse_ok(tables_spec(buf, sizeof buf, T_EMB), &s);
    assert_int_equal(s.tables[0].ttl_steps + s.tables[0].max_rows + s.tables[0].min_count + s.tables[0].filter_bytes,
                     0);
    assert_true(s.tables[0].ttl_secs == 0);
    psc_job_spec_deinit(&s);
    const char *with = tables_spec(buf2, sizeof buf2,
                                   T_LIFE("\"eviction\": {\"ttl_secs\": 5}, \"admission\": {\"min_count\": 2}"));
    assert_string_equal(job_id_of(with), job_id_of(tables_spec(buf, sizeof buf, T_EMB)));
    assert_string_equal(id_of(with, 1), id_of(tables_spec(buf, sizeof buf, T_EMB), 1));

    expect_error(tables_spec(buf, sizeof buf, T_LIFE("\"eviction\": {\"ttl_steps\": -3}")),
                 "tables[0].eviction.ttl_steps: expected an integer 1..1099511627776, got -3");
    expect_error(tables_spec(buf, sizeof buf, T_LIFE("\"eviction\": {}")),
                 "tables[0].eviction: give ttl_steps, ttl_secs or max_rows (or leave eviction out)");
    expect_error(tables_spec(buf, sizeof buf, T_LIFE("\"eviction\": {\"ttl_secs\": 0}")),
                 "tables[0].eviction.ttl_secs: expected a number > 0");
    expect_error(tables_spec(buf, sizeof buf, T_LIFE("\"eviction\": {\"max_rows\": 100}")),
                 "tables[0].eviction.max_rows: expected an integer 256..1099511627776, got 100");
    expect_error(tables_spec(buf, sizeof buf, T_LIFE("\"eviction\": {\"ttl\": 100}")),
                 "tables[0].eviction.ttl: unknown key");
    expect_error(tables_spec(buf, sizeof buf, T_LIFE("\"eviction\": 5")), "tables[0].eviction: expected an object");
    expect_error(tables_spec(buf, sizeof buf, T_LIFE("\"admission\": {\"min_count\": 1}")),
                 "tables[0].admission.min_count: expected an integer 2..255, got 1");
    expect_error(tables_spec(buf, sizeof buf, T_LIFE("\"admission\": {}")), "tables[0].admission.min_count: missing");
    expect_error(tables_spec(buf, sizeof buf, T_LIFE("\"admission\": {\"min_count\": 2, \"filter_bytes\": 1000}")),
                 "tables[0].admission.filter_bytes: expected an integer 65536..1073741824, got 1000");
#undef T_LIFE
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ftrl),         cmocka_unit_test(test_schedules),       cmocka_unit_test(test_tables),
        cmocka_unit_test(test_table_errors), cmocka_unit_test(test_job_id_new_keys), cmocka_unit_test(test_table_life),
        cmocka_unit_test(test_warm_start),   cmocka_unit_test(test_fuzz_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
