/* device_manager.c -- global device numbering over all plugins, the visible-device
 * mapping (TORCH_FL_VISIBLE_DEVICES) and rt_init / rt_rescan.
 *
 * Physical devices are numbered in plugin load order and only ever appended. The
 * visible table maps "ral:N" to a physical device; entries are published with a
 * release store of n_visible so the hot path reads them without a lock. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

rt_globals g_rt = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int parse_visible(const char* text) {
  g_rt.has_want = 1;
  g_rt.n_want = 0;
  for (const char* s = text; *s;) {
    while (isspace((unsigned char)*s) || *s == ',') s++;
    if (!*s) break;
    char* end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 0 || v >= RT_MAX_DEVICES || g_rt.n_want >= RT_MAX_DEVICES)
      return rt_fail(RAL_ERROR_INVALID_ARGUMENT,
                     "TORCH_FL_VISIBLE_DEVICES='%s' must be a comma-separated list of device "
                     "indices, e.g. \"1,0\"",
                     text);
    for (int i = 0; i < g_rt.n_want; i++)
      if (g_rt.want[i] == v)
        return rt_fail(RAL_ERROR_INVALID_ARGUMENT,
                       "TORCH_FL_VISIBLE_DEVICES='%s' lists device %ld twice", text, v);
    g_rt.want[g_rt.n_want++] = (int)v;
    s = end;
  }
  return RAL_OK;
}

int rt_dm_read_env(void) {
  const char* visible = getenv("TORCH_FL_VISIBLE_DEVICES");
  if (visible && parse_visible(visible) != RAL_OK) return RAL_ERROR_INVALID_ARGUMENT;
  const char* checked = getenv("TORCH_FL_CHECKED");
  g_rt.checked = checked && strcmp(checked, "1") == 0;
  const char* timeout = getenv("TORCH_FL_DEVICE_TIMEOUT");
  if (timeout && *timeout) {
    char* end;
    double seconds = strtod(timeout, &end);
    while (isspace((unsigned char)*end)) end++;
    if (end == timeout || *end || rt_set_device_timeout(seconds) != RAL_OK)
      return rt_fail(RAL_ERROR_INVALID_ARGUMENT,
                     "TORCH_FL_DEVICE_TIMEOUT='%s' must be a number of seconds >= 0 (0 waits "
                     "forever)",
                     timeout);
  }
  const char* limit = getenv("TORCH_FL_MEMORY_LIMIT");
  if (limit && rt_parse_size_str(limit, &g_rt.default_limit) != 0)
    return rt_fail(RAL_ERROR_INVALID_ARGUMENT,
                   "TORCH_FL_MEMORY_LIMIT='%s' is not a memory size (examples: 512MB, 2GiB, "
                   "1048576)",
                   limit);
  return RAL_OK;
}

static int is_visible(const rt_device* dev) { return dev->global >= 0; }

static void publish(rt_device* dev) {
  int n = atomic_load(&g_rt.n_visible);
  dev->global = n;
  g_rt.visible[n] = dev;
  atomic_store_explicit(&g_rt.n_visible, n + 1, memory_order_release);
}

/* Append newly discovered physical devices to the visible table, keeping old indices. */
static void map_visible(void) {
  if (!g_rt.has_want) {
    for (int i = 0; i < g_rt.n_phys; i++)
      if (!is_visible(g_rt.phys[i])) publish(g_rt.phys[i]);
    return;
  }
  for (int k = 0; k < g_rt.n_want; k++) {
    int i = g_rt.want[k];
    if (i < g_rt.n_phys && !is_visible(g_rt.phys[i])) publish(g_rt.phys[i]);
  }
}

/* device_info into a scratch copy with a guard zone after it: a plugin that writes past
 * struct_size (built against a larger struct, or simply buggy) is caught instead of
 * overwriting the runtime's device table. Then every field is made sane. */
#define INFO_GUARD 4096
static int read_info(rt_plugin* p, int32_t i, ral_device_info* out) {
  union {
    ral_device_info info;
    unsigned char bytes[sizeof(ral_device_info) + INFO_GUARD];
  }* scratch = calloc(1, sizeof *scratch);
  if (!scratch) return rt_fail(RAL_ERROR_OUT_OF_MEMORY, "no host memory for a device descriptor");
  scratch->info.struct_size = sizeof scratch->info;
  int st = p->api.device_info(i, &scratch->info);
  size_t past = 0;
  for (size_t k = sizeof scratch->info; k < sizeof scratch->bytes && !past; k++)
    if (scratch->bytes[k]) past = k;
  *out = scratch->info;
  free(scratch);
  if (st != RAL_OK) return rt_plugin_fail(p, st, "device_info(%d)", i);
  if (past)
    return rt_plugin_fail(p, RAL_ERROR_INTERNAL,
                          "device_info(%d) wrote past the %zu bytes of struct_size (byte %zu)", i,
                          sizeof *out, past);
  /* Untrusted strings: make sure each one ends inside its field. */
  out->struct_size = sizeof *out;
  out->name[sizeof out->name - 1] = 0;
  out->vendor[sizeof out->vendor - 1] = 0;
  out->type[sizeof out->type - 1] = 0;
  out->driver_version[sizeof out->driver_version - 1] = 0;
  /* Bits and ranks this ABI does not define mean nothing to anyone above. */
  out->dtype_mask &= (1u << RAL_DTYPE_COUNT) - 1;
  out->flags &= RAL_DEVICE_HOST_MAPPABLE | RAL_DEVICE_HAS_DMA | RAL_DEVICE_FP16 | RAL_DEVICE_BF16;
  if (out->max_rank > RAL_MAX_RANK) out->max_rank = RAL_MAX_RANK;
  return RAL_OK;
}

int rt_dm_add_plugin_devices(rt_plugin* p, int32_t count) {
  if (g_rt.n_phys + count > RT_MAX_DEVICES)
    return rt_fail(RAL_ERROR_INTERNAL, "more than %d devices", RT_MAX_DEVICES);
  rt_device* devs = calloc((size_t)count + 1, sizeof *devs);
  if (!devs) return rt_fail(RAL_ERROR_OUT_OF_MEMORY, "no host memory for device records");
  for (int32_t i = 0; i < count; i++) {
    int st = read_info(p, i, &devs[i].info);
    if (st != RAL_OK) {
      free(devs);
      return st;
    }
  }
  for (int32_t i = 0; i < count; i++) {
    rt_device* dev = &devs[i];
    dev->plugin = p;
    dev->local = i;
    dev->global = -1;
    atomic_init(&dev->present, 1);
    atomic_init(&dev->launches, 0);
    pthread_mutex_init(&dev->lock, NULL);
    pthread_cond_init(&dev->finished_cv, NULL);
    rt_pool_init(dev);
    g_rt.phys[g_rt.n_phys++] = dev;
  }
  p->rec.n_devices = count;
  map_visible();
  return RAL_OK;
}

void rt_dm_set_present(rt_plugin* p, int present) {
  for (int i = 0; i < g_rt.n_phys; i++)
    if (g_rt.phys[i]->plugin == p && !rt_device_hung(g_rt.phys[i]))
      atomic_store(&g_rt.phys[i]->present, present);
}

int rt_dev_get_any(int32_t device, rt_device** out) {
  if (device < 0 || device >= atomic_load_explicit(&g_rt.n_visible, memory_order_acquire))
    return rt_fail(RAL_ERROR_INVALID_ARGUMENT, "device %d does not exist (%d visible devices)",
                   device, atomic_load(&g_rt.n_visible));
  *out = g_rt.visible[device];
  return RAL_OK;
}

int rt_dev_get(int32_t device, rt_device** out) {
  int st = rt_dev_get_any(device, out);
  if (st == RAL_OK && rt_device_hung(*out)) return rt_device_lost_error(*out);
  if (st == RAL_OK && !atomic_load_explicit(&(*out)->present, memory_order_relaxed))
    return rt_fail(RAL_ERROR_DEVICE_LOST, "device %d ([%s] %s) is gone: %s", device,
                   (*out)->plugin->rec.name, (*out)->info.name, (*out)->plugin->rec.reason);
  return st;
}

/* Public: discover and load plugins (idempotent). */
int rt_init(const char* builtin_dir) {
  pthread_mutex_lock(&g_rt.lock);
  int st = RAL_OK;
  if (!g_rt.initialized && (st = rt_dm_read_env()) == RAL_OK) {
    rt_copy_str(g_rt.builtin_dir, sizeof g_rt.builtin_dir, builtin_dir);
    st = rt_loader_scan();
    g_rt.initialized = 1;
  }
  pthread_mutex_unlock(&g_rt.lock);
  return st;
}

/* Public: rescan the roots for new, fixed or vanished plugins. */
int rt_rescan(void) {
  pthread_mutex_lock(&g_rt.lock);
  int st = g_rt.initialized ? rt_loader_scan()
                            : rt_fail(RAL_ERROR_INVALID_ARGUMENT, "rt_init() has not been called");
  pthread_mutex_unlock(&g_rt.lock);
  return st;
}

/* Public: number of plugin records (any status). */
int rt_plugin_count(void) { return atomic_load(&g_rt.n_plugins); }

/* Public: copy one plugin record. */
int rt_plugin_get(int32_t plugin, rt_plugin_record* out) {
  pthread_mutex_lock(&g_rt.lock);
  int st = RAL_OK;
  if (plugin < 0 || plugin >= atomic_load(&g_rt.n_plugins))
    st = rt_fail(RAL_ERROR_INVALID_ARGUMENT, "plugin %d does not exist", plugin);
  else
    *out = g_rt.plugins[plugin]->rec;
  pthread_mutex_unlock(&g_rt.lock);
  return st;
}

/* Public: number of visible devices. */
int rt_device_count(void) { return atomic_load_explicit(&g_rt.n_visible, memory_order_acquire); }

/* Public: describe one visible device. */
int rt_device_get(int32_t device, rt_device_record* out) {
  rt_device* dev;
  int st = rt_dev_get_any(device, &dev);
  if (st != RAL_OK) return st;
  out->plugin = dev->plugin->index;
  out->local_index = dev->local;
  out->present = atomic_load(&dev->present);
  out->info = dev->info;
  return RAL_OK;
}

/* Public: launches that reached the plugin for this device. */
uint64_t rt_launch_count(int32_t device) {
  rt_device* dev;
  return rt_dev_get_any(device, &dev) == RAL_OK ? atomic_load(&dev->launches) : 0;
}
