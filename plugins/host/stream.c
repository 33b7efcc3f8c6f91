/*
 * stream.c -- streams, events and launch.
 *
 * Each stream is an in-order FIFO drained by its own worker thread. launch() deep-copies
 * the call into a queue node (nodes are recycled through a per-stream freelist, so a
 * launch costs no malloc once warm) and returns. The first failure of asynchronous work
 * on a stream is kept (status + message) until stream_synchronize() returns it and
 * copies the message into the calling thread's last error. Later work still runs: the
 * runtime decides what to do with a failed stream.
 *
 * Events are markers: recording one enqueues a node that stamps the time and marks the
 * event reached when the worker gets to it.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <omp.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host.h"
#include "pool.h"
#include "runtime.h"

/* On an idle stream a copy is done on the calling thread: cheaper than waking the
 * worker. Device->device copies above this size are queued anyway, so the caller does
 * not spend its time on bulk copies the stream can overlap. */
#define DIRECT_COPY_MAX (256u << 10)
/* A host->device copy onto a busy stream is staged when smaller than this; a larger one
 * waits for the stream instead of doubling its memory traffic. */
#define STAGE_MAX (16u << 20)
#define NODE_INLINE 1536

typedef enum { NODE_KERNEL, NODE_COPY, NODE_FILL, NODE_EVENT, NODE_WAIT } node_kind;

typedef struct node {
  struct node* next;
  node_kind kind;
  ral_kernel_fn fn;
  ral_kernel_call call;
  void* dst;
  const void* src;
  void* staged; /* freed after the copy ran */
  uint64_t nbytes;
  int value;
  struct ral_event_s* event;
  uint64_t generation; /* of the event, for EVENT and WAIT nodes */
  char* heap; /* arena when the call does not fit inline */
  size_t heap_cap;
  alignas(16) char inline_buf[NODE_INLINE];
} node;

struct ral_stream_s {
  pthread_mutex_t mu;
  pthread_cond_t work_cv, done_cv;
  node *head, *tail, *free_nodes;
  uint64_t submitted, completed;
  int sleeping, waiters, stop;
  ral_status err;
  char errmsg[1024];
  pthread_t thread;
  int32_t device;
};

/* An event owns its completion state (not a pointer into a stream), so it outlives the
 * streams it was recorded on. Recording bumps `recorded`; the marker node sets `reached`. */
struct ral_event_s {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t recorded, reached;
  uint64_t time_ns;
};

typedef struct {
  struct ral_stream_s* default_stream;
} device_state;

static device_state* g_devices;
static int32_t g_ndevices;
static pthread_mutex_t g_devices_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- worker */
static void record_failure(struct ral_stream_s* s, const node* n, ral_status st) {
  if (s->err != RAL_OK) return;
  s->err = st;
  const char* kname = host_kernel_name(n->fn);
  const char* op = n->call.op_name ? n->call.op_name : "?";
  const char* reason = host_last_error();
  size_t len = strlen(op); /* host_fail already prefixed the op name: do not repeat it */
  if (strncmp(reason, op, len) == 0 && strncmp(reason + len, ": ", 2) == 0) reason += len + 2;
  snprintf(s->errmsg, sizeof s->errmsg, "kernel %s (%s): %s", kname ? kname : "<jit>", op, reason);
}

/* The API caller blocks until s->completed reaches seq; called and returns with s->mu held. */
static void caller_wait(struct ral_stream_s* s, uint64_t seq) {
  if (s->completed >= seq) return;
  host_pool_caller_waits(1);
  s->waiters++;
  while (s->completed < seq) pthread_cond_wait(&s->done_cv, &s->mu);
  s->waiters--;
  host_pool_caller_waits(0);
}

static void wait_until(struct ral_stream_s* s, uint64_t seq) {
  pthread_mutex_lock(&s->mu);
  caller_wait(s, seq);
  pthread_mutex_unlock(&s->mu);
}

static void event_reach(struct ral_event_s* e, uint64_t generation) {
  pthread_mutex_lock(&e->mu);
  if (generation > e->reached) {
    e->reached = generation;
    e->time_ns = now_ns();
  }
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

static void event_wait(struct ral_event_s* e, uint64_t generation) {
  pthread_mutex_lock(&e->mu);
  while (e->reached < generation) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
}

/* A jit-compiled kernel (not in this plugin's table) parallelises with its own OpenMP
 * pragmas: on this worker OpenMP is held to one thread, so give it the pool's team size
 * while it runs. Its OpenMP team then waits as libgomp does (see README.md). */
static ral_status run_kernel(node* n) {
  static _Thread_local ral_kernel_fn last;
  static _Thread_local int foreign;
  if (n->fn != last) {
    last = n->fn;
    foreign = host_kernel_name(n->fn) == NULL;
  }
  if (!foreign) return n->fn(&n->call);
  omp_set_num_threads(host_pool_team_size());
  ral_status st = n->fn(&n->call);
  omp_set_num_threads(1);
  return st;
}

static ral_status execute(node* n) {
  switch (n->kind) {
    case NODE_KERNEL:
      return run_kernel(n);
    case NODE_COPY:
      host_memcpy_parallel(n->dst, n->src, n->nbytes);
      host_staging_free(n->staged);
      n->staged = NULL;
      return RAL_OK;
    case NODE_FILL:
      memset(n->dst, n->value, n->nbytes);
      return RAL_OK;
    case NODE_EVENT:
      event_reach(n->event, n->generation);
      return RAL_OK;
    case NODE_WAIT:
      event_wait(n->event, n->generation);
      return RAL_OK;
  }
  return RAL_ERROR_INTERNAL;
}

/* How long an idle worker keeps polling before it sleeps. A burst of small launches then
 * never pays a futex wake-up per kernel (that hand-off, not the kernel, dominated the cost of
 * a 16-element op); an idle stream costs at most this much CPU before it blocks. */
#define WORKER_SPIN_NS 50000ull

/* Polls s->head without the lock for up to WORKER_SPIN_NS; returns with the lock held. */
static void spin_for_work(struct ral_stream_s* s) {
  pthread_mutex_unlock(&s->mu);
  uint64_t deadline = now_ns() + WORKER_SPIN_NS;
  for (unsigned i = 1;; i++) {
    if (__atomic_load_n(&s->head, __ATOMIC_ACQUIRE) || __atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) break;
    __builtin_ia32_pause();
    if ((i & 63) == 0 && now_ns() > deadline) break;
  }
  pthread_mutex_lock(&s->mu);
}

static void* worker_main(void* arg) {
  struct ral_stream_s* s = arg;
  host_pool_own_thread();
  pthread_mutex_lock(&s->mu);
  for (;;) {
    if (!s->head && !s->stop) spin_for_work(s);
    while (!s->head && !s->stop) {
      s->sleeping = 1;
      pthread_cond_wait(&s->work_cv, &s->mu);
      s->sleeping = 0;
    }
    if (!s->head) break;
    node* n = s->head;
    s->head = n->next;
    if (!s->head) s->tail = NULL;
    if (n->kind == NODE_EVENT) {
      /* Reach the event and count the node done under one hold of s->mu, so a thread
       * that saw the event complete also sees the stream idle (and vice versa). */
      event_reach(n->event, n->generation);
      s->completed++;
      n->next = s->free_nodes;
      s->free_nodes = n;
      if (s->waiters) pthread_cond_broadcast(&s->done_cv);
      continue;
    }
    host_pool_note_backlog(s->head != NULL);
    pthread_mutex_unlock(&s->mu);
    ral_status st = execute(n);
    pthread_mutex_lock(&s->mu);
    if (st != RAL_OK) record_failure(s, n, st);
    s->completed++;
    n->next = s->free_nodes;
    s->free_nodes = n;
    if (s->waiters) pthread_cond_broadcast(&s->done_cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ---------------------------------------------------------------- queue */
static node* node_get(struct ral_stream_s* s) {
  pthread_mutex_lock(&s->mu);
  node* n = s->free_nodes;
  if (n) s->free_nodes = n->next;
  pthread_mutex_unlock(&s->mu);
  if (!n) {
    n = malloc(sizeof *n);
    if (!n) return NULL;
    n->heap = NULL;
    n->heap_cap = 0;
  }
  n->next = NULL;
  n->staged = NULL;
  return n;
}

/* A fresh node of `kind`, or NULL after setting an out-of-memory error naming `what`. */
static node* node_of(struct ral_stream_s* s, node_kind kind, const char* what) {
  node* n = node_get(s);
  if (n) n->kind = kind;
  else host_error(RAL_ERROR_OUT_OF_MEMORY, "%s: out of memory", what);
  return n;
}

static void node_put_back(struct ral_stream_s* s, node* n) {
  pthread_mutex_lock(&s->mu);
  n->next = s->free_nodes;
  s->free_nodes = n;
  pthread_mutex_unlock(&s->mu);
}

/* Appends n; returns its sequence number (the value `completed` reaches when it ran). */
static uint64_t enqueue(struct ral_stream_s* s, node* n) {
  pthread_mutex_lock(&s->mu);
  if (s->tail) s->tail->next = n;
  else __atomic_store_n(&s->head, n, __ATOMIC_RELEASE);
  s->tail = n;
  uint64_t seq = ++s->submitted;
  if (s->sleeping) pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
  return seq;
}

static int stream_idle(struct ral_stream_s* s) {
  pthread_mutex_lock(&s->mu);
  int idle = s->completed == s->submitted;
  pthread_mutex_unlock(&s->mu);
  return idle;
}

static void stream_free(struct ral_stream_s* s) {
  pthread_mutex_lock(&s->mu);
  __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE); /* the worker polls it unlocked */
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  for (node *n = s->free_nodes, *next; n; n = next) {
    next = n->next;
    free(n->heap);
    free(n);
  }
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->work_cv);
  pthread_cond_destroy(&s->done_cv);
  free(s);
}

static ral_status stream_new(int32_t device, struct ral_stream_s** out) {
  struct ral_stream_s* s = calloc(1, sizeof *s);
  if (!s) return host_error(RAL_ERROR_OUT_OF_MEMORY, "stream_create: out of memory");
  s->device = device;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work_cv, NULL);
  pthread_cond_init(&s->done_cv, NULL);
  if (pthread_create(&s->thread, NULL, worker_main, s) != 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->done_cv);
    free(s);
    return host_error(RAL_ERROR_INTERNAL, "stream_create: cannot start a worker thread");
  }
  char name[16];
  snprintf(name, sizeof name, "ral-host%d", device);
  pthread_setname_np(s->thread, name);
  *out = s;
  return RAL_OK;
}

/* NULL names the device's default stream, created on first use. */
static ral_status resolve(int32_t device, ral_stream stream, struct ral_stream_s** out) {
  *out = stream;
  if (stream) {
    *out = stream;
    return RAL_OK;
  }
  if (device < 0 || device >= g_ndevices)
    return host_error(RAL_ERROR_INVALID_ARGUMENT, "host device %d does not exist", device);
  pthread_mutex_lock(&g_devices_mu);
  ral_status st = RAL_OK;
  if (!g_devices[device].default_stream) st = stream_new(device, &g_devices[device].default_stream);
  *out = g_devices[device].default_stream;
  pthread_mutex_unlock(&g_devices_mu);
  return st;
}

ral_status host_runtime_init(int32_t device_count) {
  host_runtime_shutdown();
  g_devices = calloc(device_count > 0 ? (size_t)device_count : 1, sizeof *g_devices);
  if (!g_devices) return host_error(RAL_ERROR_OUT_OF_MEMORY, "init: out of memory");
  g_ndevices = device_count;
  return RAL_OK;
}

void host_runtime_shutdown(void) {
  for (int32_t d = 0; d < g_ndevices; d++)
    if (g_devices[d].default_stream) {
      wait_until(g_devices[d].default_stream, g_devices[d].default_stream->submitted);
      stream_free(g_devices[d].default_stream);
    }
  free(g_devices);
  g_devices = NULL;
  g_ndevices = 0;
}

/* ---------------------------------------------------------------- deep copy of a call */
typedef struct {
  char* cur;
  char* end;
} arena;

static void* arena_take(arena* a, size_t n) {
  void* p = a->cur;
  a->cur += (n + 15) & ~(size_t)15;
  return p;
}

static size_t call_bytes(const ral_kernel_call* c) {
  size_t n = 0, nt = (size_t)(c->n_outputs + c->n_inputs);
#define ROUND16(x) (((x) + 15) & ~(size_t)15)
  n += ROUND16(nt * sizeof(ral_tensor));
  for (size_t i = 0; i < nt; i++) n += 2 * ROUND16((size_t)c->tensors[i].ndim * sizeof(int64_t));
  n += ROUND16((size_t)c->n_scalars * sizeof(ral_scalar));
  for (int i = 0; i < c->n_scalars; i++) {
    const ral_scalar* s = &c->scalars[i];
    if (s->tag == RAL_SCALAR_INT_LIST) n += ROUND16((size_t)s->count * sizeof(int64_t));
    if (s->tag == RAL_SCALAR_STRING && s->v.s) n += ROUND16(strlen(s->v.s) + 1);
  }
  if (c->op_name) n += ROUND16(strlen(c->op_name) + 1);
#undef ROUND16
  return n;
}

static void* dup_into(arena* a, const void* src, size_t n) {
  void* p = arena_take(a, n);
  if (n) memcpy(p, src, n);
  return p;
}

static ral_status copy_call(node* n, const ral_kernel_call* c) {
  size_t need = call_bytes(c);
  char* buf = n->inline_buf;
  if (need > NODE_INLINE) {
    if (n->heap_cap < need) {
      char* h = realloc(n->heap, need);
      if (!h) return host_error(RAL_ERROR_OUT_OF_MEMORY, "launch: out of memory");
      n->heap = h;
      n->heap_cap = need;
    }
    buf = n->heap;
  }
  arena a = {buf, buf + need};
  int nt = c->n_outputs + c->n_inputs;
  n->call = *c;
  ral_tensor* ts = dup_into(&a, c->tensors, (size_t)nt * sizeof(ral_tensor));
  for (int i = 0; i < nt; i++) {
    size_t dims = (size_t)ts[i].ndim * sizeof(int64_t);
    ts[i].sizes = dup_into(&a, c->tensors[i].sizes, dims);
    ts[i].strides = dup_into(&a, c->tensors[i].strides, dims);
  }
  ral_scalar* sc = dup_into(&a, c->scalars, (size_t)c->n_scalars * sizeof(ral_scalar));
  for (int i = 0; i < c->n_scalars; i++) {
    if (sc[i].tag == RAL_SCALAR_INT_LIST)
      sc[i].v.list = dup_into(&a, c->scalars[i].v.list, (size_t)sc[i].count * sizeof(int64_t));
    if (sc[i].tag == RAL_SCALAR_STRING && sc[i].v.s)
      sc[i].v.s = dup_into(&a, c->scalars[i].v.s, strlen(c->scalars[i].v.s) + 1);
  }
  n->call.tensors = ts;
  n->call.scalars = sc;
  if (c->op_name) n->call.op_name = dup_into(&a, c->op_name, strlen(c->op_name) + 1);
  return RAL_OK;
}

/* Output elements below which a kernel runs inline on an idle stream (~64 KiB of float32). */
#define INLINE_MAX_NUMEL 16384

static int small_call(const ral_kernel_call* c) {
  int64_t total = 0;
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++) {
    int64_t n = 1;
    for (int d = 0; d < c->tensors[i].ndim; d++) n *= c->tensors[i].sizes[d];
    total += n;
    if (total > INLINE_MAX_NUMEL) return 0;
  }
  return 1;
}

ral_status host_launch(ral_kernel_fn kernel, const ral_kernel_call* call) {
  if (!kernel || !call)
    return host_error(RAL_ERROR_INVALID_ARGUMENT, "launch: null kernel or call");
  if (call->n_outputs < 0 || call->n_inputs < 0 || call->n_scalars < 0 ||
      (call->n_outputs + call->n_inputs > 0 && !call->tensors) ||
      (call->n_scalars > 0 && !call->scalars))
    return host_error(RAL_ERROR_INVALID_ARGUMENT, "launch of %s: malformed call",
                      call->op_name ? call->op_name : "?");
  for (int i = 0; i < call->n_outputs + call->n_inputs; i++)
    if (call->tensors[i].ndim < 0 || call->tensors[i].ndim > RAL_MAX_RANK)
      return host_error(RAL_ERROR_INVALID_ARGUMENT, "launch of %s: tensor %d has rank %d",
                        call->op_name ? call->op_name : "?", i, call->tensors[i].ndim);
  struct ral_stream_s* s;
  ral_status st = resolve(call->device, call->stream, &s);
  if (st != RAL_OK) return st;
  host_pool_note_caller();
  if (small_call(call) && stream_idle(s)) {
    /* Stream order holds (nothing is queued before it), and for a kernel this small the
     * hand-off to the worker costs more than the kernel: run it here, on this thread only
     * (no pool, no OpenMP team). A failure is then a synchronous error of this launch. */
    ral_kernel_call here = *call;
    here.stream = s;
    int saved = host_inline_enter();
    st = kernel(&here);
    host_inline_leave(saved);
    return st;
  }
  node* n = node_of(s, NODE_KERNEL, "launch");
  if (!n) return RAL_ERROR_OUT_OF_MEMORY;
  st = copy_call(n, call);
  if (st != RAL_OK) {
    node_put_back(s, n);
    return st;
  }
  n->fn = kernel;
  n->call.stream = s;
  enqueue(s, n);
  return RAL_OK;
}

/* ---------------------------------------------------------------- copies */
ral_status host_stream_copy(int32_t device, ral_stream stream, void* dst, const void* src,
                            uint64_t nbytes, host_copy_kind kind) {
  if (nbytes == 0) return RAL_OK;
  if (!dst || !src) return host_error(RAL_ERROR_INVALID_POINTER, "memcpy: null pointer");
  struct ral_stream_s* s;
  ral_status st = resolve(device, stream, &s);
  if (st != RAL_OK) return st;
  int idle = stream_idle(s);
  if (idle && (kind != HOST_COPY_D2D || nbytes <= DIRECT_COPY_MAX)) {
    host_memcpy_parallel(dst, src, nbytes);
    return RAL_OK;
  }
  void* staged = NULL;
  if (kind == HOST_COPY_H2D) {
    if (nbytes > STAGE_MAX) { /* wait for the stream, then copy in place of staging */
      pthread_mutex_lock(&s->mu);
      uint64_t seq = s->submitted;
      pthread_mutex_unlock(&s->mu);
      wait_until(s, seq);
      host_memcpy_parallel(dst, src, nbytes);
      return RAL_OK;
    }
    staged = host_staging_alloc(nbytes);
    if (!staged) return host_error(RAL_ERROR_OUT_OF_MEMORY, "memcpy_h2d: cannot stage");
    memcpy(staged, src, nbytes);
    src = staged;
  }
  node* n = node_of(s, NODE_COPY, "memcpy");
  if (!n) {
    host_staging_free(staged);
    return RAL_ERROR_OUT_OF_MEMORY;
  }
  n->dst = dst;
  n->src = src;
  n->staged = staged;
  n->nbytes = nbytes;
  enqueue(s, n);
  return RAL_OK;
}

ral_status host_stream_memset(int32_t device, ral_stream stream, void* dst, int value,
                              uint64_t nbytes) {
  if (nbytes == 0) return RAL_OK;
  if (!dst) return host_error(RAL_ERROR_INVALID_POINTER, "memset: null pointer");
  struct ral_stream_s* s;
  ral_status st = resolve(device, stream, &s);
  if (st != RAL_OK) return st;
  if (nbytes <= DIRECT_COPY_MAX && stream_idle(s)) {
    memset(dst, value, nbytes);
    return RAL_OK;
  }
  node* n = node_of(s, NODE_FILL, "memset");
  if (!n) return RAL_ERROR_OUT_OF_MEMORY;
  n->dst = dst;
  n->value = value;
  n->nbytes = nbytes;
  enqueue(s, n);
  return RAL_OK;
}

/* ---------------------------------------------------------------- streams */
ral_status host_stream_create(int32_t device, ral_stream* stream) {
  if (!stream) return host_error(RAL_ERROR_INVALID_ARGUMENT, "stream_create: null output");
  if (!host_device_valid(device))
    return host_error(RAL_ERROR_INVALID_ARGUMENT, "host device %d does not exist", device);
  return stream_new(device, stream);
}

ral_status host_stream_destroy(int32_t device, ral_stream stream) {
  (void)device;
  if (!stream) return RAL_OK; /* the default stream lives until shutdown */
  wait_until(stream, stream->submitted);
  stream_free(stream);
  return RAL_OK;
}

ral_status host_stream_synchronize(int32_t device, ral_stream stream) {
  struct ral_stream_s* s;
  ral_status st = resolve(device, stream, &s);
  if (st != RAL_OK) return st;
  pthread_mutex_lock(&s->mu);
  caller_wait(s, s->submitted);
  st = s->err;
  if (st != RAL_OK) host_error(st, "%s", s->errmsg);
  s->err = RAL_OK;
  pthread_mutex_unlock(&s->mu);
  return st;
}

ral_status host_stream_query(int32_t device, ral_stream stream) {
  struct ral_stream_s* s;
  ral_status st = resolve(device, stream, &s);
  if (st != RAL_OK) return st;
  return stream_idle(s) ? RAL_OK : RAL_ERROR_NOT_READY;
}

/* ---------------------------------------------------------------- events */
ral_status host_event_create(int32_t device, ral_event* event) {
  (void)device;
  if (!event) return host_error(RAL_ERROR_INVALID_ARGUMENT, "event_create: null output");
  struct ral_event_s* e = calloc(1, sizeof *e);
  if (!e) return host_error(RAL_ERROR_OUT_OF_MEMORY, "event_create: out of memory");
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  *event = e;
  return RAL_OK;
}

static uint64_t event_generation(ral_event e) {
  pthread_mutex_lock(&e->mu);
  uint64_t g = e->recorded;
  pthread_mutex_unlock(&e->mu);
  return g;
}

ral_status host_event_destroy(int32_t device, ral_event event) {
  (void)device;
  if (!event) return RAL_OK;
  event_wait(event, event_generation(event)); /* a queued marker still points here */
  pthread_mutex_destroy(&event->mu);
  pthread_cond_destroy(&event->cv);
  free(event);
  return RAL_OK;
}

ral_status host_event_record(int32_t device, ral_event event, ral_stream stream) {
  if (!event) return host_error(RAL_ERROR_INVALID_ARGUMENT, "event_record: null event");
  struct ral_stream_s* s;
  ral_status st = resolve(device, stream, &s);
  if (st != RAL_OK) return st;
  pthread_mutex_lock(&event->mu);
  uint64_t g = ++event->recorded;
  pthread_mutex_unlock(&event->mu);
  if (stream_idle(s)) { /* nothing queued: the event is reached now */
    event_reach(event, g);
    return RAL_OK;
  }
  node* n = node_of(s, NODE_EVENT, "event_record");
  if (!n) return RAL_ERROR_OUT_OF_MEMORY;
  n->event = event;
  n->generation = g;
  enqueue(s, n);
  return RAL_OK;
}

ral_status host_event_synchronize(int32_t device, ral_event event) {
  (void)device;
  if (!event) return host_error(RAL_ERROR_INVALID_ARGUMENT, "event_synchronize: null event");
  host_pool_caller_waits(1);
  event_wait(event, event_generation(event));
  host_pool_caller_waits(0);
  return RAL_OK;
}

static int event_done(ral_event e) {
  pthread_mutex_lock(&e->mu);
  int done = e->reached >= e->recorded;
  pthread_mutex_unlock(&e->mu);
  return done;
}

ral_status host_event_query(int32_t device, ral_event event) {
  (void)device;
  if (!event) return host_error(RAL_ERROR_INVALID_ARGUMENT, "event_query: null event");
  return event_done(event) ? RAL_OK : RAL_ERROR_NOT_READY;
}

ral_status host_stream_wait_event(int32_t device, ral_stream stream, ral_event event) {
  if (!event) return host_error(RAL_ERROR_INVALID_ARGUMENT, "stream_wait_event: null event");
  struct ral_stream_s* s;
  ral_status st = resolve(device, stream, &s);
  if (st != RAL_OK) return st;
  if (event_done(event)) return RAL_OK;
  node* n = node_of(s, NODE_WAIT, "stream_wait_event");
  if (!n) return RAL_ERROR_OUT_OF_MEMORY;
  n->event = event;
  n->generation = event_generation(event);
  enqueue(s, n);
  return RAL_OK;
}

ral_status host_event_elapsed_ms(int32_t device, ral_event start, ral_event end, float* ms) {
  (void)device;
  if (!start || !end || !ms)
    return host_error(RAL_ERROR_INVALID_ARGUMENT, "event_elapsed_ms: null argument");
  if (!event_generation(start) || !event_generation(end))
    return host_error(RAL_ERROR_INVALID_ARGUMENT, "event_elapsed_ms: event never recorded");
  if (!event_done(start) || !event_done(end)) return RAL_ERROR_NOT_READY;
  *ms = (float)((double)((int64_t)(end->time_ns - start->time_ns)) / 1e6);
  return RAL_OK;
}
