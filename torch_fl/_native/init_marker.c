/* init_marker.c -- name the plugin that kills the process while it loads.
 *
 * A plugin's library constructor (at dlopen), its init() and device_count() run inside
 * load() in loader.c. If one of them crashes, the process dies before Python can say which
 * plugin it was. So, while a plugin loads:
 *   - a marker file (path from rt_set_init_marker, normally per process under the XDG cache)
 *     holds the plugin's directory; it is removed when the plugin is done. A marker left by a
 *     dead process names the culprit to the next run and to `ralctl doctor`;
 *   - fatal signals print one line naming the plugin on stderr, then go on to whatever
 *     handler was installed before (PyTorch's, faulthandler's or the default), so the process
 *     still dies with the same signal.
 * TORCH_FL_PLUGIN_SKIP (colon-separated plugin directories) makes discovery pass over those
 * directories: a user's way around a broken plugin, and how ralctl's probe goes on past a
 * plugin that crashed its child. Costs two file operations per plugin load, nothing after. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_internal.h"

static char g_marker_path[RT_PATH_MAX];
static char g_message[RT_PATH_MAX + 256];
static size_t g_message_len;
static const int k_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
#define N_SIGNALS (sizeof k_signals / sizeof k_signals[0])
static struct sigaction g_previous[N_SIGNALS];
static int g_armed;

int rt_set_init_marker(const char* path) {
  rt_copy_str(g_marker_path, sizeof g_marker_path, path ? path : "");
  return RAL_OK;
}

static const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    default: return "a fatal signal";
  }
}

static void on_fatal_signal(int sig) {
  /* Async-signal-safe only: write(2), sigaction, raise. */
  const char* name = signal_name(sig);
  ssize_t ignored = write(2, "torch_fl: ", 10);
  ignored = write(2, name, strlen(name));
  ignored = write(2, g_message, g_message_len);
  (void)ignored;
  for (size_t i = 0; i < N_SIGNALS; i++)
    if (k_signals[i] == sig) sigaction(sig, &g_previous[i], NULL);
  raise(sig); /* SA_NODEFER: delivered now, to the handler that was there before */
}

void rt_marker_enter(const char* plugin_dir) {
  if (g_marker_path[0]) {
    int fd = open(g_marker_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ssize_t ignored = write(fd, plugin_dir, strlen(plugin_dir));
      (void)ignored;
      close(fd);
    }
  }
  int n = snprintf(g_message, sizeof g_message,
                   " in the ral plugin at %s while it loaded (library constructor, init() or "
                   "device_count()); skip it with TORCH_FL_PLUGIN_SKIP=%s; `ralctl doctor` "
                   "probes plugins safely\n",
                   plugin_dir, plugin_dir);
  g_message_len = n < 0 ? 0 : ((size_t)n < sizeof g_message ? (size_t)n : sizeof g_message - 1);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fatal_signal;
  sa.sa_flags = SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < N_SIGNALS; i++) sigaction(k_signals[i], &sa, &g_previous[i]);
  g_armed = 1;
}

void rt_marker_leave(void) {
  if (g_armed)
    for (size_t i = 0; i < N_SIGNALS; i++) sigaction(k_signals[i], &g_previous[i], NULL);
  g_armed = 0;
  if (g_marker_path[0]) unlink(g_marker_path);
}

int rt_plugin_skipped(const char* plugin_dir) {
  const char* list = getenv("TORCH_FL_PLUGIN_SKIP");
  size_t len = strlen(plugin_dir);
  while (list && *list) {
    const char* end = strchr(list, ':');
    size_t n = end ? (size_t)(end - list) : strlen(list);
    while (n > 1 && list[n - 1] == '/') n--; /* "dir/" names "dir" too */
    if (n == len && strncmp(list, plugin_dir, n) == 0) return 1;
    list = end ? end + 1 : NULL;
  }
  return 0;
}
