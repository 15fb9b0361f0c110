/* test_worker_metrics — the worker's metrics module.
 *
 * Steps add up in the counters and histograms exactly; stale steps and
 * retries are counted; examples per second is examples over step time, first
 * over the steps so far, then per window of >= 1 s of step time (a step
 * after a full window starts a new one and leaves the gauge alone until it
 * fills); every series carries the role label; a NULL handle (metrics off)
 * makes every call a no-op.
 */
#include "metrics.h"
#include "psc.h"
#include "worker_metrics.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* The value of the sample line that starts with `series` followed by a space; fails when absent. */
static double sample(const char *page, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = page; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ') return strtod(p + n + 1, NULL);
    fail_msg("no sample %s in:\n%s", series, page);
    return 0;
}

static void test_counts(void **state)
{
    (void)state;
    psc_metrics_t *m = psc_metrics_create();
    worker_metrics_t *w = worker_metrics_create(m, "chief");
    assert_non_null(w);
    char *page = psc_metrics_render(m, NULL);
    assert_true(sample(page, "psc_worker_steps_total{role=\"chief\"}") == 0); /* there before the first step */
    assert_true(sample(page, "psc_worker_examples_per_second{role=\"chief\"}") == 0);
    free(page);

    worker_metrics_step(w, 32, 0.25, 0.125, 0);
    worker_metrics_step(w, 32, 0.25, 0.0625, 1);
    worker_metrics_step(w, 16, 0.5, -1, 0); /* push-pull not measured */
    worker_metrics_retry(w);
    worker_metrics_retry(w);
    worker_metrics_retry(w);
    page = psc_metrics_render(m, NULL);
    assert_true(sample(page, "psc_worker_steps_total{role=\"chief\"}") == 3);
    assert_true(sample(page, "psc_worker_examples_total{role=\"chief\"}") == 80);
    assert_true(sample(page, "psc_worker_stale_steps_total{role=\"chief\"}") == 1);
    assert_true(sample(page, "psc_worker_retries_total{role=\"chief\"}") == 3);
    assert_true(sample(page, "psc_worker_step_seconds_count{role=\"chief\"}") == 3);
    assert_true(sample(page, "psc_worker_step_seconds_sum{role=\"chief\"}") == 1.0);
    assert_true(sample(page, "psc_worker_step_seconds_bucket{role=\"chief\",le=\"0.25\"}") == 2);
    assert_true(sample(page, "psc_worker_push_pull_seconds_count{role=\"chief\"}") == 2);
    assert_true(sample(page, "psc_worker_push_pull_seconds_sum{role=\"chief\"}") == 0.1875);
    /* the window filled exactly (1 s): 80 examples / 1 s */
    assert_true(sample(page, "psc_worker_examples_per_second{role=\"chief\"}") == 80);
    free(page);
    worker_metrics_destroy(w);
    psc_metrics_destroy(m);
}

static void test_rate_window(void **state)
{
    (void)state;
    psc_metrics_t *m = psc_metrics_create();
    worker_metrics_t *w = worker_metrics_create(m, NULL); /* no role: no label */
    worker_metrics_step(w, 10, 0.5, 0.1, 0);
    char *page = psc_metrics_render(m, NULL);
    assert_true(sample(page, "psc_worker_examples_per_second") == 20); /* the steps so far */
    free(page);
    worker_metrics_step(w, 40, 0.5, 0.1, 0); /* fills the first window: 50 / 1 s */
    worker_metrics_step(w, 300, 0.5, 0.1, 0); /* a new window, not full: the gauge stays */
    page = psc_metrics_render(m, NULL);
    assert_true(sample(page, "psc_worker_examples_per_second") == 50);
    free(page);
    worker_metrics_step(w, 100, 1.5, 0.1, 0); /* fills it: 400 / 2 s */
    page = psc_metrics_render(m, NULL);
    assert_true(sample(page, "psc_worker_examples_per_second") == 200);
    assert_null(strstr(page, "role="));
    free(page);
    worker_metrics_destroy(w);
    psc_metrics_destroy(m);
}

static void test_null(void **state)
{
    (void)state;
    assert_null(worker_metrics_create(NULL, "worker"));
    worker_metrics_step(NULL, 32, 0.1, 0.05, 1);
    worker_metrics_retry(NULL);
    worker_metrics_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_rate_window),
        cmocka_unit_test(test_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
