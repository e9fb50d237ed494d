#include "kb_log.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

_Atomic int kb_log_threshold = KB_LOG_INFO;

static kb_log_sink_fn *kb_log_sink;
static void *kb_log_sink_opaque;

static const char *const kb_log_names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

void kb_log_set_level(kb_log_level_t lvl)
{
    atomic_store(&kb_log_threshold, (int)lvl);
}

kb_log_level_t kb_log_get_level(void)
{
    return (kb_log_level_t)atomic_load(&kb_log_threshold);
}

int kb_log_level_parse(const char *s, kb_log_level_t *out)
{
    for (int i = 0; i <= KB_LOG_TRACE; i++) {
        if (strcasecmp(s, kb_log_names[i]) == 0) {
            *out = (kb_log_level_t)i;
            return 0;
        }
    }
    if (strcasecmp(s, "warning") == 0) {
        *out = KB_LOG_WARN;
        return 0;
    }
    return -1;
}

const char *kb_log_level_name(kb_log_level_t lvl)
{
    if ((int)lvl < 0 || lvl > KB_LOG_TRACE)
        return "?";
    return kb_log_names[lvl];
}

void kb_log_set_sink(kb_log_sink_fn *fn, void *opaque)
{
    kb_log_sink = fn;
    kb_log_sink_opaque = opaque;
}

void kb_log_vwrite(kb_log_level_t lvl, const char *comp, const char *fmt, va_list ap)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    size_t n;
    int r;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    r = snprintf(line + n, sizeof(line) - n, ".%03ldZ %-5s [%s] ", ts.tv_nsec / 1000000,
                 kb_log_level_name(lvl), comp ? comp : "-");
    if (r > 0)
        n += (size_t)r;
    r = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    if (r < 0)
        r = 0;
    n += (size_t)r;
    if (n > sizeof(line) - 2) {
        /* Truncated: mark it so a reader does not take it for the whole message. */
        n = sizeof(line) - 2;
        memcpy(line + n - 3, "...", 3);
    }
    if (kb_log_sink) {
        line[n] = '\0';
        kb_log_sink(kb_log_sink_opaque, lvl, line);
        return;
    }
    line[n++] = '\n';
    /* One write per line keeps concurrent lines whole; a short write on stderr is ignored. */
    if (write(STDERR_FILENO, line, n) < 0)
        return;
}

void kb_log_write(kb_log_level_t lvl, const char *comp, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kb_log_vwrite(lvl, comp, fmt, ap);
    va_end(ap);
}
