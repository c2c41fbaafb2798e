/* lld_link.cpp — link an AMDGPU relocatable object into a code object with lld, in this process.
 *
 * The only C++ in kiln's AMDGPU backend: lld has no C API.  This is the same `-shared` link that
 * clang and Triton perform for amdgcn-amd-amdhsa, done with lld 22 as a library (Debian's
 * liblld-22-dev ships liblldELF.a and liblldCommon.a, which use libLLVM-22.so), so the `ld.lld`
 * on PATH (lld 14 on Debian 12, which rejects these objects) is never looked up: no PATH, no
 * subprocess, no environment.
 *
 * Assumptions about lld's library interface (lld/Common/Driver.h, LLVM 22):
 *  - lld::lldMain picks the driver from argv[0] ("ld.lld" = the GNU/ELF flavour) among the
 *    drivers named with LLD_HAS_DRIVER, writes its messages to the two streams it is given, runs
 *    the link inside a CrashRecoveryContext, and itself destroys lld's global context
 *    (CommonLinkerContext::destroy) afterwards; its Result says whether lld may run again.
 *  - lld keeps process-global state (the context, the error handler), so links are serialised
 *    by a mutex; after a link that reports canRunAgain == false every later call fails.
 *  - lld reads inputs and writes outputs only through file names, so the object goes through a
 *    private directory from mkdtemp (mode 0700), removed afterwards.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>
#include <string>

#include "lld/Common/Driver.h"
#include "llvm/Support/raw_ostream.h"

LLD_HAS_DRIVER(elf)

namespace {

std::mutex link_mutex;
bool lld_unusable = false;  // set when lld said it cannot safely run again

void set_err(char *err, size_t errn, const std::string &msg) {
  if (!err || errn == 0) return;
  snprintf(err, errn, "%s", msg.c_str());
}

bool write_file(const std::string &path, const void *data, size_t n) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const char *p = static_cast<const char *>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      close(fd);
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return close(fd) == 0;
}

bool read_file(const std::string &path, void **out, size_t *out_n) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    close(fd);
    return false;
  }
  size_t n = static_cast<size_t>(st.st_size);
  char *buf = static_cast<char *>(malloc(n));
  size_t got = 0;
  while (buf && got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  close(fd);
  if (!buf || got != n) {
    free(buf);
    return false;
  }
  *out = buf;
  *out_n = n;
  return true;
}

// empties and removes the private directory (lld may leave a temporary output file behind
// when it fails half-way, so every entry goes, not just the two names used here)
void remove_dir(const std::string &dir) {
  if (DIR *dp = opendir(dir.c_str())) {
    while (struct dirent *e = readdir(dp))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
        unlink((dir + "/" + e->d_name).c_str());
    closedir(dp);
  }
  rmdir(dir.c_str());
}

}  // namespace

extern "C" int kn_amdgpu_link(const void *obj, size_t n, void **out, size_t *out_n, char *err,
                              size_t errn) {
  if (err && errn) err[0] = 0;
  if (!obj || n == 0 || !out || !out_n) {
    set_err(err, errn, "no object to link");
    return -1;
  }
  *out = nullptr;
  *out_n = 0;

  std::lock_guard<std::mutex> lock(link_mutex);
  if (lld_unusable) {
    set_err(err, errn, "lld crashed in an earlier link in this process and cannot run again");
    return -1;
  }

  // P_tmpdir rather than $TMPDIR: the library reads no environment
  char tmpl[] = P_tmpdir "/kiln-lld-XXXXXX";
  if (!mkdtemp(tmpl)) {
    set_err(err, errn, std::string("cannot create a temporary directory: ") + strerror(errno));
    return -1;
  }
  std::string dir(tmpl), in = dir + "/in.o", outp = dir + "/out.so";
  if (!write_file(in, obj, n)) {
    set_err(err, errn, "cannot write the object to " + in + ": " + strerror(errno));
    remove_dir(dir);
    return -1;
  }

  // the link clang's AMDGPU toolchain performs, minus its LTO plugin options (kiln links objects)
  const char *args[] = {"ld.lld", "--threads=1", "-shared", "--no-undefined",
                        "-o",     outp.c_str(),  in.c_str()};
  std::string msgs;
  llvm::raw_string_ostream os(msgs);
  lld::Result r = lld::lldMain(args, os, os, {{lld::Gnu, &lld::elf::link}});
  os.flush();
  if (!r.canRunAgain) lld_unusable = true;

  int rc = -1;
  if (r.retCode != 0) {
    while (!msgs.empty() && (msgs.back() == '\n' || msgs.back() == ' ')) msgs.pop_back();
    set_err(err, errn, msgs.empty() ? "lld failed without a message" : msgs);
  } else if (!read_file(outp, out, out_n)) {
    set_err(err, errn, "lld reported success but " + outp + " cannot be read");
  } else {
    rc = 0;
  }
  remove_dir(dir);
  return rc;
}
