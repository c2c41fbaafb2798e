// embed.cpp — kiln from C++: a small RAII wrapper over include/kiln.h and several threads
// serving requests on one context.
//
// The C API is all there is; C++ adds ownership and exceptions.  kiln::Context owns a
// kiln_context (destroyed with it, and with it every kernel it prepared), Context::prepare
// returns a Kernel — a non-owning handle, valid while its context lives, since a context hands
// out one kernel per descriptor — and every failed call throws kiln::Error with the status and
// kiln_last_error()'s message (thread-local, so each thread reads its own).  Every kiln call may
// come from any thread at once: here THREADS threads prepare the same descriptor (one compile;
// the others wait for it or find it in the context's memory) and launch it on their own buffers
// of their own shapes, each output checked against a float64 attention.  Buffers are host memory
// (the host device); on a GPU they would be device memory and forward's stream argument the
// thread's own stream.
//
// usage: embed_cpp [DEVICE [CACHE_DIR]]; prints one line per thread, then PASS (exit 0) or FAIL.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kiln.h"

namespace kiln {

struct Error : std::runtime_error {
  kiln_status status;
  Error(kiln_status s, const std::string &what)
      : std::runtime_error(what + ": " + kiln_status_str(s) + ": " + kiln_last_error()), status(s) {}
};

static void check(kiln_status s, const char *what) {
  if (s != KILN_OK) throw Error(s, what);
}

class Kernel {
 public:
  explicit Kernel(kiln_kernel *k) : k_(k) {}
  void forward(const kiln_attn_args &a, void *stream = nullptr) const {
    check(kiln_forward(k_, &a, stream), "kiln_forward");
  }
  kiln_kernel_info info() const {
    kiln_kernel_info i;
    check(kiln_kernel_get_info(k_, &i), "kiln_kernel_get_info");
    return i;
  }

 private:
  kiln_kernel *k_;  // owned by the context
};

class Context {
 public:
  explicit Context(const kiln_context_options &o = {}) {
    kiln_context *c = nullptr;
    check(kiln_context_create(&o, &c), "kiln_context_create");
    ctx_.reset(c);
  }
  Kernel prepare(const kiln_attn_desc &d, const kiln_prepare_options *o = nullptr) const {
    kiln_kernel *k = nullptr;
    check(kiln_prepare(ctx_.get(), &d, o, &k), "kiln_prepare");
    return Kernel(k);
  }
  kiln_stats stats() const {
    kiln_stats s;
    kiln_context_stats(ctx_.get(), &s);
    return s;
  }
  std::string target() const { return kiln_context_target(ctx_.get()); }

 private:
  struct Destroy {
    void operator()(kiln_context *c) const { kiln_context_destroy(c); }
  };
  std::unique_ptr<kiln_context, Destroy> ctx_;
};

}  // namespace kiln

namespace {

constexpr int D = 64, THREADS = 4;

// the largest |o - reference| of a causal (bottom-right) f32 attention, contiguous (B, H, N, D)
double max_error(int B, int H, int N, const std::vector<float> &q, const std::vector<float> &k,
                 const std::vector<float> &v, const std::vector<float> &o) {
  double worst = 0;
  std::vector<double> p(N);
  for (int bh = 0; bh < B * H; bh++)
    for (int i = 0; i < N; i++) {
      const float *qi = &q[((size_t)bh * N + i) * D];
      double m = -INFINITY, l = 0;
      for (int j = 0; j <= i; j++) {
        double s = 0;
        for (int d = 0; d < D; d++) s += (double)qi[d] * k[((size_t)bh * N + j) * D + d];
        p[j] = s / std::sqrt((double)D);
        m = std::max(m, p[j]);
      }
      for (int j = 0; j <= i; j++) l += p[j] = std::exp(p[j] - m);
      for (int d = 0; d < D; d++) {
        double want = 0;
        for (int j = 0; j <= i; j++) want += p[j] / l * v[((size_t)bh * N + j) * D + d];
        double e = std::fabs(o[((size_t)bh * N + i) * D + d] - want);
        if (!(e <= worst)) worst = e;  // NaN sticks
      }
    }
  return worst;
}

}  // namespace

int main(int argc, char **argv) {
  try {
    kiln_context_options co{};
    co.device = argc > 1 ? argv[1] : "host";
    co.cache_dir = argc > 2 ? argv[2] : nullptr;
    kiln::Context ctx(co);
    kiln_attn_desc desc{};
    desc.dtype = KILN_F32;
    desc.head_dim = D;
    desc.causal = KILN_CAUSAL_BOTTOM_RIGHT;

    std::atomic<int> bad{0};
    std::vector<std::string> lines(THREADS);
    std::vector<std::thread> pool;
    for (int t = 0; t < THREADS; t++)
      pool.emplace_back([&, t] {
        try {
          kiln::Kernel kernel = ctx.prepare(desc);  // one compile for all the threads
          const int B = 1 + t % 2, H = 2, N = 33 + 29 * t;
          size_t n = (size_t)B * H * N * D;
          std::vector<float> q(n), k(n), v(n), o(n);
          for (size_t i = 0; i < n; i++)
            q[i] = std::sin(0.37f * i + t), k[i] = std::cos(0.11f * i), v[i] = std::sin(0.05f * i);
          kiln_attn_args a{};
          a.q = q.data(), a.k = k.data(), a.v = v.data(), a.o = o.data();
          a.batch = B, a.heads = H, a.kv_heads = H, a.seqlen_q = N, a.seqlen_k = N;
          kernel.forward(a);
          double err = max_error(B, H, N, q, k, v, o);
          bool ok = err < 1e-4;
          if (!ok) bad++;
          char line[160];
          std::snprintf(line, sizeof line, "thread %d: B=%d H=%d N=%d max_abs_err=%.2g %s", t, B,
                        H, N, err, ok ? "ok" : "FAIL");
          lines[t] = line;
        } catch (const kiln::Error &e) {
          lines[t] = std::string("thread ") + std::to_string(t) + ": " + e.what();
          bad++;
        }
      });
    for (auto &th : pool) th.join();
    for (auto &l : lines) std::printf("%s\n", l.c_str());
    kiln_stats s = ctx.stats();
    std::printf("context on %s: %llu prepares, %llu compiles, %llu cache hits, %llu launches\n",
                ctx.target().c_str(), (unsigned long long)s.prepares,
                (unsigned long long)s.compiles, (unsigned long long)s.cache_hits,
                (unsigned long long)s.launches);
    std::printf("%s\n", bad ? "FAIL" : "PASS");
    return bad ? 1 : 0;
  } catch (const kiln::Error &e) {
    std::fprintf(stderr, "embed_cpp: %s\n", e.what());
    return 1;
  }
}
