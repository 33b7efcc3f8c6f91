/*
 * pool.c -- one polite thread pool for all of the plugin's parallel work (see pool.h).
 */
#define _GNU_SOURCE /* pthread_setname_np, sched_getaffinity */
#include "pool.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "host.h"

#define POOL_MAX 64
/* A helper polls this long after a region before it sleeps: long enough to catch the next
 * region of a burst of kernels, short enough not to take a core from the Python thread. */
#define POOL_SPIN_NS 10000ull

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_uint_fast64_t gen; /* bumped when a region opens */
  atomic_int open;          /* a region accepts helpers */
  atomic_int active;        /* helpers inside the open region */
  atomic_int sleeping;
  atomic_int busy; /* try-lock: one region at a time */
  atomic_int worker_owned; /* the open region runs on a stream worker */
  atomic_int stop;
  atomic_int_fast64_t next; /* next unclaimed index */
  int64_t n, chunk;
  host_range_fn body;
  void* ctx;
  int nhelpers;
  pthread_t threads[POOL_MAX];
} pool_t;

static pool_t g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
static pthread_mutex_t g_spawn_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_budget;     /* 0 until known */
static int g_env_budget = -1;   /* TORCH_FL_HOST_THREADS, read once */
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;
static atomic_int g_callers_waiting; /* API callers blocked in a wait for a stream (pool.h) */
static int g_yield_env = -1;         /* TORCH_FL_HOST_YIELD, read once: 0 turns the yield off */
static _Thread_local int tl_serial; /* pool helper, or a kernel inline on the caller */
static _Thread_local int tl_worker;  /* a stream worker (host_pool_own_thread) */
static _Thread_local int tl_backlog = 1; /* more work queued behind this kernel (pool.h) */
/* Without a backlog, a light loop (host_parallel_for_light) shorter than this many grains
 * stays on the calling thread when every helper sleeps: waking one costs a futex wake and a
 * context switch, tens of µs on a VM. Measured (synchronized x + x, one op per sync,
 * medians): 65,536 floats 49 µs on two threads vs 28 µs on one, 131,072: 53 vs 42,
 * 262,144: 68 vs 76 (the crossover). */
#define POOL_COLD_GRAINS 8

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cpus_available(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
  return 1;
}

static void read_env(void) {
  const char* y = getenv("TORCH_FL_HOST_YIELD");
  g_yield_env = !(y && y[0] == '0' && y[1] == '\0');
  const char* v = getenv("TORCH_FL_HOST_THREADS");
  if (v && *v) {
    char* end;
    long n = strtol(v, &end, 10);
    if (*end == '\0' && n >= 1) g_env_budget = n > POOL_MAX ? POOL_MAX : (int)n;
  }
}

int host_threads(void) {
  pthread_once(&g_env_once, read_env);
  if (g_env_budget > 0) return g_env_budget;
  int b = atomic_load_explicit(&g_budget, memory_order_relaxed);
  return b > 0 ? b : cpus_available();
}

void host_pool_note_caller(void) {
  if (tl_serial) return;
  int n = omp_get_max_threads(); /* torch.set_num_threads sets it on PyTorch's threads */
  if (n < 1) n = 1;
  if (n > POOL_MAX) n = POOL_MAX;
  if (atomic_load_explicit(&g_budget, memory_order_relaxed) != n)
    atomic_store_explicit(&g_budget, n, memory_order_relaxed);
}

/* Whether to leave a core to the API caller: the yield is on and no caller waits for a stream
 * (seq_cst load: pairs with host_pool_caller_waits). Callers read the budget first, which
 * reads TORCH_FL_HOST_YIELD. */
static int caller_runs(void) { return g_yield_env && atomic_load(&g_callers_waiting) == 0; }

/* Helpers the open region may use now: the budget less its owner, and less one more for a
 * stream worker's region while no API caller waits for a stream, since that caller (the
 * Python thread) is running on a core. A region the caller runs itself (a direct copy) has
 * that core already. */
static int helpers_allowed(const pool_t* p) {
  int h = host_threads() - 1;
  return atomic_load(&p->worker_owned) && caller_runs() ? h - 1 : h;
}

int host_pool_team_size(void) {
  if (tl_serial) return 1;
  int t = host_threads();
  /* an OpenMP team cannot grow once it runs: a worker's team leaves the running caller its core */
  if (tl_worker && caller_runs()) t--;
  return t < 1 ? 1 : t;
}

void host_pool_own_thread(void) {
  tl_serial = 0;
  tl_worker = 1;
  omp_set_num_threads(1); /* OpenBLAS (OpenMP build) follows this: one thread per call */
}

/* The caller's OpenMP setting is PyTorch's: lowered to 1 while a kernel runs inline, so a
 * small OpenBLAS call there does not wake PyTorch's OpenMP team. Returns what to restore. */
int host_inline_enter(void) {
  int omp = omp_get_max_threads();
  if (omp != 1) omp_set_num_threads(1);
  int saved = (omp << 1) | tl_serial;
  tl_serial = 1;
  return saved;
}

void host_inline_leave(int saved) {
  tl_serial = saved & 1;
  if ((saved >> 1) != 1) omp_set_num_threads(saved >> 1);
}

/* Claims and runs chunks of the open region until none are left. */
static void drain(pool_t* p) {
  for (;;) {
    int64_t b = atomic_fetch_add_explicit(&p->next, p->chunk, memory_order_relaxed);
    if (b >= p->n) return;
    int64_t e = b + p->chunk < p->n ? b + p->chunk : p->n;
    p->body(b, e, p->ctx);
  }
}

static void* helper_main(void* arg) {
  pool_t* p = &g_pool;
  int index = (int)(intptr_t)arg;
  tl_serial = 1;
  omp_set_num_threads(1);
  uint64_t seen = atomic_load(&p->gen);
  int spin = 1; /* after a region it stayed out of, sleep at once: polling would take the caller's core */
  for (;;) {
    uint64_t deadline = now_ns() + (spin ? POOL_SPIN_NS : 0);
    unsigned i = 0;
    while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) {
      __builtin_ia32_pause();
      if ((++i & 63) == 0 && now_ns() > deadline) {
        pthread_mutex_lock(&p->mu);
        atomic_fetch_add(&p->sleeping, 1);
        while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
        atomic_fetch_sub(&p->sleeping, 1);
        pthread_mutex_unlock(&p->mu);
      }
    }
    if (atomic_load(&p->stop)) return NULL;
    seen = atomic_load(&p->gen);
    spin = index < helpers_allowed(p);
    if (!spin) continue; /* budget shrank, or the caller runs: stay out */
    atomic_fetch_add(&p->active, 1);
    if (atomic_load(&p->open) && atomic_load(&p->gen) == seen) drain(p);
    atomic_fetch_sub(&p->active, 1);
  }
}

/* Starts helpers up to budget-1; returns how many run. */
static int ensure_helpers(int want) {
  pool_t* p = &g_pool;
  if (want > POOL_MAX) want = POOL_MAX;
  if (p->nhelpers >= want) return p->nhelpers;
  pthread_mutex_lock(&g_spawn_mu);
  while (p->nhelpers < want && !atomic_load(&p->stop)) {
    if (pthread_create(&p->threads[p->nhelpers], NULL, helper_main, (void*)(intptr_t)p->nhelpers) != 0) break;
    char name[16];
    snprintf(name, sizeof name, "ral-pool%d", p->nhelpers);
    pthread_setname_np(p->threads[p->nhelpers], name);
    p->nhelpers++;
  }
  pthread_mutex_unlock(&g_spawn_mu);
  return p->nhelpers;
}

static void wake_helpers(pool_t* p) {
  pthread_mutex_lock(&p->mu);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

void host_pool_caller_waits(int begin) {
  if (!begin) {
    atomic_fetch_sub(&g_callers_waiting, 1);
    return;
  }
  pool_t* p = &g_pool;
  /* the caller's core is free now: helpers join the region that is open, if any */
  if (atomic_fetch_add(&g_callers_waiting, 1) == 0 && atomic_load(&p->open) && p->nhelpers > 0) {
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleeping) > 0) wake_helpers(p);
  }
}

void host_pool_note_backlog(int more) { tl_backlog = more; }

void host_parallel_for_light(int64_t n, int64_t grain, host_range_fn body, void* ctx) {
  pool_t* p = &g_pool;
  if (!tl_backlog && n < grain * POOL_COLD_GRAINS && p->nhelpers > 0 &&
      atomic_load(&p->sleeping) >= p->nhelpers)
    body(0, n, ctx);
  else
    host_parallel_for(n, grain, body, ctx);
}

void host_parallel_for(int64_t n, int64_t grain, host_range_fn body, void* ctx) {
  if (n <= 0) return;
  int budget = host_threads();
  if (grain < 1) grain = 1;
  if (n <= grain || budget <= 1 || tl_serial) {
    body(0, n, ctx);
    return;
  }
  pool_t* p = &g_pool;
  int expected = 0;
  if (!atomic_compare_exchange_strong(&p->busy, &expected, 1)) { /* another region runs: stay in budget */
    body(0, n, ctx);
    return;
  }
  if (ensure_helpers(budget - 1) < 1) {
    atomic_store(&p->busy, 0);
    body(0, n, ctx);
    return;
  }
  /* about 4 chunks per thread: late helpers still find work, early ones do not idle */
  int64_t chunk = n / ((int64_t)budget * 4);
  if (chunk < grain) chunk = grain;
  p->n = n;
  p->chunk = chunk;
  p->body = body;
  p->ctx = ctx;
  atomic_store(&p->next, 0);
  atomic_store(&p->worker_owned, tl_worker);
  atomic_store(&p->open, 1);
  atomic_fetch_add(&p->gen, 1);
  if (helpers_allowed(p) > 0 && atomic_load(&p->sleeping) > 0) wake_helpers(p);
  int saved = tl_serial;
  tl_serial = 1; /* a nested parallel loop inside body runs inline */
  drain(p);
  tl_serial = saved;
  atomic_store(&p->open, 0);
  for (unsigned i = 1; atomic_load(&p->active) > 0; i++) {
    if (i < 256) __builtin_ia32_pause();
    else sched_yield(); /* a helper holding a chunk may be waiting for this core */
  }
  atomic_store(&p->busy, 0);
}

void host_pool_shutdown(void) {
  pool_t* p = &g_pool;
  pthread_mutex_lock(&g_spawn_mu);
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, 1);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->nhelpers; i++) pthread_join(p->threads[i], NULL);
  p->nhelpers = 0;
  atomic_store(&p->stop, 0);
  pthread_mutex_unlock(&g_spawn_mu);
}
