/*
 * ral_trust.h -- ownership and mode checks for native code and caches loaded from disk,
 * as OpenSSH's StrictModes and sudo check what they trust. Header-only, no ABI of its
 * own: the runtime's loader checks plugin folders, manifests and libraries with it, and
 * the host and OpenCL plugins check their on-disk kernel caches with it. One source of
 * truth: every check of that kind goes through ral_trust_path.
 *
 * A path is trusted when it, and every folder above it up to "/", is
 *   - owned by root or by the allowed owner (the effective user), and
 *   - writable by nobody else: not world-writable, and not group-writable unless the
 *     group is the owner's private group (named like the owner, the owner's primary
 *     group, no other members: Debian's user-private-group rule that its OpenSSH uses,
 *     so a umask-002 install in a home folder passes).
 * A world-writable folder with the sticky bit (/tmp) is accepted as an ancestor only:
 * others may create entries in it but cannot rename or remove ours.
 * The path itself may be required to belong to the effective user exactly (caches:
 * a cache file root wrote is not ours either).
 * Symbolic links are resolved (realpath) before the walk; the check and the later
 * open are separate steps, as in ssh (a race needs write access that the walk refuses).
 */
#ifndef RAL_TRUST_H
#define RAL_TRUST_H

#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/*! \brief 1 when the group of `st` is its owner's private group. */
static inline int ral_trust_private_group(const struct stat* st) {
  struct passwd pw, *pwr = NULL;
  struct group gr, *grr = NULL;
  char pbuf[4096], gbuf[8192];
  if (getpwuid_r(st->st_uid, &pw, pbuf, sizeof pbuf, &pwr) != 0 || !pwr) return 0;
  if (pw.pw_gid != st->st_gid) return 0;
  if (getgrgid_r(st->st_gid, &gr, gbuf, sizeof gbuf, &grr) != 0 || !grr) return 0;
  if (strcmp(gr.gr_name, pw.pw_name) != 0) return 0;
  for (char** m = gr.gr_mem; m && *m; m++)
    if (strcmp(*m, pw.pw_name) != 0) return 0;
  return 1;
}

/* Format a refusal reason (truncated to cap, which is fine for a message); returns -1. */
static inline int ral_trust_say(char* why, size_t cap, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int ral_trust_say(char* why, size_t cap, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, cap, fmt, ap);
  va_end(ap);
  return -1;
}

/* One component: 0 if trusted, else -1 with the reason in why. */
static inline int ral_trust_one(const char* path, int leaf, int exact_owner, char* why,
                                size_t cap) {
  struct stat st;
  uid_t me = geteuid();
  if (stat(path, &st) != 0) return ral_trust_say(why, cap, "cannot stat %s", path);
  if (leaf && exact_owner ? st.st_uid != me : st.st_uid != 0 && st.st_uid != me)
    return ral_trust_say(why, cap, "owned by another user (uid %u, not %u) %s",
                         (unsigned)st.st_uid, (unsigned)me, path);
  int sticky_dir = !leaf && S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
  if ((st.st_mode & S_IWOTH) && !sticky_dir)
    return ral_trust_say(why, cap, "world-writable %s", path);
  if ((st.st_mode & S_IWGRP) && !sticky_dir && !ral_trust_private_group(&st))
    return ral_trust_say(why, cap, "group-writable %s", path);
  return 0;
}

/*!
 * \brief 0 when `path` and every folder above it pass the checks above; otherwise -1
 * with a reason such as "world-writable /opt/x/libx.so" in why (cap bytes).
 * \param exact_owner 1: the path itself must belong to the effective user (caches);
 * 0: root or the effective user (plugins). Ancestors may always belong to root.
 */
static inline int ral_trust_path(const char* path, int exact_owner, char* why, size_t cap) {
  char real[PATH_MAX];
  if (!realpath(path, real)) return ral_trust_say(why, cap, "cannot resolve %s", path);
  if (ral_trust_one(real, 1, exact_owner, why, cap) != 0) return -1;
  for (char* slash = strrchr(real, '/'); slash; slash = strrchr(real, '/')) {
    if (slash == real) return ral_trust_one("/", 0, 0, why, cap);
    *slash = 0;
    if (ral_trust_one(real, 0, 0, why, cap) != 0) return -1;
  }
  return 0;
}

/*!
 * \brief A private temporary folder (mode 0700, under $TMPDIR or /tmp) made once per
 * process and shared by its callers; NULL if none can be made. For caches whose usual
 * folder failed ral_trust_path: they work there and cache nothing across processes.
 * Each library that includes this header gets its own folder.
 */
static inline const char* ral_trust_private_dir(void) {
  static char dir[PATH_MAX];
  static int made = -1; /* -1 not tried, 0 failed, 1 made */
  if (__atomic_load_n(&made, __ATOMIC_ACQUIRE) < 0) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    if (made < 0) {
      const char* t = getenv("TMPDIR");
      snprintf(dir, sizeof dir, "%s/torch_fl-private-XXXXXX", t && t[0] == '/' ? t : "/tmp");
      __atomic_store_n(&made, mkdtemp(dir) ? 1 : 0, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&lock);
  }
  return made == 1 ? dir : NULL;
}

/*! \brief Write "torch_fl: <what> ..." to stderr once per `flag` (a static int of the
 *  caller): the one warning an untrusted cache gets per process. */
static inline void ral_trust_warn_once(int* flag, const char* what, const char* why,
                                       const char* instead) {
  if (__atomic_exchange_n(flag, 1, __ATOMIC_ACQ_REL)) return;
  fprintf(stderr, "torch_fl: warning: %s is not used: %s; using %s instead\n", what, why,
          instead ? instead : "no cache");
}

#endif /* RAL_TRUST_H */
