/* u64map.c -- linear probing with backward-shift deletion (no tombstones, so lookups
 * stay short however many allocations come and go). */
#include "u64map.h"

#include <stdlib.h>

static uint32_t slot_of(uint64_t key, uint32_t cap) {
  /* Device pointers are 64-byte aligned: drop low bits, then mix (Fibonacci hashing). */
  return (uint32_t)(((key >> 6) * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

void* u64map_get(const u64map* m, uint64_t key) {
  if (m->cap == 0) return NULL;
  for (uint32_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == key) return m->vals[i];
    if (m->keys[i] == 0) return NULL;
  }
}

static int grow(u64map* m) {
  uint32_t cap = m->cap ? m->cap * 2 : 64;
  uint64_t* keys = calloc(cap, sizeof *keys);
  void** vals = calloc(cap, sizeof *vals);
  if (!keys || !vals) {
    free(keys);
    free(vals);
    return -1;
  }
  for (uint32_t j = 0; j < m->cap; j++) {
    if (!m->keys[j]) continue;
    uint32_t i = slot_of(m->keys[j], cap);
    while (keys[i]) i = (i + 1) & (cap - 1);
    keys[i] = m->keys[j];
    vals[i] = m->vals[j];
  }
  free(m->keys);
  free(m->vals);
  m->keys = keys;
  m->vals = vals;
  m->cap = cap;
  return 0;
}

int u64map_put(u64map* m, uint64_t key, void* val) {
  if ((m->count + 1) * 2 > m->cap && grow(m) != 0) return -1;
  uint32_t i = slot_of(key, m->cap);
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
  if (!m->keys[i]) m->count++;
  m->keys[i] = key;
  m->vals[i] = val;
  return 0;
}

void* u64map_remove(u64map* m, uint64_t key) {
  /* 0 marks an empty slot: "removing" it would match a free slot and corrupt the table. */
  if (m->cap == 0 || key == 0) return NULL;
  uint32_t mask = m->cap - 1, i = slot_of(key, m->cap);
  while (m->keys[i] != key) {
    if (!m->keys[i]) return NULL;
    i = (i + 1) & mask;
  }
  void* val = m->vals[i];
  /* Shift later members of the probe run back so no lookup stops early. */
  for (uint32_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
    uint32_t home = slot_of(m->keys[j], m->cap);
    if (((j - home) & mask) >= ((j - i) & mask)) {
      m->keys[i] = m->keys[j];
      m->vals[i] = m->vals[j];
      i = j;
    }
  }
  m->keys[i] = 0;
  m->vals[i] = NULL;
  m->count--;
  return val;
}

void u64map_destroy(u64map* m) {
  free(m->keys);
  free(m->vals);
  m->keys = NULL;
  m->vals = NULL;
  m->cap = m->count = 0;
}
