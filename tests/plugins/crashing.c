/* crashing.c -- a working plugin that kills its process where CRASH_AT says (build.py):
 *   0 never (a witness: it only logs), 1 in its dlopen constructor, 2 in init(),
 *   3 in device_count(). Every time its code runs (constructor, init) it first appends
 *   "<event> <pid>\n" to $TORCH_FL_TEST_PLUGIN_LOG, when set, so tests can prove whether
 *   vendor code ran in a process at all. */
#include "common.h" /* first: it sets _POSIX_C_SOURCE */

#include <unistd.h>

#ifndef CRASH_AT
#define CRASH_AT 0
#endif

static void note(const char* event) {
  const char* path = getenv("TORCH_FL_TEST_PLUGIN_LOG");
  if (!path) return;
  FILE* f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s %d\n", event, (int)getpid());
  fclose(f);
}

static void crash(void) { *(volatile int*)0 = 1; } /* a real SIGSEGV, not raise() */

__attribute__((constructor)) static void on_dlopen(void) {
  note("constructor");
  if (CRASH_AT == 1) crash();
}

static ral_status crashing_init(void) {
  note("init");
  if (CRASH_AT == 2) crash();
  return tpl_init();
}

static ral_status crashing_device_count(int32_t* count) {
  if (CRASH_AT == 3) crash();
  return tpl_device_count(count);
}

static void customize(ral_plugin_api* api) {
  api->init = crashing_init;
  api->device_count = crashing_device_count;
}
