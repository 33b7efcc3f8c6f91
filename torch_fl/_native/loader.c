/* loader.c -- plugin discovery, dlopen, entry-table checks and rescan (hot plug).
 *
 * A plugin directory holds one lib*.so (the first by name is taken) and manifest.json.
 * Records are never removed: a directory that vanishes turns its record GONE, so
 * plugin and device indices stay stable for the life of the process. A GONE plugin is
 * not dlclose()d, because threads may still be inside its code. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ral_trust.h"
#include "rt_internal.h"

#define SYSTEM_ROOT "/opt/torch_fl/plugins"
#define MAX_DEVICES_PER_PLUGIN 256

const char* rt_system_plugin_root(void) {
  const char* over = getenv("TORCH_FL_SYSTEM_PLUGIN_DIR");
  return over && *over ? over : SYSTEM_ROOT;
}

#define REQUIRED(field) {#field, offsetof(ral_plugin_api, field)}
static const struct {
  const char* name;
  size_t offset;
} k_required[] = {
    REQUIRED(init),          REQUIRED(shutdown),           REQUIRED(device_count),
    REQUIRED(device_info),   REQUIRED(malloc),             REQUIRED(free),
    REQUIRED(memcpy_h2d),    REQUIRED(memcpy_d2h),         REQUIRED(memcpy_d2d),
    REQUIRED(stream_create), REQUIRED(stream_destroy),     REQUIRED(stream_synchronize),
    REQUIRED(stream_query),  REQUIRED(event_create),       REQUIRED(event_destroy),
    REQUIRED(event_record),  REQUIRED(event_synchronize),  REQUIRED(event_query),
    REQUIRED(stream_wait_event), REQUIRED(event_elapsed_ms), REQUIRED(get_kernel),
    REQUIRED(launch),
};
/* Every ABI 1.x table is at least this long: it ends with the last REQUIRED entry. */
static const size_t k_required_end = offsetof(ral_plugin_api, launch) + sizeof(void*);

static int is_dir(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static const char* base_name(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

static int set_status(rt_plugin* p, int status, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int set_status(rt_plugin* p, int status, const char* fmt, ...) {
  p->rec.status = status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->rec.reason, sizeof p->rec.reason, fmt, ap);
  va_end(ap);
  return status;
}

/* The plugin library of a directory: the first lib*.so by name, "" if none. */
static void find_library(const char* dir, char* out, size_t cap) {
  struct dirent** names = NULL;
  int n = scandir(dir, &names, NULL, alphasort);
  out[0] = 0;
  for (int i = 0; i < n; i++) {
    const char* f = names[i]->d_name;
    size_t len = strlen(f);
    if (!out[0] && strncmp(f, "lib", 3) == 0 && len > 6 && strcmp(f + len - 3, ".so") == 0) {
      size_t dlen = strlen(dir);
      if (dlen + 1 + len < cap) {
        memcpy(out, dir, dlen);
        out[dlen] = '/';
        memcpy(out + dlen + 1, f, len + 1);
        if (!is_file(out)) out[0] = 0;
      }
    }
    free(names[i]);
  }
  free(names);
}

/* Another live record (not GONE) that already uses this name, or NULL. */
static const rt_plugin* find_owner(const rt_plugin* self, const char* name) {
  int n = atomic_load(&g_rt.n_plugins);
  for (int i = 0; i < n; i++) {
    const rt_plugin* q = g_rt.plugins[i];
    if (q == self || q->rec.status == RT_PLUGIN_GONE || q->rec.status == RT_PLUGIN_SHADOWED)
      continue;
    if (strcmp(q->rec.name, name) == 0 || strcmp(base_name(q->rec.dir), name) == 0) return q;
  }
  return NULL;
}

static void unload(rt_plugin* p) {
  if (p->dl) dlclose(p->dl);
  p->dl = NULL;
  memset(&p->api, 0, sizeof p->api);
}

static int classify_dlopen_error(rt_plugin* p) {
  const char* err = dlerror();
  if (!err) err = "dlopen failed without a message";
  /* "libfoo.so.1: cannot open shared object file" names a dependency; an error that
   * starts with our own path is about the plugin file itself. */
  int dep = strstr(err, "cannot open shared object file") != NULL &&
            strncmp(err, p->rec.library, strlen(p->rec.library)) != 0;
  return set_status(p, dep ? RT_PLUGIN_MISSING_DEPS : RT_PLUGIN_LOAD_FAILED, "%s", err);
}

/* Copy the plugin's table, never reading past its struct_size. */
static int adopt_table(rt_plugin* p, const ral_plugin_api* t) {
  /* struct_size and the version always lead the table, whatever the ABI. */
  p->rec.abi_major = t->abi_major;
  p->rec.abi_minor = t->abi_minor;
  if (t->abi_major != RAL_ABI_MAJOR)
    return set_status(p, RT_PLUGIN_ABI_MISMATCH,
                      "plugin is built for ABI %u.%u; this runtime implements ABI %d.%d",
                      t->abi_major, t->abi_minor, RAL_ABI_MAJOR, RAL_ABI_MINOR);
  if (t->struct_size < k_required_end)
    return set_status(p, RT_PLUGIN_LOAD_FAILED,
                      "struct_size %u is smaller than the %zu bytes of ABI 1.0's required "
                      "entries",
                      t->struct_size, k_required_end);
  size_t n = t->struct_size < sizeof p->api ? t->struct_size : sizeof p->api;
  memset(&p->api, 0, sizeof p->api);
  memcpy(&p->api, t, n);
  for (size_t i = 0; i < sizeof k_required / sizeof k_required[0]; i++) {
    void* entry;
    memcpy(&entry, (const char*)&p->api + k_required[i].offset, sizeof entry);
    if (!entry)
      return set_status(p, RT_PLUGIN_LOAD_FAILED, "required entry '%s' is NULL",
                        k_required[i].name);
  }
  if (p->api.plugin_name && p->api.plugin_name[0])
    rt_copy_str(p->rec.name, sizeof p->rec.name, p->api.plugin_name);
  rt_copy_str(p->rec.version, sizeof p->rec.version, p->api.plugin_version);
  p->rec.has_compile = p->api.compile && p->api.module_get_kernel && p->api.module_destroy;
  return set_status(p, RT_PLUGIN_LOADED, "%s", "");
}

/* A status a plugin may return (the ral_status enum), as opposed to garbage. */
static int known_status(int st) { return st >= RAL_OK && st <= RAL_ERROR_LOAD_FAILED; }

static int start_plugin(rt_plugin* p) {
  int st = p->api.init();
  if (st != RAL_OK) {
    const char* msg = p->api.last_error ? p->api.last_error() : NULL;
    if (st == RAL_ERROR_MISSING_DEPS)
      return set_status(p, RT_PLUGIN_MISSING_DEPS, "%.900s",
                        msg && msg[0] ? msg : "init() reported a missing dependency");
    return set_status(p, known_status(st) ? RT_PLUGIN_LOAD_FAILED : RT_PLUGIN_FAILED,
                      "init() failed: %s (%d): %.900s", rt_status_name(st), st, msg ? msg : "");
  }
  int32_t count = -1;
  st = p->api.device_count(&count);
  if (st != RAL_OK && known_status(st))
    set_status(p, RT_PLUGIN_LOAD_FAILED, "device_count() returned %s", rt_status_name(st));
  else if (st != RAL_OK || count < 0 || count > MAX_DEVICES_PER_PLUGIN)
    set_status(p, RT_PLUGIN_FAILED,
               "device_count() returned status %d with count %d (a status outside the enum, or "
               "a count outside 0..%d)",
               st, count, MAX_DEVICES_PER_PLUGIN);
  else if ((st = rt_dm_add_plugin_devices(p, count)) != RAL_OK)
    set_status(p, st == RAL_ERROR_INTERNAL ? RT_PLUGIN_FAILED : RT_PLUGIN_LOAD_FAILED, "%s",
               rt_last_error());
  else
    return set_status(p, RT_PLUGIN_LOADED, "%s", "");
  p->api.shutdown();
  return p->rec.status;
}

/* Whether TORCH_FL_ALLOW_INSECURE_PLUGINS accepts the plugin folder `dir`: "1" accepts
 * every plugin, anything else is a colon-separated list of folders (a plugin folder or a
 * folder above it, such as a discovery root). */
static int insecure_allowed(const char* dir) {
  const char* env = getenv("TORCH_FL_ALLOW_INSECURE_PLUGINS");
  if (!env || !*env) return 0;
  if (strcmp(env, "1") == 0) return 1;
  for (const char* s = env; *s;) {
    size_t len = strcspn(s, ":");
    size_t n = len;
    while (n > 1 && s[n - 1] == '/') n--;
    if (n && strncmp(dir, s, n) == 0 && (dir[n] == 0 || dir[n] == '/' || (n == 1 && s[0] == '/')))
      return 1;
    s += len;
    if (*s) s++;
  }
  return 0;
}

/* Check the folder, the manifest and the library (include/ral_trust.h) before any code
 * of the plugin runs. An administrator's TORCH_FL_ALLOW_INSECURE_PLUGINS turns a refusal
 * into a note kept in `accepted` ("" when everything passed). */
static int check_trust(rt_plugin* p, char* accepted, size_t cap) {
  char manifest[RT_PATH_MAX + 16], why[RT_PATH_MAX + 64] = "";
  snprintf(manifest, sizeof manifest, "%s/manifest.json", p->rec.dir);
  const char* paths[] = {p->rec.dir, manifest, p->rec.library};
  accepted[0] = 0;
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    if (ral_trust_path(paths[i], 0, why, sizeof why) == 0) continue;
    if (!insecure_allowed(p->rec.dir)) return set_status(p, RT_PLUGIN_INSECURE, "%s", why);
    snprintf(accepted, cap, "INSECURE, accepted by TORCH_FL_ALLOW_INSECURE_PLUGINS: %s", why);
    break;
  }
  return RT_PLUGIN_LOADED;
}

int rt_trust_path(const char* path, int32_t exact_owner, char* why, uint64_t cap) {
  if (!path || !why || cap == 0) return -1; /* no answer: the caller treats it as untrusted */
  return ral_trust_path(path, exact_owner, why, (size_t)cap) == 0 ? 0 : 1;
}

/* dlopen the library, call the entry symbol and adopt its table. */
static int open_table(rt_plugin* p, char* accepted, size_t cap) {
  find_library(p->rec.dir, p->rec.library, sizeof p->rec.library);
  if (!p->rec.library[0])
    return set_status(p, RT_PLUGIN_LOAD_FAILED, "no lib*.so in %s", p->rec.dir);
  if (check_trust(p, accepted, cap) != RT_PLUGIN_LOADED) return p->rec.status;
  dlerror();
  p->dl = dlopen(p->rec.library, RTLD_NOW | RTLD_LOCAL);
  if (!p->dl) return classify_dlopen_error(p);
  ral_plugin_entry_fn entry;
  *(void**)&entry = dlsym(p->dl, RAL_PLUGIN_ENTRY_SYMBOL);
  if (!entry)
    return set_status(p, RT_PLUGIN_LOAD_FAILED, "%s does not export %s", p->rec.library,
                      RAL_PLUGIN_ENTRY_SYMBOL);
  const ral_plugin_api* table = entry(RAL_ABI_MAJOR, RAL_ABI_MINOR);
  if (!table)
    return set_status(p, RT_PLUGIN_LOAD_FAILED, "%s returned no table for ABI %d.%d",
                      RAL_PLUGIN_ENTRY_SYMBOL, RAL_ABI_MAJOR, RAL_ABI_MINOR);
  return adopt_table(p, table);
}

static int shadow(rt_plugin* p, const rt_plugin* owner) {
  return set_status(p, RT_PLUGIN_SHADOWED, "plugin '%s' is already provided by %s",
                    p->rec.name, owner->rec.dir);
}

/* (Re)load the plugin of p->rec.dir into p; sets status and reason. */
static void load(rt_plugin* p) {
  p->rec.abi_major = p->rec.abi_minor = p->rec.has_compile = 0;
  rt_copy_str(p->rec.name, sizeof p->rec.name, base_name(p->rec.dir));
  const rt_plugin* owner = find_owner(p, p->rec.name);
  if (owner) {
    shadow(p, owner);
    return;
  }
  char accepted[RT_PATH_MAX + 128] = "";
  rt_marker_enter(p->rec.dir); /* vendor code runs from here: init_marker.c */
  int st = open_table(p, accepted, sizeof accepted);
  if (st == RT_PLUGIN_LOADED && (owner = find_owner(p, p->rec.name))) st = shadow(p, owner);
  if (st == RT_PLUGIN_LOADED) st = start_plugin(p);
  rt_marker_leave();
  if (st != RT_PLUGIN_LOADED) unload(p);
  else if (accepted[0]) set_status(p, RT_PLUGIN_LOADED, "%s", accepted);
}

static rt_plugin* find_record(const char* dir) {
  int n = atomic_load(&g_rt.n_plugins);
  for (int i = 0; i < n; i++)
    if (strcmp(g_rt.plugins[i]->rec.dir, dir) == 0) return g_rt.plugins[i];
  return NULL;
}

static void visit_plugin_dir(const char* dir, int source) {
  rt_plugin* p = find_record(dir);
  if (!p) {
    int n = atomic_load(&g_rt.n_plugins);
    if (n >= RT_MAX_PLUGINS || !(p = calloc(1, sizeof *p))) return;
    p->index = n;
    p->rec.source = source;
    rt_copy_str(p->rec.dir, sizeof p->rec.dir, dir);
    p->rec.status = RT_PLUGIN_LOAD_FAILED;
    g_rt.plugins[n] = p;
    atomic_store(&g_rt.n_plugins, n + 1);
  }
  p->seen = g_rt.generation;
  if (p->rec.status == RT_PLUGIN_LOADED) {
    if (!is_file(p->rec.library)) {
      set_status(p, RT_PLUGIN_GONE, "plugin library %s was removed", p->rec.library);
      rt_dm_set_present(p, 0);
    }
    return;
  }
  if (p->rec.status == RT_PLUGIN_GONE && p->dl) {
    /* Replugged: the library was never unloaded, so its devices simply come back. */
    if (!is_file(p->rec.library)) return;
    set_status(p, RT_PLUGIN_LOADED, "%s", "");
    rt_dm_set_present(p, 1);
    return;
  }
  p->rec.source = source;
  load(p);
}

/* Builtin order: host, opencl, cuda, then the rest by name. */
static int builtin_rank(const char* name) {
  static const char* const first[] = {"host", "opencl", "cuda"};
  for (int i = 0; i < 3; i++)
    if (strcmp(name, first[i]) == 0) return i;
  return 3;
}

static int compare_builtin(const struct dirent** a, const struct dirent** b) {
  int ra = builtin_rank((*a)->d_name), rb = builtin_rank((*b)->d_name);
  return ra != rb ? ra - rb : strcmp((*a)->d_name, (*b)->d_name);
}

static int compare_name(const struct dirent** a, const struct dirent** b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

static int not_hidden(const struct dirent* d) { return d->d_name[0] != '.'; }

static void scan_root(const char* root, int source) {
  struct dirent** names = NULL;
  int n = scandir(root, &names, not_hidden,
                  source == RT_SOURCE_BUILTIN ? compare_builtin : compare_name);
  for (int i = 0; i < n; i++) {
    char dir[RT_PATH_MAX];
    int len = snprintf(dir, sizeof dir, "%s/%s", root, names[i]->d_name);
    char manifest[RT_PATH_MAX + 16];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", dir);
    /* A directory is a plugin if it has a manifest or an existing record. */
    if (len < (int)sizeof dir && is_dir(dir) && (is_file(manifest) || find_record(dir)) &&
        !rt_plugin_skipped(dir))
      visit_plugin_dir(dir, source);
    free(names[i]);
  }
  free(names);
}

int rt_loader_scan(void) {
  g_rt.generation++;
  if (g_rt.builtin_dir[0]) scan_root(g_rt.builtin_dir, RT_SOURCE_BUILTIN);
  const char* env = getenv("TORCH_FL_PLUGIN_PATH");
  if (env) {
    char* copy = strdup(env);
    char* save = NULL;
    for (char* dir = copy ? strtok_r(copy, ":", &save) : NULL; dir;
         dir = strtok_r(NULL, ":", &save))
      scan_root(dir, RT_SOURCE_ENV_PATH);
    free(copy);
  }
  scan_root(rt_system_plugin_root(), RT_SOURCE_SYSTEM);

  int n = atomic_load(&g_rt.n_plugins);
  for (int i = 0; i < n; i++) {
    rt_plugin* p = g_rt.plugins[i];
    if (p->seen == g_rt.generation || p->rec.status == RT_PLUGIN_GONE) continue;
    int was_loaded = p->rec.status == RT_PLUGIN_LOADED;
    set_status(p, RT_PLUGIN_GONE, "plugin directory %s was removed", p->rec.dir);
    if (was_loaded) rt_dm_set_present(p, 0);
  }
  return RAL_OK;
}
