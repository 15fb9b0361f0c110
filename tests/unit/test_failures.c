/* test_failures — the chief's record of failed tasks (worker/failures.h):
 * reports belong to their job, the first replica failure of a job is kept,
 * the evaluator's is shown apart, a report of job "" (a task that could not
 * read the spec) belongs to the open job, and an abort is this job's only. */
#include "failures.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

static void test_reports_belong_to_their_job(void **state)
{
    (void)state;
    failures_t *f = failures_create();
    char why[256];
    failures_open(f, "job-a");
    assert_int_equal(failures_replica(f, why, sizeof why), 0);
    failures_add(f, "job-b", 1, "worker 1", "another job's error");
    assert_int_equal(failures_replica(f, why, sizeof why), 0);
    failures_add(f, "job-a", 2, "worker 2", "f.tsv:200: bad label");
    failures_add(f, "job-a", 1, "worker 1", "a later one");
    assert_int_equal(failures_replica(f, why, sizeof why), 1);
    assert_string_equal(why, "replica 2 (worker 2): f.tsv:200: bad label");
    /* the evaluator's failure is shown, it does not fail the job */
    failures_add(f, "job-a", -1, "evaluator 0", "cannot read t10k");
    failures_evaluator(f, why, sizeof why);
    assert_string_equal(why, "evaluator 0: cannot read t10k");
    /* the next job starts clean */
    failures_open(f, "job-c");
    assert_int_equal(failures_replica(f, why, sizeof why), 0);
    failures_evaluator(f, why, sizeof why);
    assert_string_equal(why, "");
    failures_destroy(f);
}

static void test_report_before_open_and_unknown_job(void **state)
{
    (void)state;
    failures_t *f = failures_create();
    char why[256];
    /* a replica may fail before the chief's job thread opens the job */
    failures_add(f, "job-a", 1, "worker 1", "early");
    failures_open(f, "job-a");
    assert_int_equal(failures_replica(f, why, sizeof why), 1);
    assert_string_equal(why, "replica 1 (worker 1): early");
    /* a task that could not parse the spec reports job "": it is the open job's */
    failures_open(f, "job-b");
    assert_int_equal(failures_replica(f, why, sizeof why), 0);
    failures_add(f, "", 1, "worker 1", "job spec: bad");
    assert_int_equal(failures_replica(f, why, sizeof why), 1);
    assert_string_equal(why, "replica 1 (worker 1): job spec: bad");
    failures_destroy(f);
}

static void test_abort(void **state)
{
    (void)state;
    failures_t *f = failures_create();
    char why[256];
    failures_open(f, "job-a");
    assert_int_equal(failures_aborted(f, why, sizeof why), 0);
    failures_abort(f, "replica 1 (worker 1): x");
    assert_int_equal(failures_aborted(f, why, sizeof why), 1);
    assert_string_equal(why, "replica 1 (worker 1): x");
    failures_open(f, "job-b");
    assert_int_equal(failures_aborted(f, why, sizeof why), 0);
    /* NULL: no record, nothing failed */
    assert_int_equal(failures_replica(NULL, why, sizeof why), 0);
    assert_int_equal(failures_aborted(NULL, why, sizeof why), 0);
    failures_destroy(f);
    failures_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reports_belong_to_their_job),
        cmocka_unit_test(test_report_before_open_and_unknown_job),
        cmocka_unit_test(test_abort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
