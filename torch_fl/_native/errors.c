/* errors.c -- the thread-local last error and status names. Every message starts with
 * the status name so that Python can show it verbatim. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rt_internal.h"

#define RT_ERROR_MAX 2048

static _Thread_local char tl_error[RT_ERROR_MAX];

static const char* const k_names[] = {
    "RAL_OK",
    "RAL_ERROR_INVALID_ARGUMENT",
    "RAL_ERROR_OUT_OF_MEMORY",
    "RAL_ERROR_INVALID_POINTER",
    "RAL_ERROR_UNSUPPORTED",
    "RAL_ERROR_KERNEL_FAILED",
    "RAL_ERROR_DEVICE_LOST",
    "RAL_ERROR_MISSING_DEPS",
    "RAL_ERROR_ABI_MISMATCH",
    "RAL_ERROR_COMPILE_FAILED",
    "RAL_ERROR_INTERNAL",
    "RAL_ERROR_NOT_READY",
    "RAL_ERROR_LOAD_FAILED",
    "RAL_ERROR_DEVICE_HANG", /* runtime-only (ral_runtime.h) */
};

const char* rt_status_name(int status) {
  if (status < 0 || status >= (int)(sizeof k_names / sizeof k_names[0])) return "RAL_ERROR_UNKNOWN";
  return k_names[status];
}

void rt_copy_str(char* dst, size_t cap, const char* src) {
  size_t n = src ? strnlen(src, cap - 1) : 0;
  if (n) memcpy(dst, src, n);
  dst[n] = 0;
}

/* Public: the message of this thread's last failure. */
const char* rt_last_error(void) { return tl_error; }

int rt_fail(int status, const char* fmt, ...) {
  int n = snprintf(tl_error, RT_ERROR_MAX, "%s: ", rt_status_name(status));
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_error + n, RT_ERROR_MAX - (size_t)n, fmt, ap);
  va_end(ap);
  return status;
}

void rt_error_append(const char* fmt, ...) {
  size_t n = strlen(tl_error);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_error + n, RT_ERROR_MAX - n, fmt, ap);
  va_end(ap);
}

int rt_error_restore(int status, const char* message) {
  snprintf(tl_error, RT_ERROR_MAX, "%s", message ? message : rt_status_name(status));
  return status;
}

int rt_plugin_fail(const rt_plugin* p, int status, const char* what, ...) {
  /* Read the plugin's thread-local message first: our own formatting must not run
   * anything that could overwrite it. */
  const char* msg = p->api.last_error ? p->api.last_error() : NULL;
  char detail[RT_ERROR_MAX / 2];
  rt_copy_str(detail, sizeof detail, msg); /* bounded: the plugin's string may not end */
  /* An untrusted plugin may return anything: keep the caller's status space clean. */
  int sane = status > RAL_OK && status <= RAL_ERROR_LOAD_FAILED ? status : RAL_ERROR_INTERNAL;

  char context[RT_ERROR_MAX / 2] = "";
  if (what) {
    va_list ap;
    va_start(ap, what);
    vsnprintf(context, sizeof context, what, ap);
    va_end(ap);
  }
  char bad[64] = "";
  if (sane != status) snprintf(bad, sizeof bad, " (plugin returned invalid status %d)", status);
  const char* sep = context[0] && detail[0] ? ": " : "";
  if (!context[0] && !detail[0]) snprintf(context, sizeof context, "operation failed");
  snprintf(tl_error, RT_ERROR_MAX, "%s: [%s] %s%s%s%s", rt_status_name(sane), p->rec.name,
           context, sep, detail, bad);
  return sane;
}

static uint64_t unit_factor(const char* unit) {
  static const struct {
    const char* name;
    uint64_t factor;
  } units[] = {
      {"", 1},           {"b", 1},
      {"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000ull},
      {"m", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000000ull},
      {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000000000ull},
      {"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000000000000ull},
  };
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcasecmp(unit, units[i].name) == 0) return units[i].factor;
  return 0;
}

int rt_parse_size_str(const char* text, uint64_t* out) {
  while (isspace((unsigned char)*text)) text++;
  if (!isdigit((unsigned char)*text)) return -1;
  char* end;
  uint64_t whole = strtoull(text, &end, 10);
  double fraction = 0.0;
  if (*end == '.') fraction = strtod(end, &end); /* "1.5GiB" */
  while (isspace((unsigned char)*end)) end++;    /* "2 MiB" */
  char unit[8] = "";
  size_t n = 0;
  while (*end && !isspace((unsigned char)*end) && n < sizeof unit - 1) unit[n++] = *end++;
  unit[n] = 0;
  while (isspace((unsigned char)*end)) end++;
  uint64_t factor = unit_factor(unit);
  uint64_t bytes;
  if (*end || factor == 0 || __builtin_mul_overflow(whole, factor, &bytes)) return -1;
  *out = bytes + (uint64_t)(fraction * (double)factor);
  return 0;
}

/* Public: parse a memory size the way TORCH_FL_MEMORY_LIMIT is read. */
int rt_parse_size(const char* text, uint64_t* bytes) {
  if (!text || rt_parse_size_str(text, bytes) != 0)
    return rt_fail(RAL_ERROR_INVALID_ARGUMENT,
                   "'%s' is not a memory size (examples: 512MB, 2GiB, 1048576)",
                   text ? text : "(null)");
  return RAL_OK;
}
