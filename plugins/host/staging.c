/* staging.c -- reusable host buffers for host->device copies queued behind a busy stream.
 *
 * Such a copy snapshots its source at once (the caller may write it as soon as the call
 * returns) and the stream worker releases the snapshot after the copy ran. Buffers of that
 * size come from mmap when malloc'ed afresh, so every page faulted on first touch: the faults
 * cost several times the copy itself (ral_mode uploads each weight during the forward, behind
 * the kernels already queued). Released buffers are kept for reuse, STAGING_CACHE_MAX bytes in
 * all; large ones come from mmap with MADV_HUGEPAGE (as memory.c's large blocks), so one that
 * is not cached faults in 2 MB at a time. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "runtime.h"

/* Bytes before each buffer holding its capacity; 64 keeps the payload cache-line aligned
 * relative to malloc's base. */
#define STAGING_HEADER 64
#define STAGING_GRAIN (64u << 10)
#define STAGING_CACHE_MAX (256u << 20)
#define STAGING_SLOTS 64
/* Buffers at least this large are mapped with huge pages. */
#define STAGING_HUGE_MIN (2u << 20)

static pthread_mutex_t staging_mu = PTHREAD_MUTEX_INITIALIZER;
static char* staging_slot[STAGING_SLOTS];
static uint64_t staging_cap[STAGING_SLOTS];
static int staging_count;
static uint64_t staging_bytes;

/* A cached buffer of at least cap bytes and at most twice that (the smallest such), or NULL. */
static char* take_cached(uint64_t cap) {
  int best = -1;
  for (int i = 0; i < staging_count; i++)
    if (staging_cap[i] >= cap && staging_cap[i] <= 2 * cap &&
        (best < 0 || staging_cap[i] < staging_cap[best]))
      best = i;
  if (best < 0) return NULL;
  char* base = staging_slot[best];
  staging_bytes -= staging_cap[best];
  staging_count--;
  staging_slot[best] = staging_slot[staging_count];
  staging_cap[best] = staging_cap[staging_count];
  return base;
}

void* host_staging_alloc(uint64_t nbytes) {
  if (nbytes > UINT64_MAX - STAGING_GRAIN - STAGING_HEADER) return NULL;
  uint64_t cap = (nbytes + STAGING_GRAIN - 1) / STAGING_GRAIN * STAGING_GRAIN;
  pthread_mutex_lock(&staging_mu);
  char* base = take_cached(cap);
  pthread_mutex_unlock(&staging_mu);
  if (!base) {
    if (cap >= STAGING_HUGE_MIN) {
      base = mmap(NULL, cap + STAGING_HEADER, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (base == MAP_FAILED) return NULL;
      madvise(base, cap + STAGING_HEADER, MADV_HUGEPAGE); /* advisory: ignore failure */
    } else {
      base = malloc(cap + STAGING_HEADER);
      if (!base) return NULL;
    }
    memcpy(base, &cap, sizeof cap);
  }
  return base + STAGING_HEADER;
}

static void release(char* base, uint64_t cap) {
  if (cap >= STAGING_HUGE_MIN)
    munmap(base, cap + STAGING_HEADER);
  else
    free(base);
}

void host_staging_free(void* buf) {
  if (!buf) return;
  char* base = (char*)buf - STAGING_HEADER;
  uint64_t cap;
  memcpy(&cap, base, sizeof cap);
  pthread_mutex_lock(&staging_mu);
  int keep = staging_count < STAGING_SLOTS && staging_bytes + cap <= STAGING_CACHE_MAX;
  if (keep) {
    staging_slot[staging_count] = base;
    staging_cap[staging_count++] = cap;
    staging_bytes += cap;
  }
  pthread_mutex_unlock(&staging_mu);
  if (!keep) release(base, cap);
}
