/* u64map.h -- open-addressing hash map from a nonzero uint64 key to a pointer.
 * Used for the live-allocation table (ptr -> block) and the large size classes of the
 * memory pool. Not thread-safe: callers hold their device's lock. */
#ifndef RT_U64MAP_H
#define RT_U64MAP_H

#include <stdint.h>

typedef struct {
  uint64_t* keys; /* 0 marks an empty slot */
  void** vals;
  uint32_t cap;   /* power of two, or 0 before the first insert */
  uint32_t count;
} u64map;

/* Value stored for key, or NULL. */
void* u64map_get(const u64map* m, uint64_t key);
/* Insert or replace; returns 0, or -1 if memory ran out. */
int u64map_put(u64map* m, uint64_t key, void* val);
/* Remove key and return its value (NULL if absent). */
void* u64map_remove(u64map* m, uint64_t key);
/* Release the map's storage. */
void u64map_destroy(u64map* m);

#endif
