/* chaos.c -- the template plugin, except that any entry can be told to answer garbage.
 * Test-only: it shows that nothing a plugin returns crashes or corrupts the runtime.
 *
 * RAL_CHAOS is read once, at init (and by the entry symbol, for the table's own fields):
 * a comma-separated list of the fault names in k_faults below. Faults of the same entry
 * combine where they can; an unknown name fails init (so a typo cannot pass a test).
 * Device memory is host memory, as in the template; kernels run inline except under
 * stream_hang, whose streams never finish. */
#include "common.h"

#include <stdint.h>

enum {
  F_INIT_STATUS,        /* init returns a status outside the enum */
  F_COUNT_NEGATIVE,     /* device_count: -5 */
  F_COUNT_HUGE,         /* device_count: 1 << 30 */
  F_COUNT_STATUS,       /* device_count: status -9 */
  F_INFO_STATUS,        /* device_info: status 777 */
  F_INFO_OVERFLOW,      /* device_info writes 256 bytes past struct_size */
  F_INFO_GARBAGE,       /* unterminated strings, every bit set, rank 1000, memory 2^64-1 */
  F_NAME_OVERLONG,      /* plugin_name and plugin_version: 100 000 characters */
  F_LAST_ERROR_NULL,    /* last_error returns NULL */
  F_LAST_ERROR_LONG,    /* last_error returns 65 536 characters */
  F_MALLOC_NULL,        /* malloc: RAL_OK and NULL */
  F_MALLOC_MISALIGNED,  /* malloc: RAL_OK and a pointer 8 bytes past an aligned block */
  F_MALLOC_STATUS,      /* malloc: status 4242 and a wild pointer */
  F_MALLOC_SAME,        /* malloc: RAL_OK and the same block every time */
  F_FREE_STATUS,        /* free: status 999 */
  F_STREAM_CREATE,      /* stream_create: status -1 */
  F_SYNC_STATUS,        /* stream_synchronize: status 31337 */
  F_QUERY_GARBAGE,      /* stream_query and event_query: status 99 / -4 */
  F_EVENT_NAN,          /* event_elapsed_ms: NaN */
  F_KERNEL_STATUS,      /* the add kernel returns 555 */
  F_KERNEL_OVERRUN,     /* the add kernel writes 64 bytes past its output */
  F_LAUNCH_STATUS,      /* launch returns 12345 without running the kernel */
  F_GET_KERNEL_NULL,    /* get_kernel: RAL_OK and a NULL kernel */
  F_STREAM_HANG,        /* after a launch, the stream never completes */
  F_EVENT_HANG,         /* a recorded event never completes */
  F_STREAM_SLOW,        /* a launch keeps its stream busy for RAL_CHAOS_SLOW_S seconds */
  F_COUNT
};

static const char* const k_faults[F_COUNT] = {
    "init_status",  "count_negative", "count_huge",      "count_status",     "info_status",
    "info_overflow", "info_garbage",  "name_overlong",   "last_error_null",  "last_error_long",
    "malloc_null",  "malloc_misaligned", "malloc_status", "malloc_same",     "free_status",
    "stream_create", "sync_status",   "query_garbage",   "event_nan",        "kernel_status",
    "kernel_overrun", "launch_status", "get_kernel_null", "stream_hang",     "event_hang",
    "stream_slow",
};

static int g_on[F_COUNT];
static int g_bad_name; /* RAL_CHAOS named a fault that does not exist */
#define ON(f) g_on[F_##f]

static void read_faults(void) {
  memset(g_on, 0, sizeof g_on);
  g_bad_name = 0;
  const char* env = getenv("RAL_CHAOS");
  for (const char* s = env ? env : ""; *s;) {
    size_t n = strcspn(s, ",");
    int found = 0;
    for (int f = 0; f < F_COUNT; f++)
      if (n && strlen(k_faults[f]) == n && strncmp(s, k_faults[f], n) == 0) g_on[f] = found = 1;
    if (n && !found) g_bad_name = 1;
    s += n;
    if (*s) s++;
  }
}

static char g_long[100001];
static char g_same[1 << 20] __attribute__((aligned(64)));
/* stream_hang / stream_slow: per device, whether (and since when) a launch is pending. */
static int g_stream_busy[MAX_DEVICES]; /* atomic: set by launch, read by waits */
static struct timespec g_busy_since[MAX_DEVICES];

static double seconds_since(const struct timespec* t) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - t->tv_sec) + (double)(now.tv_nsec - t->tv_nsec) / 1e9;
}

static int slow_pending(int32_t device) {
  const char* env = getenv("RAL_CHAOS_SLOW_S");
  double slow = env ? strtod(env, NULL) : 1.0;
  return ON(STREAM_SLOW) && device >= 0 && device < MAX_DEVICES &&
         __atomic_load_n(&g_stream_busy[device], __ATOMIC_ACQUIRE) &&
         seconds_since(&g_busy_since[device]) < slow;
}

static int hung(int32_t device) {
  return ON(STREAM_HANG) && device >= 0 && device < MAX_DEVICES &&
         __atomic_load_n(&g_stream_busy[device], __ATOMIC_ACQUIRE);
}

static const char* chaos_last_error(void) {
  if (ON(LAST_ERROR_NULL)) return NULL;
  if (ON(LAST_ERROR_LONG)) return g_long + sizeof g_long - 65537;
  return ral_sdk_last_error();
}

static ral_status chaos_init(void) {
  read_faults();
  if (g_bad_name) return fail(RAL_ERROR_INVALID_ARGUMENT, "RAL_CHAOS names an unknown fault");
  if (ON(INIT_STATUS)) return (ral_status)1234;
  return tpl_init();
}

static ral_status chaos_device_count(int32_t* count) {
  if (ON(COUNT_STATUS)) {
    *count = 1;
    return (ral_status)-9;
  }
  if (ON(COUNT_NEGATIVE)) *count = -5;
  else if (ON(COUNT_HUGE)) *count = 1 << 30;
  else return tpl_device_count(count);
  return RAL_OK;
}

static ral_status chaos_device_info(int32_t device, ral_device_info* info) {
  if (ON(INFO_STATUS)) return (ral_status)777;
  ral_status st = tpl_device_info(device, info);
  if (ON(INFO_GARBAGE)) {
    memset(info->name, 'N', sizeof info->name);
    memset(info->vendor, 'V', sizeof info->vendor);
    memset(info->type, 'T', sizeof info->type);
    memset(info->driver_version, 'D', sizeof info->driver_version);
    info->dtype_mask = info->flags = 0xFFFFFFFFu;
    info->max_rank = 1000;
    info->total_memory = info->max_alloc_size = UINT64_MAX;
    info->struct_size = 0xDEADBEEFu;
  }
  if (ON(INFO_OVERFLOW)) memset((char*)info + sizeof *info, 0x5A, 256); /* the bug under test */
  return st;
}

static ral_status chaos_malloc(int32_t device, uint64_t nbytes, void** ptr) {
  if (ON(MALLOC_NULL)) {
    *ptr = NULL;
    return RAL_OK;
  }
  if (ON(MALLOC_STATUS)) {
    *ptr = (void*)(uintptr_t)0xDEAD;
    return (ral_status)4242;
  }
  if (ON(MALLOC_SAME)) {
    *ptr = g_same;
    return nbytes <= sizeof g_same ? RAL_OK : fail(RAL_ERROR_OUT_OF_MEMORY, "too big");
  }
  ral_status st = tpl_malloc(device, nbytes + (ON(MALLOC_MISALIGNED) ? 64 : 0), ptr);
  if (st == RAL_OK && ON(MALLOC_MISALIGNED)) *ptr = (char*)*ptr + 8;
  return st;
}

static ral_status chaos_free(int32_t device, void* ptr) {
  if (ptr == (void*)g_same) return RAL_OK;
  if (ON(MALLOC_MISALIGNED)) ptr = (void*)((uintptr_t)ptr & ~(uintptr_t)63);
  tpl_free(device, ptr);
  return ON(FREE_STATUS) ? (ral_status)999 : RAL_OK;
}

static ral_status chaos_stream_create(int32_t device, ral_stream* stream) {
  if (ON(STREAM_CREATE)) return (ral_status)-1;
  return tpl_stream_create(device, stream);
}

static void sleep_forever(void) {
  for (;;) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

static ral_status chaos_stream_synchronize(int32_t device, ral_stream stream) {
  if (hung(device)) sleep_forever();
  while (slow_pending(device)) {
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (ON(SYNC_STATUS)) return (ral_status)31337;
  return tpl_stream_noop(device, stream);
}

static ral_status chaos_stream_query(int32_t device, ral_stream stream) {
  if (hung(device) || slow_pending(device)) return RAL_ERROR_NOT_READY;
  if (ON(QUERY_GARBAGE)) return (ral_status)99;
  return tpl_stream_noop(device, stream);
}

static ral_status chaos_event_record(int32_t device, ral_event event, ral_stream stream) {
  ral_status st = tpl_event_record(device, event, stream);
  if (ON(EVENT_HANG)) event->when.tv_sec = -1; /* marks the event as never completing */
  return st;
}

static ral_status chaos_event_synchronize(int32_t device, ral_event event) {
  if (ON(EVENT_HANG) && event->when.tv_sec == -1) sleep_forever();
  return tpl_event_noop(device, event);
}

static ral_status chaos_event_query(int32_t device, ral_event event) {
  if (ON(EVENT_HANG) && event->when.tv_sec == -1) return RAL_ERROR_NOT_READY;
  if (ON(QUERY_GARBAGE)) return (ral_status)-4;
  return tpl_event_noop(device, event);
}

static ral_status chaos_event_elapsed_ms(int32_t device, ral_event start, ral_event end, float* ms) {
  ral_status st = tpl_event_elapsed_ms(device, start, end, ms);
  if (ON(EVENT_NAN)) *ms = __builtin_nanf("");
  return st;
}

/* aten::add.Tensor, with the kernel faults. */
static ral_status chaos_add(const ral_kernel_call* call) {
  if (ON(KERNEL_STATUS)) return (ral_status)555;
  ral_status st = template_add_f32(call);
  if (st == RAL_OK && ON(KERNEL_OVERRUN)) {
    const ral_tensor* out = &call->tensors[0];
    char* end = (char*)ral_sdk_data(out) + ral_sdk_numel(out) * (int64_t)sizeof(float);
    memset(end, 0x77, 64); /* the bug under test */
  }
  return st;
}

static ral_status chaos_get_kernel(const char* symbol, ral_kernel_fn* kernel) {
  if (ON(GET_KERNEL_NULL)) {
    *kernel = NULL;
    return RAL_OK;
  }
  if (strcmp(symbol, "chaos_add") == 0) {
    *kernel = chaos_add;
    return RAL_OK;
  }
  return tpl_get_kernel(symbol, kernel);
}

static ral_status chaos_launch(ral_kernel_fn kernel, const ral_kernel_call* call) {
  if (ON(LAUNCH_STATUS)) return (ral_status)12345;
  if (ON(STREAM_HANG) || ON(STREAM_SLOW)) {
    int32_t d = call->device;
    if (d < 0 || d >= MAX_DEVICES) return fail(RAL_ERROR_INVALID_ARGUMENT, "device %d", d);
    clock_gettime(CLOCK_MONOTONIC, &g_busy_since[d]);
    __atomic_store_n(&g_stream_busy[d], 1, __ATOMIC_RELEASE);
    if (ON(STREAM_HANG)) return RAL_OK; /* queued forever: never runs */
  }
  return kernel(call);
}

static void customize(ral_plugin_api* api) {
  read_faults();
  memset(g_long, 'L', sizeof g_long - 1);
  if (ON(NAME_OVERLONG)) api->plugin_name = api->plugin_version = g_long;
  api->init = chaos_init;
  api->device_count = chaos_device_count;
  api->device_info = chaos_device_info;
  api->malloc = chaos_malloc;
  api->free = chaos_free;
  api->stream_create = chaos_stream_create;
  api->stream_synchronize = chaos_stream_synchronize;
  api->stream_query = chaos_stream_query;
  api->event_record = chaos_event_record;
  api->event_synchronize = chaos_event_synchronize;
  api->event_query = chaos_event_query;
  api->event_elapsed_ms = chaos_event_elapsed_ms;
  api->get_kernel = chaos_get_kernel;
  api->launch = chaos_launch;
  api->last_error = chaos_last_error;
}
