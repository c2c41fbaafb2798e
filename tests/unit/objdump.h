/* objdump.h — counting instructions in a code object's disassembly by LLVM 22's llvm-objdump
 * (the tests that look at AMDGPU code objects).  Header-only; each test file that includes it
 * has its own copy. */
#ifndef KILN_TEST_OBJDUMP_H
#define KILN_TEST_OBJDUMP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEST_OBJDUMP "/usr/lib/llvm-22/bin/llvm-objdump"

/* how many lines of `llvm-objdump -d --mcpu=cpu` of the n bytes at data contain word
 * (llvm-objdump must exit with status 0), or -1 where llvm-objdump is not installed */
static inline int test_objdump_count(const char *cpu, const void *data, size_t n,
                                     const char *word) {
  if (access(TEST_OBJDUMP, X_OK) != 0) return -1;
  char path[] = "/tmp/kiln-test-objdump-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, n), (ssize_t)n);
  close(fd);
  char cmd[512];
  snprintf(cmd, sizeof cmd, TEST_OBJDUMP " -d --mcpu=%s %s 2>&1", cpu, path);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  int count = 0;
  char line[1024];
  while (fgets(line, sizeof line, p)) count += strstr(line, word) != NULL;
  int st = pclose(p);
  unlink(path);
  assert_int_equal(st, 0);
  return count;
}

#endif
