/* streams.c -- the AsyncStream layer: per-device tables that map small stream and
 * event ids to plugin handles, and the translation of asynchronous failures into
 * messages. Stream 0 is created on first use. Waiting calls (synchronize) run without
 * the device lock so other threads keep allocating meanwhile. */
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

/* Create the plugin stream for slot `sid` (the slot array already holds it). */
static int open_stream_locked(rt_device* dev, int32_t sid) {
  if (grow_array((void**)&dev->streams, &dev->cap_streams, sid + 1, sizeof *dev->streams))
    return rt_fail(RAL_ERROR_OUT_OF_MEMORY, "no host memory for the stream table");
  rt_stream_slot* slot = &dev->streams[sid];
  int st = dev->plugin->api.stream_create(dev->local, &slot->handle);
  if (st != RAL_OK) return rt_plugin_fail(dev->plugin, st, "stream_create on device %d", dev->global);
  slot->in_use = 1;
  if (sid >= dev->n_streams) dev->n_streams = sid + 1;
  return RAL_OK;
}

int rt_stream_handle_locked(rt_device* dev, int32_t sid, ral_stream* out) {
  if (sid == 0 && (dev->n_streams == 0 || !dev->streams[0].in_use)) {
    int st = open_stream_locked(dev, 0);
    if (st != RAL_OK) return st;
  }
  if (sid < 0 || sid >= dev->n_streams || !dev->streams[sid].in_use)
    return rt_fail(RAL_ERROR_INVALID_ARGUMENT, "stream %d does not exist on device %d", sid,
                   dev->global);
  *out = dev->streams[sid].handle;
  return RAL_OK;
}

int rt_stream_handle(rt_device* dev, int32_t sid, ral_stream* out) {
  LOCK(dev);
  int st = rt_stream_handle_locked(dev, sid, out);
  UNLOCK(dev);
  return st;
}

int rt_stream_idle_locked(rt_device* dev, int32_t sid) {
  if (sid < 0 || sid >= dev->n_streams || !dev->streams[sid].in_use) return 1;
  return dev->plugin->api.stream_query(dev->local, dev->streams[sid].handle) == RAL_OK;
}

int rt_stream_sync_handle(rt_device* dev, int32_t sid, ral_stream h) {
  rt_plugin* p = dev->plugin;
  int st = p->api.stream_synchronize(dev->local, h);
  if (st == RAL_OK) return st;
  /* The plugin's message already names the op; add context only when it has none. */
  const char* msg = p->api.last_error ? p->api.last_error() : NULL;
  if (msg && msg[0]) return rt_plugin_fail(p, st, NULL);
  return rt_plugin_fail(p, st, "asynchronous work on stream %d of device %d", sid, dev->global);
}

void rt_streams_drain_locked(rt_device* dev) {
  for (int32_t sid = 0; sid < dev->n_streams; sid++) {
    rt_stream_slot* slot = &dev->streams[sid];
    if (!slot->in_use) continue;
    int st = rt_stream_sync_handle(dev, sid, slot->handle);
    if (st != RAL_OK && !slot->pending_status) {
      slot->pending_status = st;
      slot->pending_msg = strdup(rt_last_error());
    }
  }
}

/* Public: create a stream; ids are reused after destroy. */
int rt_stream_create(int32_t device, int32_t* stream) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  LOCK(dev);
  int32_t sid = 1;
  while (sid < dev->n_streams && dev->streams[sid].in_use) sid++;
  st = open_stream_locked(dev, sid);
  UNLOCK(dev);
  if (st == RAL_OK) *stream = sid;
  return st;
}

/* Public: destroy a non-default stream once its work is done. */
int rt_stream_destroy(int32_t device, int32_t stream) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  if (stream == 0)
    return rt_fail(RAL_ERROR_INVALID_ARGUMENT, "the default stream of device %d cannot be destroyed",
                   device);
  LOCK(dev);
  ral_stream h;
  if ((st = rt_stream_handle_locked(dev, stream, &h)) == RAL_OK) {
    rt_stream_slot* slot = &dev->streams[stream];
    st = dev->plugin->api.stream_destroy(dev->local, h);
    if (st != RAL_OK) st = rt_plugin_fail(dev->plugin, st, "stream_destroy(%d) on device %d", stream, device);
    free(slot->pending_msg);
    memset(slot, 0, sizeof *slot);
  }
  UNLOCK(dev);
  return st;
}

/* Public: wait for a stream; report the first asynchronous error since the last sync. */
int rt_stream_synchronize(int32_t device, int32_t stream) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  ral_stream h;
  int pending = 0;
  char* msg = NULL;
  LOCK(dev);
  if ((st = rt_stream_handle_locked(dev, stream, &h)) == RAL_OK) {
    rt_stream_slot* slot = &dev->streams[stream];
    pending = slot->pending_status;
    msg = slot->pending_msg;
    slot->pending_status = 0;
    slot->pending_msg = NULL;
  }
  UNLOCK(dev);
  if (st != RAL_OK) return st;
  st = rt_stream_sync_handle(dev, stream, h);
  if (pending) st = rt_error_restore(pending, msg);
  free(msg);
  return st;
}

/* Public: RAL_OK if the stream is idle, RAL_ERROR_NOT_READY otherwise. */
int rt_stream_query(int32_t device, int32_t stream) {
  rt_device* dev;
  ral_stream h;
  int st = rt_dev_get(device, &dev);
  if (st == RAL_OK) st = rt_stream_handle(dev, stream, &h);
  if (st != RAL_OK) return st;
  st = dev->plugin->api.stream_query(dev->local, h);
  if (st == RAL_ERROR_NOT_READY)
    return rt_fail(st, "stream %d of device %d has pending work", stream, device);
  return st == RAL_OK ? st : rt_plugin_fail(dev->plugin, st, "stream_query(%d) on device %d", stream, device);
}

/* Public: synchronize every stream of the device; returns the first error. */
int rt_device_synchronize(int32_t device) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  LOCK(dev);
  int32_t n = dev->n_streams ? dev->n_streams : 1;
  UNLOCK(dev);
  int first = RAL_OK;
  char first_msg[2048] = "";
  for (int32_t sid = 0; sid < n; sid++) {
    LOCK(dev);
    int exists = sid == 0 || (sid < dev->n_streams && dev->streams[sid].in_use);
    UNLOCK(dev);
    if (!exists) continue;
    st = rt_stream_synchronize(device, sid);
    if (st != RAL_OK && first == RAL_OK) {
      first = st;
      strncpy(first_msg, rt_last_error(), sizeof first_msg - 1);
    }
  }
  return first == RAL_OK ? first : rt_error_restore(first, first_msg);
}

/* ---- events ---- */

static int event_handle_locked(rt_device* dev, int32_t eid, ral_event* out) {
  if (eid <= 0 || eid >= dev->n_events || dev->events[eid].next_free >= 0 )
    return rt_fail(RAL_ERROR_INVALID_ARGUMENT, "event %d does not exist on device %d", eid,
                   dev->global);
  *out = dev->events[eid].handle;
  return RAL_OK;
}

/* Resolve an event (and optionally a stream) without keeping the lock. */
static int resolve(int32_t device, int32_t eid, int32_t sid, rt_device** dev, ral_event* e,
                   ral_stream* s) {
  int st = rt_dev_get(device, dev);
  if (st != RAL_OK) return st;
  LOCK(*dev);
  st = event_handle_locked(*dev, eid, e);
  if (st == RAL_OK && s) st = rt_stream_handle_locked(*dev, sid, s);
  UNLOCK(*dev);
  return st;
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
    dev->events[eid].handle = h;
    dev->events[eid].next_free = -1;
    if (eid >= dev->n_events) dev->n_events = eid + 1;
    *event = eid;
  }
  UNLOCK(dev);
  return event_result(dev, st, "event_create", 0);
}

/* Public: destroy an event. */
int rt_event_destroy(int32_t device, int32_t event) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  LOCK(dev);
  ral_event h = NULL;
  if ((st = event_handle_locked(dev, event, &h)) == RAL_OK) {
    st = dev->plugin->api.event_destroy(dev->local, h);
    dev->events[event].handle = NULL;
    dev->events[event].next_free = dev->free_event;
    dev->free_event = event;
  }
  UNLOCK(dev);
  return st == RAL_OK ? st : event_result(dev, st, "event_destroy", event);
}

/* Public: record an event at the tail of a stream. */
int rt_event_record(int32_t device, int32_t event, int32_t stream) {
  rt_device* dev;
  ral_event e;
  ral_stream s;
  int st = resolve(device, event, stream, &dev, &e, &s);
  if (st != RAL_OK) return st;
  return event_result(dev, dev->plugin->api.event_record(dev->local, e, s), "event_record", event);
}

/* Public: block until the event's work is done. */
int rt_event_synchronize(int32_t device, int32_t event) {
  rt_device* dev;
  ral_event e;
  int st = resolve(device, event, 0, &dev, &e, NULL);
  if (st != RAL_OK) return st;
  return event_result(dev, dev->plugin->api.event_synchronize(dev->local, e), "event_synchronize",
                      event);
}

/* Public: RAL_OK if the event completed, RAL_ERROR_NOT_READY otherwise. */
int rt_event_query(int32_t device, int32_t event) {
  rt_device* dev;
  ral_event e;
  int st = resolve(device, event, 0, &dev, &e, NULL);
  if (st != RAL_OK) return st;
  return event_result(dev, dev->plugin->api.event_query(dev->local, e), "event_query", event);
}

/* Public: make later work on `stream` wait for `event`. */
int rt_stream_wait_event(int32_t device, int32_t stream, int32_t event) {
  rt_device* dev;
  ral_event e;
  ral_stream s;
  int st = resolve(device, event, stream, &dev, &e, &s);
  if (st != RAL_OK) return st;
  return event_result(dev, dev->plugin->api.stream_wait_event(dev->local, s, e), "stream_wait_event",
                      event);
}

/* Public: milliseconds between two completed events. */
int rt_event_elapsed_ms(int32_t device, int32_t start, int32_t end, float* ms) {
  rt_device* dev;
  ral_event a, b;
  int st = resolve(device, start, 0, &dev, &a, NULL);
  if (st == RAL_OK) st = resolve(device, end, 0, &dev, &b, NULL);
  if (st != RAL_OK) return st;
  return event_result(dev, dev->plugin->api.event_elapsed_ms(dev->local, a, b, ms),
                      "event_elapsed_ms", end);
}
