/* test_dirs.h — fresh temporary directories for the API tests (a cache directory per test).
 *
 * test_fresh_dir makes $TMPDIR/kiln-TAG-XXXXXX (mode 0700: the cache refuses directories
 * others may write); test_rm_dir removes it with everything below it, read-only parts included
 * (chmod first), and frees the path.  Include after <cmocka.h>.
 */
#ifndef KILN_TEST_DIRS_H
#define KILN_TEST_DIRS_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static inline char *test_fresh_dir(const char *tag) {
  const char *base = getenv("TMPDIR");
  char *p = malloc(4096);
  assert_non_null(p);
  snprintf(p, 4096, "%s/kiln-%s-XXXXXX", base && *base ? base : "/tmp", tag);
  assert_non_null(mkdtemp(p));
  return p;
}

static inline int test_rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  chmod(p, 0700);
  return remove(p);
}

static inline void test_rm_dir(char *p) {
  chmod(p, 0700);
  nftw(p, test_rm_one, 16, FTW_DEPTH | FTW_PHYS);
  free(p);
}

#endif
