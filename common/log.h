/* log.h — one line per event on stderr: time, level, component, message.
 *
 *   2026-11-22T12:00:00.123Z INFO  ps:0 serving on 127.0.0.1:2222 with 2 threads
 *
 * The component ("ps:0", "worker:1", "psctl") is set once at start-up with
 * psc_log_set_component(). Thread-safe: each line is written with one write(2).
 */
#ifndef PSC_LOG_H
#define PSC_LOG_H

enum psc_log_level { PSC_LOG_DEBUG = 0, PSC_LOG_INFO, PSC_LOG_WARN, PSC_LOG_ERROR };

void psc_log_set_component(const char *component);
void psc_log_set_level(enum psc_log_level level);
/* Parses "debug|info|warn|error"; returns 0 or PSC_EINVAL. */
int psc_log_parse_level(const char *s, enum psc_log_level *out);
void psc_log(enum psc_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define PSC_DEBUG(...) psc_log(PSC_LOG_DEBUG, __VA_ARGS__)
#define PSC_INFO(...) psc_log(PSC_LOG_INFO, __VA_ARGS__)
#define PSC_WARN(...) psc_log(PSC_LOG_WARN, __VA_ARGS__)
#define PSC_ERROR(...) psc_log(PSC_LOG_ERROR, __VA_ARGS__)

#endif
