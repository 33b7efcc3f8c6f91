/*
 * program_cache.c -- compiled program binaries on disk, so a second process skips the
 * OpenCL compiler. Files live in $XDG_CACHE_HOME/torch_fl/opencl (or ~/.cache/...),
 * named by a hash of (platform, device, driver version, options, source). Each starts
 * with a header holding the payload size and checksum: a truncated or corrupt entry is
 * treated as a miss and rebuilt. An unwritable directory just means no cache.
 * The checksum only catches torn writes; what keeps planted binaries out is that a
 * folder or file someone else could write is not used (include/ral_trust.h): the cache
 * then moves to a private temporary folder for the rest of the process, with one warning.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ocl.h"
#include "ral_trust.h"

#define MAGIC "RALOCLB1"

typedef struct {
  char magic[8];
  uint64_t size;
  uint64_t checksum;
  char key[32];
} cache_header;

static uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const unsigned char* p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t fnv_str(uint64_t h, const char* s) { return fnv1a(h, s, strlen(s) + 1); }

void ocl_cache_key(const ocl_device* d, const char* source, const char* options, char out[33]) {
  uint64_t h[2] = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull};
  for (int i = 0; i < 2; i++) {
    h[i] = fnv_str(h[i], d->platform_name);
    h[i] = fnv_str(h[i], d->name);
    h[i] = fnv_str(h[i], d->driver);
    h[i] = fnv_str(h[i], options ? options : "");
    h[i] = fnv_str(h[i], source);
  }
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)h[0], (unsigned long long)h[1]);
}

static int g_private; /* set once the usual folder (or one of its files) is untrusted */
static int g_warned_dir, g_warned_file;
#define PRIVATE_INSTEAD "a private temporary folder (nothing is cached across processes)"

static int private_dir(char* out, size_t cap) {
  const char* dir = ral_trust_private_dir();
  int n = dir ? snprintf(out, cap, "%s", dir) : -1;
  return n > 0 && (size_t)n < cap;
}

/* The cache directory, created on demand; 0 if there is no usable one. */
static int cache_dir(char* out, size_t cap) {
  const char* xdg = getenv("XDG_CACHE_HOME");
  const char* home = getenv("HOME");
  int n;
  if (__atomic_load_n(&g_private, __ATOMIC_ACQUIRE)) return private_dir(out, cap);
  if (xdg && xdg[0] == '/')
    n = snprintf(out, cap, "%s/torch_fl/opencl", xdg);
  else if (home && home[0])
    n = snprintf(out, cap, "%s/.cache/torch_fl/opencl", home);
  else
    return 0;
  if (n <= 0 || (size_t)n >= cap) return 0;
  /* mkdir -p, tolerating components that already exist */
  for (char* p = out + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    int bad = mkdir(out, 0755) != 0 && errno != EEXIST;
    *p = '/';
    if (bad) return 0;
  }
  if (mkdir(out, 0755) != 0 && errno != EEXIST) return 0;
  char why[4200];
  if (ral_trust_path(out, 1, why, sizeof why) == 0) return 1;
  ral_trust_warn_once(&g_warned_dir, "the OpenCL binary cache folder", why, PRIVATE_INSTEAD);
  __atomic_store_n(&g_private, 1, __ATOMIC_RELEASE);
  return private_dir(out, cap);
}

int ocl_cache_file(const char* name, char* out, size_t cap) {
  char dir[4096];
  if (!cache_dir(dir, sizeof dir)) return 0;
  int n = snprintf(out, cap, "%s/%s", dir, name);
  return n > 0 && (size_t)n < cap;
}

static int entry_path(const char* key, char* out, size_t cap) {
  char dir[4096];
  if (!cache_dir(dir, sizeof dir)) return 0;
  int n = snprintf(out, cap, "%s/%s.bin", dir, key);
  return n > 0 && (size_t)n < cap;
}

int ocl_cache_load(const char* key, unsigned char** data, size_t* size) {
  char path[4200];
  *data = NULL;
  if (!entry_path(key, path, sizeof path)) return -1;
  char why[4300];
  if (access(path, F_OK) == 0 && ral_trust_path(path, 1, why, sizeof why) != 0) {
    ral_trust_warn_once(&g_warned_file, "an OpenCL binary cache file", why, PRIVATE_INSTEAD);
    __atomic_store_n(&g_private, 1, __ATOMIC_RELEASE);
    return -1;
  }
  FILE* f = fopen(path, "rb");
  if (!f) return -1;
  cache_header h;
  unsigned char* buf = NULL;
  int ok = fread(&h, sizeof h, 1, f) == 1 && memcmp(h.magic, MAGIC, 8) == 0 &&
           memcmp(h.key, key, 32) == 0 && h.size > 0 && h.size < ((uint64_t)1 << 32);
  if (ok) ok = (buf = malloc(h.size)) != NULL && fread(buf, 1, h.size, f) == h.size && fgetc(f) == EOF;
  fclose(f);
  if (ok) ok = fnv1a(0xcbf29ce484222325ull, buf, h.size) == h.checksum;
  if (!ok) {
    free(buf);
    unlink(path); /* corrupt or stale: the rebuild writes a fresh entry */
    return -1;
  }
  *data = buf;
  *size = h.size;
  return 0;
}

void ocl_cache_store(const char* key, const unsigned char* data, size_t size) {
  char path[4200], tmp[4300];
  if (!entry_path(key, path, sizeof path)) return;
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  FILE* f = fopen(tmp, "wb");
  if (!f) return;
  cache_header h;
  memcpy(h.magic, MAGIC, 8);
  h.size = size;
  h.checksum = fnv1a(0xcbf29ce484222325ull, data, size);
  memcpy(h.key, key, 32);
  int ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(data, 1, size, f) == size;
  ok = (fclose(f) == 0) && ok;
  /* rename is atomic: a concurrent reader sees the old entry or the whole new one */
  if (!ok || rename(tmp, path) != 0) unlink(tmp);
}
