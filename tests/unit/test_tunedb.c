/* test_tunedb.c — the SQLite tuning database: round trips, the sequence-length bucket, 8
 * processes writing and reading at once, and files that are not ours (garbage, another
 * application's database, a truncated database, a newer schema) handled without a crash and
 * without destroying anything that might matter; symbolic links at its names and a directory
 * swapped after the check refused or never used.  Also the errors of the search spaces beside
 * it (space.h).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdbool.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "kiln.h"
#include "space.h"
#include "tunedb.h"

static char g_root[256]; /* short: every path below fits its buffer */
static char g_db[300];
static kn_diag diag; /* what the last database call reported (each test process has its own) */

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

static int setup(void **state) {
  (void)state;
  const char *tmp = getenv("TMPDIR");
  snprintf(g_root, sizeof g_root, "%s/kiln-tunedb-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  assert_non_null(mkdtemp(g_root));
  snprintf(g_db, sizeof g_db, "%s/tuning.sqlite3", g_root);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  nftw(g_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

static kn_tune_record rec(const char *tmpl, int head_dim, int64_t seqlen, const char *arch, int bm, double us) {
  kn_tune_record r;
  memset(&r, 0, sizeof r);
  snprintf(r.key.template_name, sizeof r.key.template_name, "%s", tmpl);
  snprintf(r.key.variant, sizeof r.key.variant, "causal");
  snprintf(r.key.dtype, sizeof r.key.dtype, "bf16");
  r.key.head_dim = head_dim;
  r.key.seq_bucket = kn_tune_seq_bucket(seqlen);
  snprintf(r.key.arch, sizeof r.key.arch, "%s", arch);
  snprintf(r.key.kiln_version, sizeof r.key.kiln_version, KILN_VERSION_STRING);
  r.config.block_m = bm;
  r.config.block_n = 64;
  r.config.warps = 4;
  r.config.stages = 2;
  r.config.waves_per_eu = 2;
  snprintf(r.config.matrix_instr, sizeof r.config.matrix_instr, "mfma_f32_32x32x8_bf16");
  r.time_us = us;
  return r;
}

static kn_tunedb *open_db(int want) {
  kn_tunedb *db = NULL;
  int s = kn_tunedb_open(g_db, &db, &diag);
  if (s != want) fail_msg("kn_tunedb_open: %s: %s", kn_status_str(s), diag.message);
  assert_non_null(db);
  return db;
}

static int count_aside(void) {
  int n = 0;
  DIR *d = opendir(g_root);
  struct dirent *de;
  while ((de = readdir(d)))
    if (strstr(de->d_name, "tuning.sqlite3.bad-") && !strstr(de->d_name, "-wal") && !strstr(de->d_name, "-shm")) n++;
  closedir(d);
  return n;
}

static void test_bucket(void **state) {
  (void)state;
  assert_int_equal(kn_tune_seq_bucket(-5), 1);
  assert_int_equal(kn_tune_seq_bucket(0), 1);
  assert_int_equal(kn_tune_seq_bucket(1), 1);
  assert_int_equal(kn_tune_seq_bucket(2), 2);
  assert_int_equal(kn_tune_seq_bucket(3), 4);
  assert_int_equal(kn_tune_seq_bucket(1000), 1024);
  assert_int_equal(kn_tune_seq_bucket(1024), 1024);
  assert_int_equal(kn_tune_seq_bucket(1025), 2048);
  assert_int_equal(kn_tune_seq_bucket((int64_t)1 << 40), 1 << 30);
}

static void test_round_trip(void **state) {
  (void)state;
  kn_tunedb *db = open_db(KN_OK);
  kn_tune_record r = rec("fwd", 128, 4000, "gfx942", 128, 51.5), got;
  assert_int_equal(kn_tunedb_get(db, &r.key, &got, &diag), KN_MISS);
  assert_int_equal(kn_tunedb_put(db, &r, 0, &diag), KN_OK);
  assert_int_equal(kn_tunedb_get(db, &r.key, &got, &diag), KN_OK);
  assert_string_equal(got.key.template_name, "fwd");
  assert_int_equal(got.key.seq_bucket, 4096);
  assert_int_equal(got.config.block_m, 128);
  assert_string_equal(got.config.matrix_instr, "mfma_f32_32x32x8_bf16");
  assert_true(got.time_us == 51.5);
  assert_true(got.tuned_at > 1600000000); /* filled with the current time */
  /* the same bucket: another length that rounds to 4096 finds it */
  kn_tune_key k2 = r.key;
  k2.seq_bucket = kn_tune_seq_bucket(3000);
  assert_int_equal(kn_tunedb_get(db, &k2, &got, &diag), KN_OK);
  /* another version does not */
  snprintf(k2.kiln_version, sizeof k2.kiln_version, "0.0.9");
  assert_int_equal(kn_tunedb_get(db, &k2, &got, &diag), KN_MISS);

  /* only_if_faster keeps the faster record */
  kn_tune_record slower = rec("fwd", 128, 4000, "gfx942", 64, 80.0);
  assert_int_equal(kn_tunedb_put(db, &slower, 1, &diag), KN_NOT_REPLACED);
  assert_int_equal(kn_tunedb_get(db, &r.key, &got, &diag), KN_OK);
  assert_int_equal(got.config.block_m, 128);
  kn_tune_record faster = rec("fwd", 128, 4000, "gfx942", 256, 40.0);
  assert_int_equal(kn_tunedb_put(db, &faster, 1, &diag), KN_OK);
  assert_int_equal(kn_tunedb_get(db, &r.key, &got, &diag), KN_OK);
  assert_int_equal(got.config.block_m, 256);
  /* a plain put replaces (a deliberate retune) */
  assert_int_equal(kn_tunedb_put(db, &slower, 0, &diag), KN_OK);
  assert_int_equal(kn_tunedb_get(db, &r.key, &got, &diag), KN_OK);
  assert_int_equal(got.config.block_m, 64);

  kn_tune_record other = rec("decode", 64, 1, "sm_90a", 16, 9.0), old = other;
  snprintf(old.key.kiln_version, sizeof old.key.kiln_version, "0.0.9");
  assert_int_equal(kn_tunedb_put(db, &other, 0, &diag), KN_OK);
  assert_int_equal(kn_tunedb_put(db, &old, 0, &diag), KN_OK);
  kn_tune_record *all;
  size_t n;
  assert_int_equal(kn_tunedb_list(db, &all, &n, &diag), KN_OK);
  assert_int_equal(n, 3);
  assert_string_equal(all[0].key.template_name, "decode"); /* ordered by key */
  free(all);
  size_t removed;
  assert_int_equal(kn_tunedb_prune(db, KILN_VERSION_STRING, &removed, &diag), KN_OK);
  assert_int_equal(removed, 1);
  kn_tunedb_close(db);

  /* survives a restart; the file is in WAL mode */
  db = open_db(KN_OK);
  assert_int_equal(kn_tunedb_get(db, &other.key, &got, &diag), KN_OK);
  assert_int_equal(got.config.block_m, 16);
  kn_tunedb_close(db);
  sqlite3 *raw;
  assert_int_equal(sqlite3_open(g_db, &raw), SQLITE_OK);
  sqlite3_stmt *st;
  assert_int_equal(sqlite3_prepare_v2(raw, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
  sqlite3_finalize(st);
  sqlite3_close(raw);
}

static void test_invalid(void **state) {
  (void)state;
  kn_tunedb *db = open_db(KN_OK);
  kn_tune_record r = rec("", 128, 10, "gfx942", 64, 1.0);
  assert_int_equal(kn_tunedb_put(db, &r, 0, &diag), KN_E_INVALID);
  r = rec("fwd", 0, 10, "gfx942", 64, 1.0);
  assert_int_equal(kn_tunedb_put(db, &r, 0, &diag), KN_E_INVALID);
  assert_non_null(strstr(diag.message, "head_dim"));
  r = rec("fwd", 64, 10, "gfx942", 64, 1.0);
  memset(r.key.arch, 'x', sizeof r.key.arch); /* not NUL-terminated */
  assert_int_equal(kn_tunedb_put(db, &r, 0, &diag), KN_E_INVALID);
  kn_tunedb_close(db);
}

/* the default location is $KILN_CACHE_DIR/tuning.sqlite3, its directory created 0700 */
static void test_default_path(void **state) {
  (void)state;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/cache", g_root);
  setenv("KILN_CACHE_DIR", dir, 1);
  kn_tunedb *db;
  assert_int_equal(kn_tunedb_open(NULL, &db, &diag), KN_OK);
  char want[400];
  snprintf(want, sizeof want, "%s/tuning.sqlite3", dir);
  assert_string_equal(kn_tunedb_path(db), want);
  kn_tunedb_close(db);
  struct stat st;
  assert_int_equal(stat(dir, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  /* an insecure cache directory is refused here too */
  chmod(dir, 0777);
  assert_int_equal(kn_tunedb_open(NULL, &db, &diag), KN_E_IO);
  assert_null(db);
  assert_non_null(strstr(diag.message, "0777"));
  chmod(dir, 0700);
  unsetenv("KILN_CACHE_DIR");
}

/* 8 processes, each writing its own 40 keys (one transaction each) and reading them back,
 * all at once, each through its own connection */
static void test_concurrent(void **state) {
  (void)state;
  enum { PROCS = 8, KEYS = 40 };
  int go[2];
  assert_int_equal(pipe(go), 0);
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      close(go[1]);
      char b;
      if (read(go[0], &b, 1) != 0) _exit(10);
      kn_tunedb *db;
      int s = kn_tunedb_open(g_db, &db, &diag);
      if (s != KN_OK) {
        fprintf(stderr, "child %d: open: %s\n", i, diag.message);
        _exit(11);
      }
      for (int k = 0; k < KEYS; k++) {
        kn_tune_record r = rec("fwd", 64 * (i + 1), (int64_t)1 << k % 20, "gfx90a", 16 * (k + 1), i * 1000 + k);
        /* k >= 20 odd: only_if_faster against k-20's faster record, which stays */
        bool kept = k >= 20 && (k & 1);
        if (kn_tunedb_put(db, &r, k & 1, &diag) != (kept ? KN_NOT_REPLACED : KN_OK)) {
          fprintf(stderr, "child %d: put: %s\n", i, diag.message);
          _exit(12);
        }
        kn_tune_record got;
        if (kn_tunedb_get(db, &r.key, &got, &diag) != KN_OK ||
            got.config.block_m != 16 * ((kept ? k - 20 : k) + 1)) {
          fprintf(stderr, "child %d: get: %s\n", i, diag.message);
          _exit(13);
        }
      }
      kn_tunedb_close(db);
      _exit(0);
    }
  }
  close(go[0]);
  close(go[1]);
  for (int i = 0; i < PROCS; i++) {
    int st;
    assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("process %d failed (status 0x%x)", i, st);
  }
  kn_tunedb *db = open_db(KN_OK);
  kn_tune_record *all;
  size_t n;
  assert_int_equal(kn_tunedb_list(db, &all, &n, &diag), KN_OK);
  /* per process: keys k and k+20 share a bucket (1 << k % 20), the later put wins: 20 records */
  assert_int_equal(n, PROCS * 20);
  for (int i = 0; i < PROCS; i++) {
    for (int k = 20; k < KEYS; k++) {
      kn_tune_record r = rec("fwd", 64 * (i + 1), (int64_t)1 << k % 20, "gfx90a", 0, 0), got;
      assert_int_equal(kn_tunedb_get(db, &r.key, &got, &diag), KN_OK);
      /* k even: plain put of k replaced k-20; k odd: only_if_faster, and k is slower than
       * k-20 (time i*1000+k), so k-20's config stays */
      assert_int_equal(got.config.block_m, k & 1 ? 16 * (k - 20 + 1) : 16 * (k + 1));
    }
  }
  free(all);
  kn_tunedb_close(db);
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

static void test_garbage_file(void **state) {
  (void)state;
  char junk[8192];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)('a' + i % 26);
  write_file(g_db, junk, sizeof junk);
  kn_tunedb *db = open_db(KN_RECREATED);
  assert_non_null(strstr(diag.message, "moved aside"));
  assert_non_null(strstr(diag.message, "not a database"));
  assert_int_equal(count_aside(), 1);
  kn_tune_record r = rec("fwd", 128, 100, "host", 32, 5.0), got;
  assert_int_equal(kn_tunedb_put(db, &r, 0, &diag), KN_OK);
  assert_int_equal(kn_tunedb_get(db, &r.key, &got, &diag), KN_OK);
  kn_tunedb_close(db);
  db = open_db(KN_OK); /* the fresh one is fine next time */
  kn_tunedb_close(db);
}

static void raw_exec(const char *sql) {
  sqlite3 *raw;
  assert_int_equal(sqlite3_open(g_db, &raw), SQLITE_OK);
  char *err = NULL;
  if (sqlite3_exec(raw, sql, NULL, NULL, &err) != SQLITE_OK) fail_msg("%s: %s", sql, err);
  sqlite3_close(raw);
}

static void test_foreign_database(void **state) {
  (void)state;
  raw_exec("CREATE TABLE notes(x); INSERT INTO notes VALUES (1)");
  kn_tunedb *db = open_db(KN_RECREATED);
  assert_non_null(strstr(diag.message, "not kiln's"));
  kn_tunedb_close(db);
  assert_int_equal(count_aside(), 1);
  unlink(g_db);
  raw_exec("PRAGMA application_id = 1234; CREATE TABLE t(x)");
  db = open_db(KN_RECREATED);
  assert_non_null(strstr(diag.message, "another application"));
  kn_tunedb_close(db);
}

static void test_newer_schema(void **state) {
  (void)state;
  raw_exec("PRAGMA application_id = 1263094862; PRAGMA user_version = 99; CREATE TABLE tuning2(x)");
  struct stat before, after;
  assert_int_equal(stat(g_db, &before), 0);
  kn_tunedb *db = (kn_tunedb *)1;
  assert_int_equal(kn_tunedb_open(g_db, &db, &diag), KN_E_UNSUPPORTED);
  assert_null(db);
  assert_non_null(strstr(diag.message, "99"));
  assert_non_null(strstr(diag.message, "left untouched"));
  assert_int_equal(stat(g_db, &after), 0);
  assert_int_equal(before.st_size, after.st_size);
  assert_int_equal(before.st_ino, after.st_ino);
  assert_int_equal(count_aside(), 0);
}

static void test_truncated_database(void **state) {
  (void)state;
  kn_tunedb *db = open_db(KN_OK);
  for (int i = 0; i < 2000; i++) {
    char v[32];
    kn_tune_record r = rec("fwd", 64 + i, 1000, "gfx942", 64, i);
    snprintf(v, sizeof v, "variant-with-a-long-name-%d", i);
    snprintf(r.key.variant, sizeof r.key.variant, "%s", v);
    assert_int_equal(kn_tunedb_put(db, &r, 0, &diag), KN_OK);
  }
  kn_tunedb_close(db); /* checkpoints the WAL into the file */
  struct stat st;
  assert_int_equal(stat(g_db, &st), 0);
  assert_true(st.st_size > 3 * 4096);
  assert_int_equal(truncate(g_db, st.st_size / 2), 0);
  db = open_db(KN_RECREATED);
  kn_tunedb_close(db);
  assert_int_equal(count_aside(), 1);
}

/* a space spec that cannot be applied, and a template without a space, are errors naming why */
static void test_space_errors(void **state) {
  (void)state;
  kn_space s;
  assert_int_equal(kn_space_default(&s, "bwd", NULL, &diag), KN_E_UNSUPPORTED);
  assert_non_null(strstr(diag.message, "bwd"));
  assert_int_equal(kn_space_default(&s, "fwd", NULL, &diag), KN_OK);
  assert_int_equal(kn_space_apply(&s, "block_m=16;bogus=1", &diag), KN_E_INVALID);
  assert_non_null(strstr(diag.message, "unknown knob 'bogus'"));
  assert_int_equal(kn_space_apply(&s, "max_tile_bytes=lots", &diag), KN_E_INVALID);
  assert_non_null(strstr(diag.message, "max_tile_bytes=lots is not a number"));
  assert_int_equal(kn_space_apply(&s, "block_m=16,32;block_n=16", &diag), KN_OK);
  assert_int_equal(kn_space_size(&s), 2);
  /* issue 16, case 10: empty items and values are errors (they were passed over, so
   * "block_m=16,,32" was {16, 32} and ";;;" the template's whole space) */
  static const char *const bad[] = {"block_m=16,,32", ";;;", "", "block_m=16;;block_n=32",
                                    "block_m=,16", "block_m=16,", " ; "};
  static const char *const says[] = {"empty value for block_m", "empty item", "names no knob",
                                     "empty item", "empty value", "empty value", "empty item"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(kn_space_default(&s, "fwd", NULL, &diag), KN_OK);
    if (kn_space_apply(&s, bad[i], &diag) != KN_E_INVALID || !strstr(diag.message, says[i]))
      fail_msg("'%s': '%s'", bad[i], diag.message);
  }
  /* one ';' may end the spec; the values are those given */
  assert_int_equal(kn_space_default(&s, "fwd", NULL, &diag), KN_OK);
  assert_int_equal(kn_space_apply(&s, "block_m=16,32,64;block_n=16;", &diag), KN_OK);
  assert_int_equal(kn_space_size(&s), 3);
}

/* issue 16, case 8: the database and its lock are opened relative to the directory's
 * descriptor, without following symbolic links, and created 0600.  Before: a symlink at
 * tuning.sqlite3 or at its .lock had kiln write or create the link's target, and a directory
 * swapped in at the path after it was checked was used. */
static void test_links_and_swaps(void **state) {
  (void)state;
  char target[400], lock[320], moved[320], other[320];
  /* the database name is a symlink: refused, the target neither created nor written */
  snprintf(target, sizeof target, "%s/target", g_root);
  assert_int_equal(symlink(target, g_db), 0);
  kn_tunedb *db = NULL;
  assert_int_equal(kn_tunedb_open(g_db, &db, &diag), KN_E_INSECURE);
  assert_null(db);
  if (!strstr(diag.message, "symbolic link")) fail_msg("message '%s'", diag.message);
  struct stat st;
  assert_int_equal(lstat(target, &st), -1);
  int fd = open(target, O_WRONLY | O_CREAT, 0600); /* ... nor written when it exists */
  assert_true(fd >= 0 && write(fd, "precious", 8) == 8);
  close(fd);
  assert_int_equal(kn_tunedb_open(g_db, &db, &diag), KN_E_INSECURE);
  assert_int_equal(stat(target, &st), 0);
  assert_int_equal(st.st_size, 8);
  unlink(g_db);

  /* a bad database whose .lock is a symlink: refused, the lock's target not created */
  fd = open(g_db, O_WRONLY | O_CREAT, 0600);
  assert_true(fd >= 0 && write(fd, "this is not a database, it is garbage text", 42) == 42);
  close(fd);
  snprintf(lock, sizeof lock, "%s.lock", g_db);
  unlink(target);
  assert_int_equal(symlink(target, lock), 0);
  assert_int_equal(kn_tunedb_open(g_db, &db, &diag), KN_E_INSECURE);
  if (!strstr(diag.message, ".lock is a symbolic link")) fail_msg("message '%s'", diag.message);
  assert_int_equal(lstat(target, &st), -1);
  unlink(lock);
  unlink(g_db);

  /* a database writable by others, or a -wal that is a symlink: refused */
  fd = open(g_db, O_WRONLY | O_CREAT, 0600);
  close(fd);
  assert_int_equal(chmod(g_db, 0666), 0);
  assert_int_equal(kn_tunedb_open(g_db, &db, &diag), KN_E_INSECURE);
  if (!strstr(diag.message, "writable by nobody else")) fail_msg("message '%s'", diag.message);
  unlink(g_db);
  char wal[320];
  snprintf(wal, sizeof wal, "%s-wal", g_db);
  assert_int_equal(symlink(target, wal), 0);
  assert_int_equal(kn_tunedb_open(g_db, &db, &diag), KN_E_INSECURE);
  assert_int_equal(lstat(target, &st), -1);
  unlink(wal);
  unlink(g_db);

  /* created 0600 whatever the umask */
  mode_t old = umask(0);
  db = open_db(KN_OK);
  umask(old);
  assert_int_equal(stat(g_db, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  kn_tune_record mine = rec("fwd", 64, 512, "gfx942", 64, 10.0);
  assert_int_equal(kn_tunedb_put(db, &mine, 0, &diag), KN_OK);
  kn_tunedb_close(db);

  /* the directory swapped after its descriptor was taken: the records are the checked
   * directory's, and the swapped-in one is never touched */
  int dirfd = open(g_root, O_RDONLY | O_DIRECTORY);
  assert_true(dirfd >= 0);
  snprintf(moved, sizeof moved, "%s.moved", g_root);
  snprintf(other, sizeof other, "%s/tuning.sqlite3", g_root);
  assert_int_equal(rename(g_root, moved), 0);
  assert_int_equal(mkdir(g_root, 0777), 0);
  assert_int_equal(chmod(g_root, 0777), 0);
  kn_tunedb *theirs = NULL;
  assert_int_equal(kn_tunedb_open(other, &theirs, &diag), KN_OK);
  kn_tune_record planted = rec("fwd", 64, 512, "gfx942", 16, 1.0);
  assert_int_equal(kn_tunedb_put(theirs, &planted, 0, &diag), KN_OK);
  kn_tunedb_close(theirs);
  assert_int_equal(kn_tunedb_open_at(dirfd, "tuning.sqlite3", g_db, &db, &diag), KN_OK);
  kn_tune_record got;
  assert_int_equal(kn_tunedb_get(db, &mine.key, &got, &diag), KN_OK);
  assert_int_equal(got.config.block_m, 64); /* ours, not the planted 16 */
  kn_tune_record more = rec("fwd", 128, 512, "gfx942", 32, 5.0);
  assert_int_equal(kn_tunedb_put(db, &more, 0, &diag), KN_OK);
  kn_tunedb_close(db);
  close(dirfd);
  assert_int_equal(kn_tunedb_open(other, &theirs, &diag), KN_OK);
  assert_int_equal(kn_tunedb_get(theirs, &more.key, &got, &diag), KN_MISS);
  kn_tunedb_close(theirs);
  nftw(g_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  assert_int_equal(rename(moved, g_root), 0);
}

/* issue 16, case 9: a stored record is read as it is, never truncated to int (block_m 2^32 + 16
 * was used as 16), and one out of range, of another type or with a negative time is
 * KN_E_CORRUPT on get and left out of the list; put refuses such values */
static void test_invalid_records(void **state) {
  (void)state;
  kn_tunedb *db = open_db(KN_OK);
  kn_tune_record a = rec("fwd", 64, 512, "gfx942", 64, 10.0), b = rec("fwd", 128, 512, "gfx942", 32, 7.5);
  assert_int_equal(kn_tunedb_put(db, &a, 0, &diag), KN_OK);
  assert_int_equal(kn_tunedb_put(db, &b, 0, &diag), KN_OK);
  kn_tune_record bad = a;
  bad.time_us = -5;
  assert_int_equal(kn_tunedb_put(db, &bad, 0, &diag), KN_E_INVALID);
  bad = a;
  bad.config.block_m = 0;
  assert_int_equal(kn_tunedb_put(db, &bad, 0, &diag), KN_E_INVALID);
  bad.config.block_m = (1 << 20) + 1;
  assert_int_equal(kn_tunedb_put(db, &bad, 0, &diag), KN_E_INVALID);
  kn_tunedb_close(db);
  static const char *const damage[] = {
      "UPDATE tuning SET block_m = 4294967312 WHERE head_dim = 64",
      "UPDATE tuning SET time_us = -3.5 WHERE head_dim = 64",
      "UPDATE tuning SET warps = '4abc' WHERE head_dim = 64",
      "UPDATE tuning SET stages = 2.5 WHERE head_dim = 64",
      "UPDATE tuning SET block_n = -64 WHERE head_dim = 64",
  };
  static const char *const says[] = {"block_m 4294967312", "time_us -3.5", "warps 4abc",
                                     "stages 2.5", "block_n -64"};
  for (size_t i = 0; i < sizeof damage / sizeof damage[0]; i++) {
    db = open_db(KN_OK);
    assert_int_equal(kn_tunedb_put(db, &a, 0, &diag), KN_OK); /* whole again */
    kn_tunedb_close(db);
    sqlite3 *raw;
    assert_int_equal(sqlite3_open(g_db, &raw), SQLITE_OK);
    assert_int_equal(sqlite3_exec(raw, damage[i], NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(raw);
    db = open_db(KN_OK);
    kn_tune_record got;
    assert_int_equal(kn_tunedb_get(db, &a.key, &got, &diag), KN_E_CORRUPT);
    if (!strstr(diag.message, says[i])) fail_msg("case %zu: message '%s'", i, diag.message);
    assert_int_equal(kn_tunedb_get(db, &b.key, &got, &diag), KN_OK); /* the other is fine */
    assert_int_equal(got.config.block_m, 32);
    kn_tune_record *list;
    size_t n;
    assert_int_equal(kn_tunedb_list(db, &list, &n, &diag), KN_OK);
    assert_int_equal(n, 1);
    assert_int_equal(list[0].key.head_dim, 128);
    free(list);
    kn_tunedb_close(db);
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* issue 16, case 9: a lock held against everything (a process frozen in an exclusive
 * transaction) cost every opener the whole busy timeout (~10 s, each new context); now a moment,
 * and the error says the database is locked.  A writer still waits for another writer that
 * finishes within the busy timeout. */
static void test_held_lock(void **state) {
  (void)state;
  kn_tunedb *db = open_db(KN_OK);
  kn_tune_record a = rec("fwd", 64, 512, "gfx942", 64, 10.0);
  assert_int_equal(kn_tunedb_put(db, &a, 0, &diag), KN_OK);
  kn_tunedb_close(db);
  sqlite3 *raw;
  assert_int_equal(sqlite3_open(g_db, &raw), SQLITE_OK);
  assert_int_equal(sqlite3_exec(raw, "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; "
                                "UPDATE tuning SET time_us = time_us", NULL, NULL, NULL), SQLITE_OK);
  double t0 = now_s();
  kn_tunedb *locked = NULL;
  kn_status s = kn_tunedb_open(g_db, &locked, &diag);
  double took = now_s() - t0;
  printf("  open under a held exclusive lock: %s after %.2f s\n", kn_status_str(s), took);
  assert_int_equal(s, KN_E_IO);
  if (!strstr(diag.message, "locked")) fail_msg("message '%s'", diag.message);
  assert_true(took < 2.0);
  sqlite3_exec(raw, "COMMIT", NULL, NULL, NULL);
  sqlite3_close(raw);

  /* a writer that holds the write lock for a second: the put waits for it */
  int go[2];
  assert_int_equal(pipe(go), 0);
  pid_t pid = fork();
  if (pid == 0) {
    sqlite3 *w;
    if (sqlite3_open(g_db, &w) != SQLITE_OK || sqlite3_exec(w, "BEGIN IMMEDIATE", NULL, NULL, NULL))
      _exit(1);
    (void)!write(go[1], "x", 1);
    usleep(1000000);
    sqlite3_exec(w, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(w);
    _exit(0);
  }
  char c;
  assert_int_equal(read(go[0], &c, 1), 1);
  db = open_db(KN_OK);
  kn_tune_record b = rec("fwd", 128, 512, "gfx942", 32, 5.0);
  t0 = now_s();
  if (kn_tunedb_put(db, &b, 0, &diag) != KN_OK) fail_msg("put: %s", diag.message);
  took = now_s() - t0;
  assert_true(took > 0.5); /* it did wait */
  kn_tune_record got;
  assert_int_equal(kn_tunedb_get(db, &b.key, &got, &diag), KN_OK);
  assert_int_equal(got.config.block_m, 32);
  kn_tunedb_close(db);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(go[0]), close(go[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bucket),
      cmocka_unit_test(test_space_errors),
      cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_invalid, setup, teardown),
      cmocka_unit_test_setup_teardown(test_default_path, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
      cmocka_unit_test_setup_teardown(test_garbage_file, setup, teardown),
      cmocka_unit_test_setup_teardown(test_foreign_database, setup, teardown),
      cmocka_unit_test_setup_teardown(test_newer_schema, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated_database, setup, teardown),
      cmocka_unit_test_setup_teardown(test_links_and_swaps, setup, teardown),
      cmocka_unit_test_setup_teardown(test_invalid_records, setup, teardown),
      cmocka_unit_test_setup_teardown(test_held_lock, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
