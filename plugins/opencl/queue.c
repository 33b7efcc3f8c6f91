/*
 * queue.c -- streams are in-order command queues (with profiling, for elapsed times);
 * events are markers enqueued at the stream's tail; on a CPU runtime, commands queue
 * behind a gate and reach the worker threads in batches (see "Batching" below).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep under -std=c11 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ocl.h"

struct ral_event_s {
  /* One thread may record the event while others query, wait for or time it (the runtime
   * keeps the event alive, not its cl_event): `ev` is read and replaced under `lock`, and
   * readers work on their own retained reference. */
  pthread_mutex_t lock;
  cl_event ev; /* NULL until recorded */
  /* Recorded on an idle inline stream (inline.c): the work it marks was complete when it
   * was recorded, so a stream waiting for it need not wait for the marker. */
  int done_at_record;
};

/* ---- Batching (CPU runtimes) ----
 * PoCL's CPU device hands every command to its worker threads and wakes them (a futex
 * wake, and all of them for a kernel); a command queued after the workers went idle costs
 * a wake-up and a sleep, and on a busy host each wake-up waits for a core. Python queues
 * an op every few tens of microseconds, longer than a small kernel runs, so a loop of
 * small ops paid one hand-off per command. Instead the first command queued on an idle
 * gate waits behind a barrier on a user event (the gate) and the following ones queue
 * behind it; the gate opens (clSetUserEventStatus) when the host waits for, reads from or
 * queries the stream, when an event is recorded on it, after OCL_GATE_MAX commands, and
 * for a launch big enough to start at once; the workers then run the batch back to back.
 * Order is unchanged (the queue is in order), and every wait opens the gate first, under
 * `gate_mu`, so no wait can stand behind a closed gate. TORCH_FL_OPENCL_BATCH=0 turns it
 * off (read once). GPUs batch in their drivers and are never gated, nor is PoCL's
 * single-threaded "basic" device (gate_fits). */
int ocl_env_switch(const char* name, _Atomic int* cache) {
  int v = atomic_load(cache);
  if (v < 0) {
    const char* e = getenv(name);
    v = !(e && strcmp(e, "0") == 0);
    atomic_store(cache, v);
  }
  return v;
}

static int batch_enabled(void) {
  static _Atomic int on = -1;
  return ocl_env_switch("TORCH_FL_OPENCL_BATCH", &on);
}

/* Whether a CPU device's runtime hands commands to worker threads (what the gate saves
 * wake-ups of). PoCL's "basic" device has none: it runs the commands a user event releases
 * inside clSetUserEventStatus, and PoCL 3.1 then takes the event lock it already holds there
 * (a deadlock at the first `.item()`, seen with POCL_DEVICES=basic). */
static int gate_fits(const ocl_device* d) {
  return d->cpu && strncmp(d->name, "basic-", 6) != 0;
}

/* Open the gate, if any: its commands start. Call with gate_mu held. */
static void gate_open_locked(struct ral_stream_s* s) {
  cl_event g = s->gate;
  if (!g) return;
  s->gate = NULL;
  s->held = 0;
  CL.clSetUserEventStatus(g, CL_COMPLETE);
  CL.clReleaseEvent(g);
  ocl_count(OCL_CNT_gate_opens);
}

/* On an inline stream, a command is announced (inline.c) and queued under inl_mu: it waits
 * for a running inline command, commands of several threads are counted in queue order,
 * and each one's event becomes the tail that says when the stream is idle again. */
void ocl_stream_hold(struct ral_stream_s* s) {
  if (s->inl) {
    pthread_mutex_lock(&s->inl_mu);
    s->announced++;
  }
  if (!s->batch) return;
  pthread_mutex_lock(&s->gate_mu);
  if (!s->gate) {
    cl_int err;
    cl_event g = CL.clCreateUserEvent(g_dev[s->device].ctx, &err);
    if (g && CL.clEnqueueBarrierWithWaitList(s->q, 1, &g, NULL) == CL_SUCCESS) {
      s->gate = g;
      s->held = 0;
      ocl_count(OCL_CNT_gates);
    } else if (g) { /* no gate: the command runs unbatched */
      CL.clSetUserEventStatus(g, CL_COMPLETE);
      CL.clReleaseEvent(g);
    }
  }
  pthread_mutex_unlock(&s->gate_mu);
}

void ocl_stream_queued(struct ral_stream_s* s, int start, cl_event ev) {
  uint64_t n = atomic_fetch_add(&s->enqueued, 1) + 1;
  if (ev) ocl_stream_set_tail(s, ev, n);
  if (s->batch) {
    pthread_mutex_lock(&s->gate_mu);
    if (s->gate && (start || ++s->held >= OCL_GATE_MAX)) gate_open_locked(s);
    pthread_mutex_unlock(&s->gate_mu);
  }
  if (s->inl) pthread_mutex_unlock(&s->inl_mu);
}

void ocl_stream_unqueued(struct ral_stream_s* s) {
  if (!s->inl) return;
  s->announced--;
  pthread_mutex_unlock(&s->inl_mu);
}

cl_int ocl_stream_enqueued(struct ral_stream_s* s, cl_int err, int start, cl_event ev) {
  if (err == CL_SUCCESS) ocl_stream_queued(s, start, ev);
  else ocl_stream_unqueued(s);
  if (ev) CL.clReleaseEvent(ev);
  return err;
}

void ocl_stream_start(struct ral_stream_s* s) {
  if (!s->batch) return;
  pthread_mutex_lock(&s->gate_mu);
  gate_open_locked(s);
  pthread_mutex_unlock(&s->gate_mu);
}

/* Around a blocking call on the stream: open the gate and keep new ones from closing in
 * front of the call until it returns (other threads' commands on this stream wait). */
void ocl_stream_block_begin(struct ral_stream_s* s) {
  if (!s->batch) return;
  pthread_mutex_lock(&s->gate_mu);
  gate_open_locked(s);
}

void ocl_stream_block_end(struct ral_stream_s* s) {
  if (s->batch) pthread_mutex_unlock(&s->gate_mu);
}

cl_int ocl_stream_finish(struct ral_stream_s* s) {
  /* The finish waits under gate_mu, so no other thread's gate closes in front of it. */
  ocl_stream_block_begin(s);
  ocl_count(OCL_CNT_finishes);
  cl_int err = CL.clFinish(s->q);
  ocl_stream_block_end(s);
  return err;
}

ral_status ocl_stream_create(int32_t device, ral_stream* stream) {
  ocl_device* d = ocl_device_get(device);
  *stream = NULL;
  if (!d) return RAL_ERROR_INVALID_ARGUMENT;
  struct ral_stream_s* s = calloc(1, sizeof *s);
  if (!s) return ocl_error(RAL_ERROR_OUT_OF_MEMORY, "no host memory for a stream");
  cl_int err;
  s->q = CL.clCreateCommandQueue(d->ctx, d->id, CL_QUEUE_PROFILING_ENABLE, &err);
  if (!s->q) {
    free(s);
    return ocl_cl_fail(err, "clCreateCommandQueue");
  }
  static const cl_int zeros[OCL_ERR_INTS] = {0};
  s->err = CL.clCreateBuffer(d->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zeros, (void*)zeros, &err);
  if (!s->err) {
    CL.clReleaseCommandQueue(s->q);
    free(s);
    return ocl_cl_fail(err, "clCreateBuffer (stream fault record)");
  }
  s->device = device;
  atomic_init(&s->armed, 0);
  atomic_init(&s->enqueued, 0);
  pthread_mutex_init(&s->tail_mu, NULL);
  pthread_mutex_init(&s->gate_mu, NULL);
  pthread_mutex_init(&s->inl_mu, NULL);
  pthread_mutex_init(&s->panel_mu, NULL);
  s->batch = gate_fits(d) && batch_enabled();
  s->inl = ocl_inline_stream_ok(d);
  *stream = s;
  return RAL_OK;
}

ocl_arg ocl_stream_err_arg(const ral_kernel_call* c) { return (ocl_arg){sizeof(cl_mem), &c->stream->err}; }

void ocl_stream_arm(const ral_kernel_call* c) { atomic_store(&c->stream->armed, 1); }

static const char* const k_site_names[OCL_N_SITES] = {
    "?", "gather", "index_select", "scatter", "scatter_add", "embedding", "embedding_dense_backward", "nll_loss",
    "max_pool2d_with_indices_backward", "adaptive_max_pool2d_backward", "max_pool3d_with_indices_backward",
    "adaptive_max_pool3d_backward",
};

/* After the queue drained: report (and clear) an index fault recorded by a kernel.
 * `armed` is cleared before the clFinish that preceded this, and set only after an
 * enqueue, so a fault of a kernel the finish did not cover is read by a later sync. */
static ral_status read_fault(struct ral_stream_s* s) {
  cl_int rec[OCL_ERR_INTS] = {0};
  static const cl_int zeros[OCL_ERR_INTS] = {0};
  ocl_stream_block_begin(s);
  ocl_count(OCL_CNT_reads);
  cl_int err = CL.clEnqueueReadBuffer(s->q, s->err, CL_TRUE, 0, sizeof rec, rec, 0, NULL, NULL);
  if (err == CL_SUCCESS && rec[0] != 0) {
    ocl_count(OCL_CNT_writes);
    cl_int werr = CL.clEnqueueWriteBuffer(s->q, s->err, CL_TRUE, 0, sizeof zeros, zeros, 0, NULL, NULL);
    ocl_stream_block_end(s);
    if (werr != CL_SUCCESS) return ocl_cl_fail(werr, "clEnqueueWriteBuffer (stream fault record)");
  } else {
    ocl_stream_block_end(s);
  }
  if (err != CL_SUCCESS) return ocl_cl_fail(err, "clEnqueueReadBuffer (stream fault record)");
  if (rec[0] == 0) return RAL_OK;
  long long index = (long long)(((uint64_t)(uint32_t)rec[2] << 32) | (uint32_t)rec[1]);
  long long size = (long long)(((uint64_t)(uint32_t)rec[5] << 32) | (uint32_t)rec[4]);
  return ocl_index_error(rec[0], index, rec[3], size, 1);
}

ral_status ocl_index_error(int site, long long index, int dim, long long size, int queued) {
  const char* op = site > 0 && site < OCL_N_SITES ? k_site_names[site] : "an index kernel";
  /* Same words as PyTorch's CPU message; torch_fl.errors maps them to IndexError. */
  return ocl_error(RAL_ERROR_INVALID_ARGUMENT, "%s: index %lld is out of bounds for dimension %d with size %lld%s", op,
                   index, dim, size,
                   queued ? " (found on the device by a kernel queued before this synchronization; nothing was "
                            "written outside its buffers)"
                          : "");
}

ral_status ocl_stream_destroy(int32_t device, ral_stream stream) {
  (void)device;
  if (!stream) return RAL_OK;
  ocl_stream_start(stream);
  ocl_count(OCL_CNT_finishes);
  CL.clFinish(stream->q);
  ocl_panels_release(stream);
  pthread_mutex_destroy(&stream->panel_mu);
  CL.clReleaseMemObject(stream->err);
  if (stream->tail) CL.clReleaseEvent(stream->tail);
  pthread_mutex_destroy(&stream->tail_mu);
  pthread_mutex_destroy(&stream->gate_mu);
  pthread_mutex_destroy(&stream->inl_mu);
  CL.clReleaseCommandQueue(stream->q);
  free(stream);
  return RAL_OK;
}

/* Whether an inline stream is idle (inline.c): nothing to wait for. */
static int inline_idle(struct ral_stream_s* s) {
  if (!ocl_inline_begin(s)) return 0;
  ocl_inline_end(s);
  return 1;
}

ral_status ocl_stream_synchronize(int32_t device, ral_stream stream) {
  (void)device;
  int armed = atomic_exchange(&stream->armed, 0);
  /* An inline stream with every queued command known complete has nothing to wait for. */
  if (!armed && inline_idle(stream)) return RAL_OK;
  /* The commands announced before the finish were queued before it (announcing and
   * queueing happen under inl_mu): they are complete after it. */
  uint64_t covered = 0;
  if (stream->inl) {
    pthread_mutex_lock(&stream->inl_mu);
    covered = stream->announced;
    pthread_mutex_unlock(&stream->inl_mu);
  }
  cl_int err = ocl_stream_finish(stream);
  if (err != CL_SUCCESS) return ocl_cl_fail(err, "clFinish (a queued kernel or copy failed)");
  if (stream->inl) {
    pthread_mutex_lock(&stream->inl_mu);
    if (covered > stream->done_n) stream->done_n = covered;
    pthread_mutex_unlock(&stream->inl_mu);
  }
  ocl_profile_flush();
  return armed ? read_fault(stream) : RAL_OK;
}

static ral_status event_state(cl_event ev) {
  cl_int state = CL_COMPLETE;
  cl_int err = CL.clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL);
  if (err != CL_SUCCESS) return ocl_cl_fail(err, "clGetEventInfo");
  if (state < 0) return ocl_cl_fail(state, "queued work");
  return state == CL_COMPLETE ? RAL_OK : RAL_ERROR_NOT_READY;
}

void ocl_stream_set_tail(struct ral_stream_s* s, cl_event ev, uint64_t n) {
  CL.clRetainEvent(ev);
  pthread_mutex_lock(&s->tail_mu);
  if (!s->tail || n >= s->tail_n) {
    if (s->tail) CL.clReleaseEvent(s->tail);
    s->tail = ev;
    s->tail_n = n;
  } else {
    CL.clReleaseEvent(ev);
  }
  pthread_mutex_unlock(&s->tail_mu);
}

/* Queue a marker at the stream's tail and remember it (with the command count taken
 * before it, so every counted command precedes it) as the stream's tail. */
static ral_status mark_tail(struct ral_stream_s* s, cl_event* out) {
  uint64_t n = atomic_load(&s->enqueued);
  cl_event ev;
  /* The marker must be able to complete: queue it in front of any new gate. */
  ocl_stream_block_begin(s);
  ocl_count(OCL_CNT_markers);
  cl_int err = CL.clEnqueueMarkerWithWaitList(s->q, 0, NULL, &ev);
  ocl_stream_block_end(s);
  if (err != CL_SUCCESS) return ocl_cl_fail(err, "clEnqueueMarkerWithWaitList");
  ocl_count(OCL_CNT_flushes);
  CL.clFlush(s->q);
  ocl_stream_set_tail(s, ev, n);
  *out = ev;
  return RAL_OK;
}

/* How long a query waits for the stream's tail. OpenCL has no "is this queue idle" call: a
 * command completes only once the driver's scheduler has seen it (tens of microseconds on
 * PoCL, much more on a loaded host), so a query answers from the stream's tail -- the last
 * recorded marker or host read -- when nothing was queued after it (the queue is in order:
 * the tail done means the stream idle), and otherwise queues a fresh marker; it gives
 * the tail this long before reporting the stream busy. Reusing the read matters: the
 * runtime's timed stream wait (watchdog.c) queries before every wait, so `.item()` would
 * otherwise pay a marker per step. */
#define QUERY_GRACE_NS 2000000L

ral_status ocl_stream_query(int32_t device, ral_stream stream) {
  (void)device;
  if (inline_idle(stream)) return RAL_OK;
  /* Held commands must be able to complete while the query polls the tail. */
  ocl_stream_start(stream);
  cl_event ev = NULL;
  pthread_mutex_lock(&stream->tail_mu);
  if (stream->tail && stream->tail_n == atomic_load(&stream->enqueued)) {
    ev = stream->tail;
    CL.clRetainEvent(ev);
  }
  pthread_mutex_unlock(&stream->tail_mu);
  ral_status st;
  if (!ev) {
    st = mark_tail(stream, &ev);
    if (st != RAL_OK) return st;
  }
  st = event_state(ev);
  struct timespec t0, now, nap = {0, 20000};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (st == RAL_ERROR_NOT_READY) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - t0.tv_sec) * 1000000000L + (now.tv_nsec - t0.tv_nsec) > QUERY_GRACE_NS) break;
    nanosleep(&nap, NULL);
    st = event_state(ev);
  }
  CL.clReleaseEvent(ev);
  return st;
}

ral_status ocl_event_create(int32_t device, ral_event* event) {
  if (!ocl_device_get(device)) return RAL_ERROR_INVALID_ARGUMENT;
  *event = calloc(1, sizeof **event);
  if (!*event) return ocl_error(RAL_ERROR_OUT_OF_MEMORY, "no host memory for an event");
  pthread_mutex_init(&(*event)->lock, NULL);
  return RAL_OK;
}

ral_status ocl_event_destroy(int32_t device, ral_event event) {
  (void)device;
  if (!event) return RAL_OK;
  if (event->ev) CL.clReleaseEvent(event->ev);
  pthread_mutex_destroy(&event->lock);
  free(event);
  return RAL_OK;
}

/* The event's current cl_event with a reference of the caller's own (release it), or NULL. */
static cl_event event_get(ral_event event) {
  pthread_mutex_lock(&event->lock);
  cl_event ev = event->ev;
  if (ev) CL.clRetainEvent(ev);
  pthread_mutex_unlock(&event->lock);
  return ev;
}

ral_status ocl_event_record(int32_t device, ral_event event, ral_stream stream) {
  (void)device;
  cl_event ev;
  /* Idle (inl_mu held to the marker, so no command slips in front of it): see done_at_record. */
  int idle = ocl_inline_begin(stream);
  ral_status st = mark_tail(stream, &ev);
  if (idle) ocl_inline_end(stream);
  if (st != RAL_OK) return st;
  pthread_mutex_lock(&event->lock);
  cl_event old = event->ev;
  event->ev = ev;
  event->done_at_record = idle;
  pthread_mutex_unlock(&event->lock);
  if (old) CL.clReleaseEvent(old);
  return RAL_OK;
}

ral_status ocl_event_synchronize(int32_t device, ral_event event) {
  (void)device;
  cl_event ev = event_get(event);
  if (!ev) return RAL_OK;
  ocl_count(OCL_CNT_waits);
  cl_int err = CL.clWaitForEvents(1, &ev);
  CL.clReleaseEvent(ev);
  return err == CL_SUCCESS ? RAL_OK : ocl_cl_fail(err, "clWaitForEvents");
}

/* Whether the event was recorded on an idle inline stream (its work was done then). */
static int done_at_record(ral_event event) {
  pthread_mutex_lock(&event->lock);
  int d = event->ev && event->done_at_record;
  pthread_mutex_unlock(&event->lock);
  return d;
}

ral_status ocl_event_query(int32_t device, ral_event event) {
  (void)device;
  if (done_at_record(event)) return RAL_OK;
  cl_event ev = event_get(event);
  if (!ev) return RAL_OK;
  ral_status st = event_state(ev);
  CL.clReleaseEvent(ev);
  return st;
}

ral_status ocl_stream_wait_event(int32_t device, ral_stream stream, ral_event event) {
  (void)device;
  int was_done = done_at_record(event);
  cl_event ev = event_get(event);
  if (!ev) return RAL_OK;
  /* An inline stream need not wait for work that is done: a barrier would keep it busy
   * (queued-only) until its next synchronize. */
  if (stream->inl && (was_done || event_state(ev) == RAL_OK)) {
    CL.clReleaseEvent(ev);
    return RAL_OK;
  }
  ocl_stream_hold(stream);
  ocl_count(OCL_CNT_barriers);
  cl_event done = NULL;
  cl_int err = CL.clEnqueueBarrierWithWaitList(stream->q, 1, &ev, OCL_TAIL_EV(stream, &done));
  CL.clReleaseEvent(ev);
  err = ocl_stream_enqueued(stream, err, 0, done);
  return err == CL_SUCCESS ? RAL_OK : ocl_cl_fail(err, "clEnqueueBarrierWithWaitList");
}

ral_status ocl_event_elapsed_ms(int32_t device, ral_event start, ral_event end, float* ms) {
  (void)device;
  cl_event e0 = event_get(start), e1 = event_get(end);
  ral_status st = RAL_OK;
  if (!e0 || !e1) {
    st = ocl_error(RAL_ERROR_INVALID_ARGUMENT, "event was never recorded");
  } else {
    /* A marker of an idle inline stream may not have been seen by the runtime yet (query
     * answered for it): its timestamps come once it is, moments later. */
    if (done_at_record(start)) CL.clWaitForEvents(1, &e0);
    if (done_at_record(end)) CL.clWaitForEvents(1, &e1);
    cl_ulong t0 = 0, t1 = 0;
    cl_int err = CL.clGetEventProfilingInfo(e0, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL);
    if (err == CL_SUCCESS) err = CL.clGetEventProfilingInfo(e1, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    if (err != CL_SUCCESS)
      st = ocl_cl_fail(err, "clGetEventProfilingInfo");
    else
      *ms = (float)((double)((int64_t)(t1 - t0)) / 1e6);
  }
  if (e0) CL.clReleaseEvent(e0);
  if (e1) CL.clReleaseEvent(e1);
  return st;
}
