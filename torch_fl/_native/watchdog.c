/* watchdog.c -- timed waits at the plugin boundary.
 *
 * The ABI's waits (stream_synchronize, event_synchronize) have no timeout, and a wedged
 * device or a buggy plugin may never return from them. A waited-on call therefore runs on
 * a waiter thread while the caller waits on a condition variable with a deadline
 * (TORCH_FL_DEVICE_TIMEOUT seconds, default 300, 0 = wait forever; rt_set_device_timeout).
 * When the deadline passes, the caller gets RAL_ERROR_DEVICE_HANG, the device is marked
 * lost (later calls fail with DEVICE_LOST naming the hang, and the runtime never calls that
 * device's plugin entries again), and the waiter thread is left behind inside the plugin:
 * C cannot cancel a call in progress. Other devices keep working.
 *
 * Cost: a wait whose work is already done (query says idle) runs inline, with no thread
 * hand-off; only a wait that really waits pays one (a few microseconds, beside the wait).
 * Waiter threads are reused; each job gets a thread of its own (a free one or a new one),
 * so a job never queues behind a hung one. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_internal.h"

#define DEFAULT_TIMEOUT_US (300ll * 1000000ll)

static _Atomic long long g_timeout_us = DEFAULT_TIMEOUT_US;

typedef struct wait_job {
  rt_device* dev;
  int kind; /* 0: stream_synchronize, 1: event_synchronize */
  int32_t id;
  ral_stream stream;
  ral_event event;
  int status;
  int done;
  int refs; /* the caller's and the waiter's; under g_wait.lock */
  char msg[2048];
  struct wait_job* next;
} wait_job;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t work_cv; /* a job was queued */
  pthread_cond_t done_cv; /* a job finished (CLOCK_MONOTONIC, for timed waits) */
  wait_job* head;
  wait_job** tail;
  int idle; /* waiter threads free to take a job, not yet promised to one */
} g_wait;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Fresh waiter state. Also run in a forked child (pthread_atfork): it has none of the
 * parent's waiter threads (and maybe a held lock), so its first watched wait must spawn a
 * thread instead of queueing for a ghost. */
static void init_state(void) {
  pthread_mutex_init(&g_wait.lock, NULL);
  pthread_cond_init(&g_wait.work_cv, NULL);
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&g_wait.done_cv, &a);
  pthread_condattr_destroy(&a);
  g_wait.head = NULL;
  g_wait.tail = &g_wait.head;
  g_wait.idle = 0;
}

static void init_once(void) {
  init_state();
  pthread_atfork(NULL, NULL, init_state);
}

/* Public: the hang timeout in seconds (0 = none). */
double rt_device_timeout(void) { return (double)atomic_load(&g_timeout_us) / 1e6; }

/* Public: set the hang timeout in seconds (0 = wait forever). */
int rt_set_device_timeout(double seconds) {
  if (!(seconds >= 0) || seconds > 1e9)
    return rt_fail(RAL_ERROR_INVALID_ARGUMENT,
                   "device timeout %g s must be a number of seconds >= 0 (0 waits forever)", seconds);
  atomic_store(&g_timeout_us, (long long)(seconds * 1e6));
  return RAL_OK;
}

/* The plugin call itself; formats a failure into this thread's last error. */
static int plugin_wait(rt_device* dev, int kind, int32_t id, ral_stream s, ral_event e) {
  rt_plugin* p = dev->plugin;
  int st = kind == 0 ? p->api.stream_synchronize(dev->local, s) : p->api.event_synchronize(dev->local, e);
  if (st == RAL_OK) return st;
  if (kind == 1) return rt_plugin_fail(p, st, "event_synchronize(event %d) on device %d", id, dev->global);
  /* The plugin's message already names the op; add context only when it has none, or
   * when the status itself is garbage (then the entry is what went wrong). */
  const char* msg = p->api.last_error ? p->api.last_error() : NULL;
  if (msg && msg[0] && st > RAL_OK && st <= RAL_ERROR_LOAD_FAILED) return rt_plugin_fail(p, st, NULL);
  return rt_plugin_fail(p, st, "stream_synchronize(stream %d) on device %d", id, dev->global);
}

static void release_job_locked(wait_job* j) {
  if (--j->refs == 0) free(j);
}

static void* waiter_main(void* arg) {
  (void)arg;
  pthread_mutex_lock(&g_wait.lock);
  for (;;) {
    while (!g_wait.head) pthread_cond_wait(&g_wait.work_cv, &g_wait.lock);
    wait_job* j = g_wait.head;
    g_wait.head = j->next;
    if (!g_wait.head) g_wait.tail = &g_wait.head;
    pthread_mutex_unlock(&g_wait.lock);
    int st = plugin_wait(j->dev, j->kind, j->id, j->stream, j->event);
    pthread_mutex_lock(&g_wait.lock);
    j->status = st;
    if (st != RAL_OK) rt_copy_str(j->msg, sizeof j->msg, rt_last_error());
    j->done = 1;
    pthread_cond_broadcast(&g_wait.done_cv);
    release_job_locked(j);
    g_wait.idle++;
  }
  return NULL;
}

/* Queue a job and make sure a thread of its own takes it; 0 if no thread could be had. */
static int submit_locked(wait_job* j) {
  if (g_wait.idle == 0) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 256 << 10);
    int rc = pthread_create(&t, &a, waiter_main, NULL);
    pthread_attr_destroy(&a);
    if (rc != 0) return 0;
  } else {
    g_wait.idle--;
  }
  j->next = NULL;
  *g_wait.tail = j;
  g_wait.tail = &j->next;
  pthread_cond_signal(&g_wait.work_cv);
  return 1;
}

int rt_device_hung(const rt_device* dev) { return atomic_load(&dev->hung); }

/* Mark the device lost after a hang (the first reason is kept) and fail with it. */
static int hang(rt_device* dev, const char* what, int32_t id, double seconds) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  char reason[sizeof dev->lost_reason];
  snprintf(reason, sizeof reason,
           "[%s] %s(%s %d) on device %d did not return within %g s (TORCH_FL_DEVICE_TIMEOUT); "
           "the device is marked lost",
           dev->plugin->rec.name, what, strcmp(what, "stream_synchronize") == 0 ? "stream" : "event",
           id, dev->global, seconds);
  pthread_mutex_lock(&lock);
  if (!atomic_load(&dev->hung)) {
    rt_copy_str(dev->lost_reason, sizeof dev->lost_reason, reason);
    atomic_store(&dev->hung, 1);
    atomic_store(&dev->present, 0);
  }
  pthread_mutex_unlock(&lock);
  return rt_fail(RAL_ERROR_DEVICE_HANG, "%s", reason);
}

static int lost(rt_device* dev) {
  return rt_fail(RAL_ERROR_DEVICE_LOST, "device %d ([%s] %s) is lost: %s", dev->global,
                 dev->plugin->rec.name, dev->info.name, dev->lost_reason);
}

static int watched(rt_device* dev, int kind, int32_t id, ral_stream s, ral_event e) {
  if (atomic_load(&dev->hung)) return lost(dev);
  long long timeout = atomic_load(&g_timeout_us);
  rt_plugin* p = dev->plugin;
  /* Work already done: nothing to wait for, so no hand-off (the common case). */
  if (timeout <= 0 || (kind == 0 ? p->api.stream_query(dev->local, s) : p->api.event_query(dev->local, e)) == RAL_OK)
    return plugin_wait(dev, kind, id, s, e);
  pthread_once(&g_once, init_once);
  wait_job* j = calloc(1, sizeof *j);
  if (!j) return plugin_wait(dev, kind, id, s, e);
  *j = (wait_job){.dev = dev, .kind = kind, .id = id, .stream = s, .event = e, .refs = 2};
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += (time_t)(timeout / 1000000);
  deadline.tv_nsec += (long)(timeout % 1000000) * 1000;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&g_wait.lock);
  if (!submit_locked(j)) {
    pthread_mutex_unlock(&g_wait.lock);
    free(j);
    return plugin_wait(dev, kind, id, s, e); /* no thread to spare: wait unwatched */
  }
  int rc = 0;
  while (!j->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&g_wait.done_cv, &g_wait.lock, &deadline);
  int done = j->done, st = j->status;
  char* msg = done && st != RAL_OK ? strdup(j->msg) : NULL;
  release_job_locked(j); /* a hung job is freed by its waiter, if it ever returns */
  pthread_mutex_unlock(&g_wait.lock);
  if (!done) return hang(dev, kind == 0 ? "stream_synchronize" : "event_synchronize", id, (double)timeout / 1e6);
  if (st != RAL_OK) rt_error_restore(st, msg);
  free(msg);
  return st;
}

int rt_wait_stream(rt_device* dev, int32_t sid, ral_stream h) { return watched(dev, 0, sid, h, NULL); }

int rt_wait_event(rt_device* dev, int32_t eid, ral_event h) { return watched(dev, 1, eid, NULL, h); }

int rt_device_lost_error(rt_device* dev) { return lost(dev); }
