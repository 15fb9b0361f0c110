/* log.c — see log.h. */
#include "log.h"

#include "psc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char g_component[64] = "psc";
static enum psc_log_level g_level = PSC_LOG_INFO;
static const char *const level_names[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};

void psc_log_set_component(const char *component)
{
    snprintf(g_component, sizeof g_component, "%s", component);
}

void psc_log_set_level(enum psc_log_level level) { g_level = level; }

int psc_log_parse_level(const char *s, enum psc_log_level *out)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (enum psc_log_level)i;
            return 0;
        }
    return PSC_EINVAL;
}

void psc_log(enum psc_log_level level, const char *fmt, ...)
{
    if (level < g_level) return;
    char line[2048];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s %s ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000),
                     level_names[level], g_component);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : PSC_MIN((size_t)m, sizeof line - (size_t)n - 2));
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
