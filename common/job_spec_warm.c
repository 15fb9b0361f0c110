/* job_spec_warm.c — the job spec's "warm_start" (job_spec.h's
 * psc_warm_start_t):
 *
 *   "warm_start": {"from": "<job id>" | "<file>.safetensors",
 *                  "checkpoint": "latest" | ID,      (from a job id only)
 *                  "variables": "REGEX",             (default ".*")
 *                  "tables": ["name", ...],          (default: every table)
 *                  "slots": true | false,            (from a job id only; default false)
 *                  "global_step": true | false}      (default false)
 */
#include "job_spec_internal.h"

#include <regex.h>
#include <stdio.h>
#include <string.h>

static int is_job_id(const char *s)
{
    if (strlen(s) != 16) return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return 0;
    return 1;
}

static int parse_checkpoint(const jspec_ctx_t *c, const json_t *o, psc_warm_start_t *w)
{
    const json_t *v = json_object_get(o, "checkpoint");
    char got[64];
    if (!v || (json_is_string(v) && strcmp(json_string_value(v), "latest") == 0)) return 0;
    if (!w->from_job)
        return jspec_fail(c, "warm_start.checkpoint",
                          "only a warm start from a job id names a checkpoint (from is "
                          "a file)");
    if (!json_is_integer(v) || json_integer_value(v) < 1)
        return jspec_fail(c, "warm_start.checkpoint", "expected \"latest\" or a checkpoint id >= 1, got %s",
                          jspec_show(v, got, sizeof got));
    w->checkpoint = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_tables(const jspec_ctx_t *c, const json_t *o, const psc_job_spec_t *s, psc_warm_start_t *w)
{
    const json_t *t = json_object_get(o, "tables");
    char got[64];
    w->all_tables = t == NULL;
    if (!t) return 0;
    if (!json_is_array(t))
        return jspec_fail(c, "warm_start.tables", "expected an array of table names, got %s",
                          jspec_show(t, got, sizeof got));
    for (size_t i = 0; i < json_array_size(t); i++) {
        const json_t *n = json_array_get(t, i);
        char p[64];
        snprintf(p, sizeof p, "warm_start.tables[%zu]", i);
        int found = -1;
        for (int k = 0; json_is_string(n) && k < s->num_tables && found < 0; k++)
            if (strcmp(s->tables[k].name, json_string_value(n)) == 0) found = k;
        if (found < 0) return jspec_fail(c, p, "%s is not one of the job's tables", jspec_show(n, got, sizeof got));
        for (int k = 0; k < w->ntables; k++)
            if (strcmp(w->tables[k], s->tables[found].name) == 0) return jspec_fail(c, p, "named twice");
        snprintf(w->tables[w->ntables++], sizeof w->tables[0], "%s", s->tables[found].name);
    }
    return 0;
}

int jspec_parse_warm_start(const jspec_ctx_t *c, const json_t *root, psc_job_spec_t *s)
{
    const json_t *o;
    int rc = jspec_get_object(c, root, "warm_start", "", 0, &o);
    if (rc || !o) return rc;
    static const char *const keys[] = {"from", "checkpoint", "variables", "tables", "slots", "global_step", NULL};
    if ((rc = jspec_check_keys(c, o, "warm_start", keys))) return rc;
    psc_warm_start_t *w = &s->warm_start;
    const char *from = NULL, *vars = ".*";
    if ((rc = jspec_get_string(c, o, "from", "warm_start", 1, &from))) return rc;
    if (!from[0] || strlen(from) >= sizeof w->from)
        return jspec_fail(c, "warm_start.from", "expected a job id or a safetensors file (1 to %zu characters)",
                          sizeof w->from - 1);
    snprintf(w->from, sizeof w->from, "%s", from);
    w->from_job = is_job_id(from);
    if ((rc = parse_checkpoint(c, o, w))) return rc;
    if ((rc = jspec_get_string(c, o, "variables", "warm_start", 0, &vars))) return rc;
    regex_t re;
    if (strlen(vars) >= sizeof w->variables || regcomp(&re, vars, REG_EXTENDED | REG_NOSUB) != 0)
        return jspec_fail(c, "warm_start.variables", "\"%.64s\" is not a POSIX extended regular expression", vars);
    regfree(&re);
    snprintf(w->variables, sizeof w->variables, "%s", vars);
    if ((rc = parse_tables(c, o, s, w))) return rc;
    if ((rc = jspec_get_bool(c, o, "slots", "warm_start", &w->slots))) return rc;
    if ((rc = jspec_get_bool(c, o, "global_step", "warm_start", &w->carry_step))) return rc;
    if (w->slots && !w->from_job)
        return jspec_fail(c, "warm_start.slots",
                          "a safetensors file holds no optimizer slots: they come only from a job's checkpoint "
                          "(from a job id)");
    w->on = 1;
    return 0;
}
