/*
 * compile.c -- the jit tier's `compile` entry: C source -> shared object -> kernels.
 *
 * Contract (also in README.md):
 *   compile(device, "c", source, options, &module)
 *   - lang must be "c", else RAL_ERROR_UNSUPPORTED.
 *   - source is a complete C11 translation unit that includes "ral_plugin.h" and defines
 *     one or more ral_kernel_fn functions marked RAL_PLUGIN_EXPORT.
 *   - options are extra compiler flags separated by whitespace (no shell quoting: each
 *     word becomes one argv entry). The caller passes -I<dir of ral_plugin.h>; the
 *     include dir this plugin was built against is added after them as a fallback.
 *   - the compiler is $CC (one program name or path; extra words in $CC become leading
 *     arguments) or `cc`, run as argv via posix_spawn (no shell) with
 *     -O3 -march=<level> -fPIC -shared -fopenmp -std=c11 -o <out> <source> <options>;
 *     <level> is x86-64-v4 with AVX-512 (F, BW, DQ, VL), x86-64-v3 with AVX2 and FMA, else x86-64-v2 (a jit kernel
 *     runs where it was built; the level is in the cache key). Options come after the
 *     source so libraries they name (-lmvec) link even where the linker drops unused
 *     ones (--as-needed).
 *   - the .so is cached in ${XDG_CACHE_HOME:-~/.cache}/torch_fl/host-jit/<sha256>.so,
 *     the hash covering the compiler's --version text, the argv and the source. It is
 *     written under a unique temporary name in that folder and rename()d into place, so
 *     concurrent compiles of one kernel (threads or processes) are safe. Each file ends
 *     in a trailer holding the sha256 of the bytes before it; a cached file whose trailer
 *     does not match (torn by a crash or a full disk: dlopen of a truncated ELF can die
 *     of SIGBUS, so it must never reach dlopen) or that does not dlopen is deleted and
 *     rebuilt once. An unusable cache folder means a
 *     private temporary folder, removed after loading (works, caches nothing).
 *   - failures: no compiler -> COMPILE_FAILED "no C compiler found (set CC)"; compiler
 *     error -> COMPILE_FAILED with the first exported kernel's name and the compiler's
 *     output (truncated) in last_error().
 *   - runs synchronously on the calling thread; never prints, never aborts.
 *   module_get_kernel = dlsym (missing -> RAL_ERROR_UNSUPPORTED); module_destroy = dlclose.
 *   Kernels from a module are launched with the ordinary launch().
 *   - optional: a module that exports the data symbol
 *       void (*ral_jit_parallel_for)(int64_t n, int64_t grain,
 *                                    void (*body)(int64_t begin, int64_t end, void* ctx), void* ctx);
 *     gets it set to this plugin's pool (pool.h host_parallel_for_light) after loading, so its
 *     loops share the plugin's one thread budget instead of starting an OpenMP team.
 *   - optional: a module that exports the data symbol
 *       ral_status (*ral_jit_fail)(ral_status status, const char* message);
 *     gets it set to a function that makes `message` this thread's last error and returns
 *     `status`: a kernel that fails on a stream's worker returns it, and the stream reports
 *     the kernel's own reason at the next sync (torch_fl/jit/inductor_async.py).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host.h"
#include "ral_trust.h"
#include "pool.h"
#include "runtime.h"

#ifndef HOST_RAL_INCLUDE
#define HOST_RAL_INCLUDE ""
#endif

extern char** environ;

/* Compiler output kept for last_error(): enough for the first errors, which matter. */
#define LOG_MAX 3072
#define MAX_ARGS 256

struct ral_module_s {
  void* handle;
};

/* ---------------------------------------------------------------- sha256 (FIPS 180-4) */
typedef struct {
  uint32_t h[8];
  uint64_t len;
  uint8_t buf[64];
  size_t fill;
} sha256;

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha_block(sha256* s, const uint8_t* p) {
  uint32_t w[64], v[8];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  memcpy(v, s->h, sizeof v);
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = v[7] + (ROR(v[4], 6) ^ ROR(v[4], 11) ^ ROR(v[4], 25)) +
                  ((v[4] & v[5]) ^ (~v[4] & v[6])) + K256[i] + w[i];
    uint32_t t2 = (ROR(v[0], 2) ^ ROR(v[0], 13) ^ ROR(v[0], 22)) +
                  ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
    memmove(v + 1, v, 7 * sizeof v[0]);
    v[4] += t1;
    v[0] = t1 + t2;
  }
  for (int i = 0; i < 8; i++) s->h[i] += v[i];
}

static void sha_init(sha256* s) {
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, h0, sizeof h0);
  s->len = 0;
  s->fill = 0;
}

static void sha_add(sha256* s, const void* data, size_t n) {
  const uint8_t* p = data;
  s->len += n;
  while (n) {
    size_t k = 64 - s->fill < n ? 64 - s->fill : n;
    memcpy(s->buf + s->fill, p, k);
    s->fill += k;
    p += k;
    n -= k;
    if (s->fill == 64) {
      sha_block(s, s->buf);
      s->fill = 0;
    }
  }
}

/* Adds a string and its terminating NUL, so ("ab","c") and ("a","bc") hash apart. */
static void sha_add_str(sha256* s, const char* str) { sha_add(s, str, strlen(str) + 1); }

static void sha_hex(sha256* s, char out[65]) {
  uint64_t bits = s->len * 8;
  uint8_t pad = 0x80, zero = 0, lenb[8];
  sha_add(s, &pad, 1);
  while (s->fill != 56) sha_add(s, &zero, 1);
  for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)(bits >> (56 - 8 * i));
  sha_add(s, lenb, 8);
  for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", s->h[i]);
}

/* ---------------------------------------------------------------- argv helpers */
typedef struct {
  char* argv[MAX_ARGS + 1];
  int n;
  char* words; /* backing store of the split strings */
} args;

/* Appends the whitespace-separated words of `str` (copied into *store). 0 if too many. */
static int split_words(args* a, const char* str, char** store) {
  if (!str) return 1;
  *store = strdup(str);
  if (!*store) return 0;
  for (char* p = *store; *p;) {
    while (*p && isspace((unsigned char)*p)) *p++ = 0;
    if (!*p) break;
    if (a->n >= MAX_ARGS) return 0;
    a->argv[a->n++] = p;
    while (*p && !isspace((unsigned char)*p)) p++;
  }
  a->argv[a->n] = NULL;
  return 1;
}

static int push(args* a, const char* s) {
  if (a->n >= MAX_ARGS) return 0;
  a->argv[a->n++] = (char*)s;
  a->argv[a->n] = NULL;
  return 1;
}

/* `prog` as found on PATH (or as given when it has a slash); 0 if not executable. */
static int find_program(const char* prog, char* out, size_t cap) {
  if (strchr(prog, '/')) {
    snprintf(out, cap, "%s", prog);
    return access(out, X_OK) == 0;
  }
  const char* path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  for (const char* p = path; *p;) {
    size_t len = strcspn(p, ":");
    if (len && snprintf(out, cap, "%.*s/%s", (int)len, p, prog) < (int)cap && access(out, X_OK) == 0)
      return 1;
    p += len + (p[len] == ':');
  }
  return 0;
}

/* Runs argv with stdin closed and stdout+stderr captured (first LOG_MAX-1 bytes into
 * log). Returns the exit status, or -1 if it could not start. */
static int run_capture(char* const* argv, char* log) {
  int fds[2];
  log[0] = 0;
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return -1;
  }
  size_t used = 0;
  char sink[4096];
  for (;;) { /* drain everything, or a chatty compiler blocks on a full pipe */
    char* dst = used < LOG_MAX - 1 ? log + used : sink;
    size_t room = used < LOG_MAX - 1 ? LOG_MAX - 1 - used : sizeof sink;
    ssize_t got = read(fds[0], dst, room);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (dst != sink) used += (size_t)got;
  }
  log[used] = 0;
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* ---------------------------------------------------------------- cache paths */
/* mkdir -p; 1 if the folder exists and is writable afterwards. */
static int make_dirs(char* path) {
  for (char* p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    mkdir(path, 0755);
    *p = '/';
  }
  mkdir(path, 0755);
  return access(path, W_OK | X_OK) == 0;
}

/* One warning per process for an untrusted cache folder, one for an untrusted file. */
static int g_warned_dir, g_warned_file;
#define PRIVATE_INSTEAD "a private temporary folder (nothing is cached across processes)"

/* The cache folder, if it exists (made on demand) and is private: owned by this user and
 * writable by nobody else, up to "/" (ral_trust.h). Anyone else who can write it could
 * plant a kernel that every torch process of this user then dlopen()s. */
static int cache_dir(char* out, size_t cap) {
  const char* xdg = getenv("XDG_CACHE_HOME");
  const char* home = getenv("HOME");
  int n;
  if (xdg && *xdg) n = snprintf(out, cap, "%s/torch_fl/host-jit", xdg);
  else if (home && *home) n = snprintf(out, cap, "%s/.cache/torch_fl/host-jit", home);
  else return 0;
  if (n <= 0 || (size_t)n >= cap || !make_dirs(out)) return 0;
  char why[PATH_MAX + 64];
  if (ral_trust_path(out, 1, why, sizeof why) == 0) return 1;
  ral_trust_warn_once(&g_warned_dir, "the host jit's kernel cache folder", why, PRIVATE_INSTEAD);
  return 0;
}

/* The first "RAL_PLUGIN_EXPORT ral_status <name>" of the source, for error messages. */
static void first_kernel_name(const char* src, char* out, size_t cap) {
  snprintf(out, cap, "?");
  /* the first exported function returning ral_status (exported data, such as the
   * ral_jit_parallel_for slot, is skipped) */
  const char* p = src;
  for (;;) {
    p = strstr(p, "RAL_PLUGIN_EXPORT");
    if (!p) return;
    p += strlen("RAL_PLUGIN_EXPORT");
    while (isspace((unsigned char)*p)) p++;
    if (strncmp(p, "ral_status", 10) == 0) break;
  }
  p += 10;
  while (isspace((unsigned char)*p)) p++;
  size_t n = 0;
  while (isalnum((unsigned char)p[n]) || p[n] == '_') n++;
  if (n) snprintf(out, cap, "%.*s", (int)n, p);
}

/* The compiler's --version text (part of the cache key: a compiler upgrade rebuilds). */
static void compiler_version(const char* path, char* out) {
  char* argv[] = {(char*)path, "--version", NULL};
  if (run_capture(argv, out) != 0) out[0] = 0;
}

static int write_file(const char* path, const char* data) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return 0;
  size_t len = strlen(data), done = 0;
  while (done < len) {
    ssize_t w = write(fd, data + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t)w;
  }
  return close(fd) == 0 && done == len;
}

/* ---------------------------------------------------------------- integrity trailer */
/* ELF loaders read through the program headers and ignore trailing bytes, so the digest
 * can ride at the end of the shared object itself: one file, one atomic rename. */
static const char TRAILER_MAGIC[8] = {'R', 'A', 'L', 'J', 'I', 'T', '1', '\n'};
#define TRAILER_SIZE (8 + 64)

static char* read_all(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  char* buf = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n == cap) {
      char* nb = realloc(buf, cap = cap ? cap * 2 : 65536);
      if (!nb) break;
      buf = nb;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0) break;
  }
  int bad = ferror(f) || (n < cap && !feof(f));
  fclose(f);
  if (bad) {
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}

static void digest_of(const char* data, size_t n, char hex[65]) {
  sha256 h;
  sha_init(&h);
  sha_add(&h, data, n);
  sha_hex(&h, hex);
}

/* Appends magic + sha256(contents) to the file. */
static int add_trailer(const char* path) {
  size_t n = 0;
  char* data = read_all(path, &n);
  if (!data) return 0;
  char hex[65];
  digest_of(data, n, hex);
  free(data);
  FILE* f = fopen(path, "ab");
  if (!f) return 0;
  int ok = fwrite(TRAILER_MAGIC, 1, 8, f) == 8 && fwrite(hex, 1, 64, f) == 64;
  return (fclose(f) == 0) && ok;
}

/* Whether the file ends in a trailer that matches the bytes before it. */
static int trailer_ok(const char* path) {
  size_t n = 0;
  char* data = read_all(path, &n);
  if (!data) return 0;
  int ok = 0;
  if (n > TRAILER_SIZE && memcmp(data + n - TRAILER_SIZE, TRAILER_MAGIC, 8) == 0) {
    char hex[65];
    digest_of(data, n - TRAILER_SIZE, hex);
    ok = memcmp(hex, data + n - 64, 64) == 0;
  }
  free(data);
  return ok;
}

/* ---------------------------------------------------------------- compile */
typedef struct {
  char cc[PATH_MAX];
  char dir[PATH_MAX];
  char so[PATH_MAX];
  char log[LOG_MAX];
  char kernel[128];
  args a;
  int n_fixed; /* a.argv[0..n_fixed): compiler and fixed flags; the caller's options follow */
  char *cc_words, *opt_words;
  int private_dir;
} job;

static void job_free(job* j) {
  free(j->cc_words);
  free(j->opt_words);
  if (j->private_dir) rmdir(j->dir);
  free(j);
}

/* Compiles j->a + source into j->so through a unique temporary name. */
static ral_status build(job* j, const char* source) {
  char csrc[PATH_MAX + 32], tmp[PATH_MAX + 32];
  static unsigned long counter;
  unsigned long k = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
  snprintf(csrc, sizeof csrc, "%s.%d.%lu.c", j->so, (int)getpid(), k);
  snprintf(tmp, sizeof tmp, "%s.%d.%lu.tmp", j->so, (int)getpid(), k);
  if (!write_file(csrc, source))
    return host_error(RAL_ERROR_COMPILE_FAILED, "kernel %s: cannot write %s: %s", j->kernel, csrc,
                      strerror(errno));
  /* argv: compiler, fixed flags, -o tmp source, then the caller's options */
  char* line[MAX_ARGS + 4];
  int n = 0;
  for (int i = 0; i < j->n_fixed; i++) line[n++] = j->a.argv[i];
  line[n++] = "-o";
  line[n++] = tmp;
  line[n++] = csrc;
  for (int i = j->n_fixed; i < j->a.n; i++) line[n++] = j->a.argv[i];
  line[n] = NULL;
  int rc = run_capture(line, j->log);
  unlink(csrc);
  if (rc != 0) {
    unlink(tmp);
    if (rc < 0) return host_error(RAL_ERROR_COMPILE_FAILED, "kernel %s: cannot run %s", j->kernel, j->cc);
    return host_error(RAL_ERROR_COMPILE_FAILED, "kernel %s: %s failed (exit %d):\n%s", j->kernel,
                      j->cc, rc, j->log);
  }
  if (!add_trailer(tmp)) {
    unlink(tmp);
    return host_error(RAL_ERROR_COMPILE_FAILED, "kernel %s: cannot finish %s: %s", j->kernel, tmp,
                      strerror(errno));
  }
  if (rename(tmp, j->so) != 0) {
    unlink(tmp);
    return host_error(RAL_ERROR_COMPILE_FAILED, "kernel %s: cannot rename into %s: %s", j->kernel,
                      j->so, strerror(errno));
  }
  return RAL_OK;
}

/* The newest x86-64 level this CPU runs: a jit kernel is built for the machine it runs on. */
static const char* march(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "-march=x86-64-v4";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2"))
    return "-march=x86-64-v3";
#endif
  return "-march=x86-64-v2";
}

static ral_status prepare(job* j, const char* source, const char* options) {
  const char* cc = getenv("CC");
  if (!cc || !*cc) cc = "cc";
  j->a.n = 0;
  if (!split_words(&j->a, cc, &j->cc_words) || j->a.n == 0 ||
      !find_program(j->a.argv[0], j->cc, sizeof j->cc))
    return host_error(RAL_ERROR_COMPILE_FAILED, "no C compiler found (set CC)");
  j->a.argv[0] = j->cc;
  static const char* const fixed[] = {"-O3", "-fPIC", "-shared", "-fopenmp", "-std=c11"};
  push(&j->a, march());
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) push(&j->a, fixed[i]);
  j->n_fixed = j->a.n;
  static const char fallback_inc[] = "-I" HOST_RAL_INCLUDE;
  if (!split_words(&j->a, options, &j->opt_words) ||
      (HOST_RAL_INCLUDE[0] && !push(&j->a, fallback_inc)))
    return host_error(RAL_ERROR_COMPILE_FAILED, "kernel %s: too many compiler options", j->kernel);

  sha256 h;
  sha_init(&h);
  compiler_version(j->cc, j->log);
  sha_add_str(&h, j->log);
  for (int i = 0; i < j->a.n; i++) sha_add_str(&h, j->a.argv[i]);
  sha_add_str(&h, source);
  char hex[65];
  sha_hex(&h, hex);

  int private_dir = !cache_dir(j->dir, sizeof j->dir);
  if (!private_dir) {
    /* A cached file someone else could have written is not loaded either. */
    char why[PATH_MAX + 64];
    if (snprintf(j->so, sizeof j->so, "%s/%s.so", j->dir, hex) < (int)sizeof j->so &&
        access(j->so, F_OK) == 0 && ral_trust_path(j->so, 1, why, sizeof why) != 0) {
      ral_trust_warn_once(&g_warned_file, "a host jit kernel cache file", why, PRIVATE_INSTEAD);
      private_dir = 1;
    }
  }
  if (private_dir) {
    const char* t = getenv("TMPDIR");
    snprintf(j->dir, sizeof j->dir, "%s/torch_fl-host-jit-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(j->dir))
      return host_error(RAL_ERROR_COMPILE_FAILED, "kernel %s: no writable cache or temp folder",
                        j->kernel);
    j->private_dir = 1;
  }
  if (snprintf(j->so, sizeof j->so, "%s/%s.so", j->dir, hex) >= (int)sizeof j->so)
    return host_error(RAL_ERROR_COMPILE_FAILED, "kernel %s: cache path too long", j->kernel);
  return RAL_OK;
}

/* The ral_jit_fail slot's function: a module's own failure message as this thread's error. */
static ral_status jit_fail(ral_status status, const char* message) {
  return host_error(status, "%s", message ? message : "kernel failed");
}

ral_status host_compile(int32_t device, const char* lang, const char* source,
                               const char* options, ral_module* module) {
  if (!module || !lang || !source)
    return host_error(RAL_ERROR_INVALID_ARGUMENT, "compile: null argument");
  *module = NULL;
  if (strcmp(lang, "c") != 0)
    return host_error(RAL_ERROR_UNSUPPORTED, "compile: the host plugin compiles \"c\", not \"%s\"", lang);
  if (!host_device_valid(device))
    return host_error(RAL_ERROR_INVALID_ARGUMENT, "host device %d does not exist", device);
  job* j = calloc(1, sizeof *j);
  if (!j) return host_error(RAL_ERROR_OUT_OF_MEMORY, "compile: out of memory");
  first_kernel_name(source, j->kernel, sizeof j->kernel);
  ral_status st = prepare(j, source, options);
  void* handle = NULL;
  /* a cache hit loads directly; a file that does not load is stale or torn: rebuild once */
  for (int attempt = 0; st == RAL_OK && !handle && attempt < 2; attempt++) {
    if (access(j->so, R_OK) == 0 && !trailer_ok(j->so)) unlink(j->so);
    if (access(j->so, R_OK) != 0) st = build(j, source);
    if (st != RAL_OK) break;
    handle = dlopen(j->so, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      st = host_error(RAL_ERROR_COMPILE_FAILED, "kernel %s: cannot load %s: %s", j->kernel, j->so,
                      why ? why : "?");
      unlink(j->so);
      if (attempt == 0) st = RAL_OK;
    }
  }
  if (j->private_dir) unlink(j->so); /* the mapping stays valid; nothing is cached */
  job_free(j);
  if (st != RAL_OK) {
    if (handle) dlclose(handle);
    return st;
  }
  struct ral_module_s* m = malloc(sizeof *m);
  if (!m) {
    dlclose(handle);
    return host_error(RAL_ERROR_OUT_OF_MEMORY, "compile: out of memory");
  }
  m->handle = handle;
  /* Generated loops run on the plugin's pool (torch_fl/jit/codegen_c.py PARALLEL): a module
   * that exports the slot gets host_parallel_for_light; one without it runs its loops inline. */
  void (**parallel_slot)(int64_t, int64_t, host_range_fn, void*) = dlsym(handle, "ral_jit_parallel_for");
  if (parallel_slot) *parallel_slot = host_parallel_for_light;
  ral_status (**fail_slot)(ral_status, const char*) = dlsym(handle, "ral_jit_fail");
  if (fail_slot) *fail_slot = jit_fail;
  *module = m;
  return RAL_OK;
}

ral_status host_module_get_kernel(ral_module module, const char* name, ral_kernel_fn* kernel) {
  if (!module || !name || !kernel)
    return host_error(RAL_ERROR_INVALID_ARGUMENT, "module_get_kernel: null argument");
  dlerror();
  void* sym = dlsym(module->handle, name);
  *kernel = (ral_kernel_fn)sym;
  return sym ? RAL_OK
             : host_error(RAL_ERROR_UNSUPPORTED, "module has no kernel '%s' (is it RAL_PLUGIN_EXPORT?)", name);
}

ral_status host_module_destroy(ral_module module) {
  if (!module) return RAL_OK;
  dlclose(module->handle);
  free(module);
  return RAL_OK;
}
