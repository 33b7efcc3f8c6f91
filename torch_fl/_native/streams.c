/* streams.c -- the AsyncStream layer: per-device tables that map small stream and
 * event ids to plugin handles, and the translation of asynchronous failures into
 * messages. Stream 0 is created on first use. Waiting calls (synchronize) run without
 * the device lock so other threads keep allocating meanwhile.
 *
 * Lifetimes: every use of a plugin handle is bracketed by acquire (under dev->lock,
 * refs++) and release (refs--). Destroy marks the slot closing, so new lookups fail,
 * and the last release synchronizes the stream (its pending work completes), moves any
 * asynchronous error to the default stream, and frees the handle under dev->lock. A
 * slot id is reused only after that. Plugin handles are therefore never used after
 * (or concurrently with) their destroy; see the threading contract in ral_plugin.h. */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

#define LOCK(dev) pthread_mutex_lock(&(dev)->lock)
#define UNLOCK(dev) pthread_mutex_unlock(&(dev)->lock)

static int grow_array(void** items, int32_t* cap, int32_t need, size_t item_size) {
  if (need <= *cap) return 0;
  int32_t cap2 = *cap ? *cap * 2 : 8;
  while (cap2 < need) cap2 *= 2;
  void* grown = realloc(*items, (size_t)cap2 * item_size);
  if (!grown) return -1;
  memset((char*)grown + (size_t)*cap * item_size, 0, (size_t)(cap2 - *cap) * item_size);
  *items = grown;
  *cap = cap2;
  return 0;
}

/* Create the plugin stream for slot `sid` (growing the slot array if needed). */
static int open_stream_locked(rt_device* dev, int32_t sid) {
  if (grow_array((void**)&dev->streams, &dev->cap_streams, sid + 1, sizeof *dev->streams))
    return rt_fail(RAL_ERROR_OUT_OF_MEMORY, "no host memory for the stream table");
  rt_stream_slot* slot = &dev->streams[sid];
  int st = dev->plugin->api.stream_create(dev->local, &slot->handle);
  if (st != RAL_OK) return rt_plugin_fail(dev->plugin, st, "stream_create on device %d", dev->global);
  slot->in_use = 1;
  slot->closing = RT_OPEN;
  slot->refs = 0;
  if (sid >= dev->n_streams) dev->n_streams = sid + 1;
  return RAL_OK;
}

/* The slot of an existing stream whose state is at most `max_closing`, or NULL. */
static rt_stream_slot* slot_locked(rt_device* dev, int32_t sid, int max_closing) {
  if (sid < 0 || sid >= dev->n_streams) return NULL;
  rt_stream_slot* slot = &dev->streams[sid];
  return slot->in_use && slot->closing <= max_closing ? slot : NULL;
}

static int missing(rt_device* dev, int32_t sid) {
  return rt_fail(RAL_ERROR_INVALID_ARGUMENT, "stream %d does not exist on device %d", sid,
                 dev->global);
}

static int ensure_default_locked(rt_device* dev, int32_t sid) {
  if (sid == 0 && (dev->n_streams == 0 || !dev->streams[0].in_use)) return open_stream_locked(dev, 0);
  return RAL_OK;
}

int rt_stream_check_locked(rt_device* dev, int32_t sid) {
  int st = ensure_default_locked(dev, sid);
  if (st != RAL_OK) return st;
  return slot_locked(dev, sid, RT_OPEN) ? RAL_OK : missing(dev, sid);
}

int rt_stream_acquire_locked(rt_device* dev, int32_t sid, ral_stream* out) {
  int st = rt_stream_check_locked(dev, sid);
  if (st != RAL_OK) return st;
  rt_stream_slot* slot = &dev->streams[sid];
  slot->refs++;
  *out = slot->handle;
  return RAL_OK;
}

int rt_stream_idle_locked(rt_device* dev, int32_t sid) {
  rt_stream_slot* slot = slot_locked(dev, sid, RT_FINISHING);
  if (!slot || rt_device_hung(dev)) return 1;
  return dev->plugin->api.stream_query(dev->local, slot->handle) == RAL_OK;
}

int rt_stream_sync_handle(rt_device* dev, int32_t sid, ral_stream h) {
  return rt_wait_stream(dev, sid, h);
}

/* Keep an asynchronous error on a slot for its next user-visible sync (first one wins). */
static void keep_pending_locked(rt_stream_slot* slot, int st, const char* msg) {
  if (st == RAL_OK || slot->pending_status) return;
  slot->pending_status = st;
  slot->pending_msg = strdup(msg ? msg : "");
}

void rt_streams_drain_locked(rt_device* dev) {
  /* Handles are freed only under dev->lock, so every in-use slot (closing or not) is
   * safe to synchronize here. */
  for (int32_t sid = 0; sid < dev->n_streams; sid++) {
    rt_stream_slot* slot = &dev->streams[sid];
    if (!slot->in_use) continue;
    int st = rt_stream_sync_handle(dev, sid, slot->handle);
    keep_pending_locked(slot, st, st == RAL_OK ? NULL : rt_last_error());
  }
}

/* Last reference of a closing stream: wait for its work, then free it. Runs without the
 * lock while waiting; the slot is FINISHING, so nobody else frees or reuses it. */
static void finish_stream(rt_device* dev, int32_t sid, ral_stream h) {
  int st = rt_stream_sync_handle(dev, sid, h);
  char* msg = st != RAL_OK ? strdup(rt_last_error()) : NULL;
  LOCK(dev);
  rt_stream_slot* slot = &dev->streams[sid];
  /* Errors of work on a dropped stream surface at the next sync of the default stream. */
  rt_stream_slot* heir = &dev->streams[0];
  if (slot->pending_status) keep_pending_locked(heir, slot->pending_status, slot->pending_msg);
  keep_pending_locked(heir, st, msg);
  /* nothing to report to: the user's destroy returned long ago. A hung device's plugin is
   * never called again (its handle is leaked with it). */
  if (!rt_device_hung(dev)) dev->plugin->api.stream_destroy(dev->local, h);
  free(slot->pending_msg);
  memset(slot, 0, sizeof *slot);
  dev->n_finishing--;
  pthread_cond_broadcast(&dev->finished_cv);
  UNLOCK(dev);
  free(msg);
}

void rt_stream_release(rt_device* dev, int32_t sid) {
  LOCK(dev);
  rt_stream_slot* slot = &dev->streams[sid];
  int last = --slot->refs == 0 && slot->closing == RT_CLOSING;
  ral_stream h = slot->handle;
  if (last) {
    slot->closing = RT_FINISHING;
    dev->n_finishing++;
  }
  UNLOCK(dev);
  if (!last) return;
  char* saved = strdup(rt_last_error()); /* the caller's own error must survive */
  finish_stream(dev, sid, h);
  if (saved) rt_error_restore(RAL_OK, saved);
  free(saved);
}

/* Current stream per thread and device index; zero-initialized: the default stream. */
static _Thread_local int32_t tl_current[RT_MAX_DEVICES];

/* Public: this thread's current stream of a device. */
int32_t rt_current_stream(int32_t device) {
  return device >= 0 && device < RT_MAX_DEVICES ? tl_current[device] : 0;
}

/* Public: make `stream` this thread's current stream of a device. */
int rt_set_current_stream(int32_t device, int32_t stream) {
  if (device < 0 || device >= RT_MAX_DEVICES || stream < 0)
    return rt_fail(RAL_ERROR_INVALID_ARGUMENT, "current stream: device %d, stream %d out of range", device, stream);
  tl_current[device] = stream;
  return RAL_OK;
}

/* Public: the calling thread's current device (see ral_runtime.h). */
static _Thread_local int32_t tl_device;
int32_t rt_current_device(void) { return tl_device; }
void rt_set_current_device(int32_t device) { tl_device = device; }

/* Public: create a stream; ids are reused after destroy. */
int rt_stream_create(int32_t device, int32_t* stream) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  LOCK(dev);
  int32_t sid = 1;
  while (sid < dev->n_streams && dev->streams[sid].in_use) sid++;
  /* Slot 0 must exist too: it inherits the errors of destroyed streams. */
  if (grow_array((void**)&dev->streams, &dev->cap_streams, sid + 1, sizeof *dev->streams))
    st = rt_fail(RAL_ERROR_OUT_OF_MEMORY, "no host memory for the stream table");
  else
    st = open_stream_locked(dev, sid);
  UNLOCK(dev);
  if (st == RAL_OK) *stream = sid;
  return st;
}

/* Public: destroy a non-default stream. Work already queued on it still runs to
 * completion; the plugin stream is freed once no call uses it any more. */
int rt_stream_destroy(int32_t device, int32_t stream) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  if (stream == 0)
    return rt_fail(RAL_ERROR_INVALID_ARGUMENT, "the default stream of device %d cannot be destroyed",
                   device);
  LOCK(dev);
  rt_stream_slot* slot = slot_locked(dev, stream, RT_OPEN);
  if (slot) {
    slot->closing = RT_CLOSING;
    slot->refs++; /* our own, dropped below: the last release frees */
  } else {
    st = missing(dev, stream);
  }
  UNLOCK(dev);
  if (st == RAL_OK) rt_stream_release(dev, stream);
  return st;
}

/* Synchronize one stream; `quiet` skips streams that no longer exist without an error
 * (device-wide syncs race with other threads' destroys). A closing stream is still
 * synchronized when `quiet` (its work belongs to the device). */
static int sync_stream(rt_device* dev, int32_t sid, int quiet) {
  LOCK(dev);
  int st = ensure_default_locked(dev, sid);
  rt_stream_slot* slot = st == RAL_OK ? slot_locked(dev, sid, quiet ? RT_CLOSING : RT_OPEN) : NULL;
  if (st == RAL_OK && !slot) st = quiet ? RAL_OK : missing(dev, sid);
  if (!slot) {
    UNLOCK(dev);
    return st;
  }
  slot->refs++;
  ral_stream h = slot->handle;
  int pending = slot->pending_status;
  char* msg = slot->pending_msg;
  slot->pending_status = 0;
  slot->pending_msg = NULL;
  UNLOCK(dev);
  st = rt_stream_sync_handle(dev, sid, h);
  if (pending) st = rt_error_restore(pending, msg);
  free(msg);
  rt_stream_release(dev, sid);
  return st;
}

/* Public: wait for a stream; report the first asynchronous error since the last sync. */
int rt_stream_synchronize(int32_t device, int32_t stream) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  return sync_stream(dev, stream, 0);
}

/* Public: RAL_OK if the stream is idle, RAL_ERROR_NOT_READY otherwise. */
int rt_stream_query(int32_t device, int32_t stream) {
  rt_device* dev;
  ral_stream h;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  LOCK(dev);
  st = rt_stream_acquire_locked(dev, stream, &h);
  UNLOCK(dev);
  if (st != RAL_OK) return st;
  st = dev->plugin->api.stream_query(dev->local, h);
  if (st != RAL_OK && st != RAL_ERROR_NOT_READY)
    st = rt_plugin_fail(dev->plugin, st, "stream_query(%d) on device %d", stream, device);
  rt_stream_release(dev, stream);
  if (st == RAL_ERROR_NOT_READY)
    return rt_fail(st, "stream %d of device %d has pending work", stream, device);
  return st;
}

/* Synchronize every stream of a device (closing ones too) and wait for streams being
 * freed; returns the first error, which stays this thread's last error. */
static int sync_all(rt_device* dev) {
  LOCK(dev);
  int32_t n = dev->n_streams ? dev->n_streams : 1;
  UNLOCK(dev);
  int first = RAL_OK;
  char first_msg[2048] = "";
  for (int32_t sid = 0; sid < n; sid++) {
    int st = sync_stream(dev, sid, 1);
    if (st != RAL_OK && first == RAL_OK) {
      first = st;
      rt_copy_str(first_msg, sizeof first_msg, rt_last_error());
    }
  }
  LOCK(dev);
  while (dev->n_finishing > 0) pthread_cond_wait(&dev->finished_cv, &dev->lock);
  UNLOCK(dev);
  /* A stream freed meanwhile may have handed its error to the default stream. */
  if (first == RAL_OK) return sync_stream(dev, 0, 1);
  return rt_error_restore(first, first_msg);
}

/* Public: synchronize every stream of the device; returns the first error. */
int rt_device_synchronize(int32_t device) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  return sync_all(dev);
}

/* ---- events ---- */

static int event_acquire_locked(rt_device* dev, int32_t eid, ral_event* out) {
  if (eid <= 0 || eid >= dev->n_events || dev->events[eid].next_free >= 0 ||
      dev->events[eid].closing != RT_OPEN)
    return rt_fail(RAL_ERROR_INVALID_ARGUMENT, "event %d does not exist on device %d", eid,
                   dev->global);
  dev->events[eid].refs++;
  *out = dev->events[eid].handle;
  return RAL_OK;
}

/* Last reference of a destroyed event: let streams that waited on it get past the
 * wait, then free it and put the id back on the free list. */
static void finish_event(rt_device* dev, int32_t eid, ral_event h, int waited) {
  if (waited) {
    char* saved = strdup(rt_last_error());
    LOCK(dev);
    int32_t n = dev->n_streams;
    UNLOCK(dev);
    for (int32_t sid = 0; sid < n; sid++) {
      /* Keep their errors for their own next sync rather than reporting them here. */
      LOCK(dev);
      rt_stream_slot* slot = slot_locked(dev, sid, RT_CLOSING);
      ral_stream sh = slot ? slot->handle : NULL;
      if (slot) slot->refs++;
      UNLOCK(dev);
      if (!slot) continue;
      int st = rt_stream_sync_handle(dev, sid, sh);
      if (st != RAL_OK) {
        LOCK(dev);
        keep_pending_locked(&dev->streams[sid], st, rt_last_error());
        UNLOCK(dev);
      }
      rt_stream_release(dev, sid);
    }
    if (saved) rt_error_restore(RAL_OK, saved);
    free(saved);
  }
  LOCK(dev);
  if (!rt_device_hung(dev)) dev->plugin->api.event_destroy(dev->local, h);
  rt_event_slot* slot = &dev->events[eid];
  memset(slot, 0, sizeof *slot);
  slot->next_free = dev->free_event;
  dev->free_event = eid;
  UNLOCK(dev);
}

static void event_release(rt_device* dev, int32_t eid) {
  LOCK(dev);
  rt_event_slot* slot = &dev->events[eid];
  int last = --slot->refs == 0 && slot->closing == RT_CLOSING;
  if (last) slot->closing = RT_FINISHING;
  ral_event h = slot->handle;
  int waited = slot->waited;
  UNLOCK(dev);
  if (last) finish_event(dev, eid, h, waited);
}

/* Resolve an event (and optionally a stream) with references taken on both. */
static int resolve(int32_t device, int32_t eid, int32_t sid, rt_device** dev, ral_event* e,
                   ral_stream* s) {
  int st = rt_dev_get(device, dev);
  if (st != RAL_OK) return st;
  LOCK(*dev);
  st = event_acquire_locked(*dev, eid, e);
  if (st == RAL_OK && s && (st = rt_stream_acquire_locked(*dev, sid, s)) != RAL_OK)
    (*dev)->events[eid].refs--; /* cannot be the last: the event is open */
  UNLOCK(*dev);
  return st;
}

/* Drop the references resolve() took. */
static void unresolve(rt_device* dev, int32_t eid, int32_t sid, int had_stream) {
  if (had_stream) rt_stream_release(dev, sid);
  event_release(dev, eid);
}

static int event_result(rt_device* dev, int st, const char* what, int32_t eid) {
  if (st == RAL_OK) return st;
  if (st == RAL_ERROR_NOT_READY)
    return rt_fail(st, "event %d of device %d is not complete", eid, dev->global);
  return rt_plugin_fail(dev->plugin, st, "%s(event %d) on device %d", what, eid, dev->global);
}

/* Public: create an event; ids start at 1 and are reused after destroy. */
int rt_event_create(int32_t device, int32_t* event) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  LOCK(dev);
  int32_t eid = dev->free_event;
  if (eid <= 0) {
    eid = dev->n_events ? dev->n_events : 1;
    if (grow_array((void**)&dev->events, &dev->cap_events, eid + 1, sizeof *dev->events)) {
      UNLOCK(dev);
      return rt_fail(RAL_ERROR_OUT_OF_MEMORY, "no host memory for the event table");
    }
  }
  ral_event h = NULL;
  st = dev->plugin->api.event_create(dev->local, &h);
  if (st == RAL_OK) {
    if (eid == dev->free_event) dev->free_event = dev->events[eid].next_free;
    rt_event_slot* slot = &dev->events[eid];
    memset(slot, 0, sizeof *slot);
    slot->handle = h;
    slot->next_free = -1;
    if (eid >= dev->n_events) dev->n_events = eid + 1;
    *event = eid;
  }
  UNLOCK(dev);
  return event_result(dev, st, "event_create", 0);
}

/* Public: destroy an event; it is freed once no call uses it any more. */
int rt_event_destroy(int32_t device, int32_t event) {
  rt_device* dev;
  ral_event h;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  LOCK(dev);
  if ((st = event_acquire_locked(dev, event, &h)) == RAL_OK) dev->events[event].closing = RT_CLOSING;
  UNLOCK(dev);
  if (st == RAL_OK) event_release(dev, event);
  return st;
}

/* Public: record an event at the tail of a stream. */
int rt_event_record(int32_t device, int32_t event, int32_t stream) {
  rt_device* dev;
  ral_event e;
  ral_stream s;
  int st = resolve(device, event, stream, &dev, &e, &s);
  if (st != RAL_OK) return st;
  st = event_result(dev, dev->plugin->api.event_record(dev->local, e, s), "event_record", event);
  unresolve(dev, event, stream, 1);
  return st;
}

/* Public: block until the event's work is done. */
int rt_event_synchronize(int32_t device, int32_t event) {
  rt_device* dev;
  ral_event e;
  int st = resolve(device, event, 0, &dev, &e, NULL);
  if (st != RAL_OK) return st;
  st = rt_wait_event(dev, event, e);
  unresolve(dev, event, 0, 0);
  return st;
}

/* Public: RAL_OK if the event completed, RAL_ERROR_NOT_READY otherwise. */
int rt_event_query(int32_t device, int32_t event) {
  rt_device* dev;
  ral_event e;
  int st = resolve(device, event, 0, &dev, &e, NULL);
  if (st != RAL_OK) return st;
  st = event_result(dev, dev->plugin->api.event_query(dev->local, e), "event_query", event);
  unresolve(dev, event, 0, 0);
  return st;
}

/* Public: make later work on `stream` wait for `event`. */
int rt_stream_wait_event(int32_t device, int32_t stream, int32_t event) {
  rt_device* dev;
  ral_event e;
  ral_stream s;
  int st = resolve(device, event, stream, &dev, &e, &s);
  if (st != RAL_OK) return st;
  LOCK(dev);
  dev->events[event].waited = 1; /* the queued wait may point at the event until it runs */
  UNLOCK(dev);
  st = event_result(dev, dev->plugin->api.stream_wait_event(dev->local, s, e), "stream_wait_event",
                    event);
  unresolve(dev, event, stream, 1);
  return st;
}

/* Public: milliseconds between two completed events. */
int rt_event_elapsed_ms(int32_t device, int32_t start, int32_t end, float* ms) {
  rt_device* dev;
  ral_event a, b;
  int st = resolve(device, start, 0, &dev, &a, NULL);
  if (st != RAL_OK) return st;
  if ((st = resolve(device, end, 0, &dev, &b, NULL)) != RAL_OK) {
    unresolve(dev, start, 0, 0);
    return st;
  }
  st = event_result(dev, dev->plugin->api.event_elapsed_ms(dev->local, a, b, ms),
                    "event_elapsed_ms", end);
  if (st == RAL_OK && !(*ms > -1e30f && *ms < 1e30f)) /* NaN or infinite from the plugin */
    st = rt_plugin_fail(dev->plugin, RAL_ERROR_INTERNAL,
                        "event_elapsed_ms(event %d, event %d) on device %d returned %g ms", start,
                        end, dev->global, (double)*ms);
  unresolve(dev, end, 0, 0);
  unresolve(dev, start, 0, 0);
  return st;
}
