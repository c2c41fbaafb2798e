"""kiln.py — Python binding of kiln's C API (include/kiln.h) through ctypes.

Standard library only: the module loads libkiln.so (the `kiln_shared` CMake target) and mirrors
the public structs field for field; nothing is compiled.  The library is found as $KILN_LIBRARY,
else libkiln.so beside this file, else the build trees of this repository (build*/api/), else the
dynamic loader's search path.

Two levels:

* Context / Kernel wrap kiln_context_create, kiln_prepare and kiln_forward on raw addresses (host
  pointers on the host device, device pointers on CUDA), with errors raised as KilnError
  (.status: a kiln_status value, .status_name, .message: kiln_last_error()).
* attention(q, k, v, causal=False, sm_scale=None, out=None, lse=None, window_size=None,
  softcap=None, alibi_slopes=None, bias=None, document_ids=None, prefix_len=None,
  score_mod=None, mask_mod=None, params=None) takes tensors in (B, H, N, D) layout (any
  batch/head/row strides, the head dimension contiguous) and computes softmax(mods(q k^T *
  scale)) v into `out`, with the attention variants of docs/variants.md: causal masks aligned
  bottom-right or top-left, a sliding window, logit soft-capping, ALiBi, an additive bias,
  document (packed sequence) masking, prefix-LM, and the caller's own score_mod / mask_mod
  written in kiln's IR text.  Tensors are duck-typed (.data_ptr(), .shape, .stride(), .dtype,
  .device, .is_cuda), so this module never imports torch itself; torch is imported lazily only to
  allocate `out` when none is given and to ask for the current CUDA stream.  CPU tensors run on
  the host device (synchronously); CUDA tensors run on their GPU, asynchronously on torch's
  current stream, like any torch op.
* attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...) is
  FlashAttention's flash_attn_varlen_func: packed (total_tokens, heads, D) sequences of their own
  lengths in one launch (docs/serving.md).
* attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=..., block_table=...,
  ...) is FlashAttention's flash_attn_with_kvcache: a paged KV cache (num_pages, page_size,
  HK, D) read through a block table, the new rows k / v appended first (docs/serving.md).
  All three pass each buffer's size from its storage, so a buffer too small for the shape and
  strides is an error before launch.
* Training (docs/backward.md): attention() and attention_varlen() are differentiable when torch
  is present -- called on tensors that require grad with grad mode on, each runs as a
  torch.autograd.Function whose backward is kiln's (kiln_backward: dQ, dK, dV from the
  forward's lse, deterministic).  attention_backward(q, k, v, out, lse, dout, ...) and
  attention_varlen_backward(q, k, v, out, lse, dout, cu_seqlens_q, cu_seqlens_k, ...) are those
  backwards on tensors (duck-typed as above), and Context.prepare_backward /
  BackwardKernel.backward their raw-address level.

Contexts are created once per device and kept for the life of the process (a context owns its
compiled kernels; kiln_prepare is a memo lookup after the first call, so calling attention() in
a loop compiles once).  The C library is thread-safe; so is this module.

The plan cache (docs/api.md "The plan cache"): attention(), attention_varlen() and
attention_with_kvcache() keep each call's checks, kernel and launch struct under a key of its
tensors' shapes, strides, dtypes and devices and its options, so a repeated call only fills in
its addresses and launches (set_plan_cache_size, plan_cache_info, plan_cache_clear).
"""

import collections
import ctypes
import ctypes.util
import glob
import math
import os
import random
import threading

__all__ = ["KilnError", "Context", "Kernel", "BackwardKernel", "attention", "attention_backward",
           "attention_varlen", "attention_varlen_backward", "attention_with_kvcache", "library",
           "set_plan_cache_size", "plan_cache_info", "plan_cache_clear", "F16", "BF16", "F32"]

# ---- the C API's constants (include/kiln.h) ----

OK, ERR_INVALID, ERR_UNSUPPORTED, ERR_NO_DEVICE, ERR_COMPILE, ERR_RUNTIME, ERR_IO, ERR_NOMEM, \
    ERR_INSECURE = range(9)
_STATUS_NAMES = ["KILN_OK", "KILN_ERR_INVALID", "KILN_ERR_UNSUPPORTED", "KILN_ERR_NO_DEVICE",
                 "KILN_ERR_COMPILE", "KILN_ERR_RUNTIME", "KILN_ERR_IO", "KILN_ERR_NOMEM",
                 "KILN_ERR_INSECURE"]
F16, BF16, F32 = 1, 2, 3
F8E4M3, F8E5M2, F8E4M3FNUZ, F8E5M2FNUZ = 4, 5, 6, 7  # fp8 inputs (q_dtype / kv_dtype)
TUNE_CONTEXT, TUNE_NONE, TUNE_CACHED, TUNE_AUTO = range(4)
CAUSAL_NONE, CAUSAL_BOTTOM_RIGHT, CAUSAL_TOP_LEFT = range(3)
LAYOUT_DENSE, LAYOUT_VARLEN, LAYOUT_PAGED = range(3)
MOD_ARG_INT, MOD_ARG_FLOAT, MOD_ARG_PTR = 1, 2, 3
_CAUSAL = {False: CAUSAL_NONE, True: CAUSAL_BOTTOM_RIGHT, None: CAUSAL_NONE,
           "bottom_right": CAUSAL_BOTTOM_RIGHT, "top_left": CAUSAL_TOP_LEFT,
           CAUSAL_NONE: CAUSAL_NONE, CAUSAL_BOTTOM_RIGHT: CAUSAL_BOTTOM_RIGHT,
           CAUSAL_TOP_LEFT: CAUSAL_TOP_LEFT}
_ITEMSIZE = {"float16": 2, "half": 2, "bfloat16": 2, "float32": 4, "float": 4, "float64": 8,
             "double": 8, "int32": 4, "int": 4, "int64": 8, "long": 8, "int16": 2, "int8": 1,
             "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
             "float8_e5m2fnuz": 1}
_DTYPES = {"float16": F16, "half": F16, "bfloat16": BF16, "float32": F32, "float": F32}
# torch's fp8 dtypes: inputs with descale factors, computed in float16 / bfloat16
# (docs/serving.md, "fp8 inputs and KV pages")
_FP8 = {"float8_e4m3fn": F8E4M3, "float8_e5m2": F8E5M2, "float8_e4m3fnuz": F8E4M3FNUZ,
        "float8_e5m2fnuz": F8E5M2FNUZ}


class KilnError(Exception):
    """A kiln call failed: .status (kiln_status), .status_name, .message."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = (_STATUS_NAMES[status] if 0 <= status < len(_STATUS_NAMES)
                            else "status %d" % status)
        self.message = message
        super().__init__("%s: %s" % (self.status_name, message))


# ---- structs, field for field ----

_LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)
_PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p)


class _ContextOptions(ctypes.Structure):
    _fields_ = [("cache_dir", ctypes.c_char_p), ("no_cache", ctypes.c_int),
                ("device", ctypes.c_char_p), ("log", _LOG_FN), ("log_user", ctypes.c_void_p),
                ("tune_policy", ctypes.c_int), ("progress", _PROGRESS_FN),
                ("progress_user", ctypes.c_void_p), ("bundle", ctypes.c_char_p),
                ("bundle_only", ctypes.c_int)]


class _AttnDesc(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("head_dim", ctypes.c_int), ("causal", ctypes.c_int),
                ("has_lse", ctypes.c_int), ("window", ctypes.c_int), ("softcap", ctypes.c_int),
                ("alibi", ctypes.c_int), ("bias", ctypes.c_int), ("document", ctypes.c_int),
                ("prefix", ctypes.c_int), ("mods", ctypes.c_char_p),
                ("mods_name", ctypes.c_char_p), ("layout", ctypes.c_int),
                ("q_dtype", ctypes.c_int), ("kv_dtype", ctypes.c_int),
                ("dropout_p", ctypes.c_float)]


class _ModArg(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int), ("i", ctypes.c_int64),
                ("f", ctypes.c_double), ("p", ctypes.c_void_p), ("bytes", ctypes.c_size_t)]


class _PrepareOptions(ctypes.Structure):
    _fields_ = [("tune_policy", ctypes.c_int), ("seqlen", ctypes.c_int),
                ("block_m", ctypes.c_int), ("block_n", ctypes.c_int), ("warps", ctypes.c_int),
                ("tune_space", ctypes.c_char_p), ("tune_batch", ctypes.c_int),
                ("tune_heads", ctypes.c_int), ("tune_warmup", ctypes.c_int),
                ("tune_repeats", ctypes.c_int), ("tune_window_left", ctypes.c_int),
                ("tune_window_right", ctypes.c_int), ("tune_mod_args", ctypes.POINTER(_ModArg)),
                ("tune_n_mod_args", ctypes.c_int), ("wgmma", ctypes.c_int),
                ("backward_dq", ctypes.c_int)]


class _KernelInfo(ctypes.Structure):
    _fields_ = [("desc", _AttnDesc), ("block_m", ctypes.c_int), ("block_n", ctypes.c_int),
                ("warps", ctypes.c_int), ("stages", ctypes.c_int), ("tuned", ctypes.c_int),
                ("source", ctypes.c_int), ("prepare_ms", ctypes.c_double),
                ("cache_key", ctypes.c_char * 33), ("target", ctypes.c_char * 16),
                ("wgmma", ctypes.c_int), ("atomic_dq", ctypes.c_int)]


_I64x3 = ctypes.c_int64 * 3


_NUMEL = ("q", "k", "v", "o", "lse", "alibi", "bias", "q_seg", "k_seg")
_PAGED_NUMEL = ("block_table", "k_new", "v_new")
_DESCALE_NUMEL = ("q_descale", "k_descale", "v_descale")


class _AttnArgs(ctypes.Structure):
    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p), ("batch", ctypes.c_int),
                ("heads", ctypes.c_int), ("kv_heads", ctypes.c_int), ("seqlen_q", ctypes.c_int),
                ("seqlen_k", ctypes.c_int), ("sm_scale", ctypes.c_float),
                ("q_stride", _I64x3), ("k_stride", _I64x3), ("v_stride", _I64x3),
                ("o_stride", _I64x3), ("lse_stride", ctypes.c_int64 * 2),
                ("window_left", ctypes.c_int), ("window_right", ctypes.c_int),
                ("softcap", ctypes.c_float), ("alibi_slopes", ctypes.c_void_p),
                ("alibi_stride", ctypes.c_int64), ("bias", ctypes.c_void_p),
                ("bias_stride", _I64x3), ("q_seg", ctypes.c_void_p), ("k_seg", ctypes.c_void_p),
                ("q_seg_stride", ctypes.c_int64), ("k_seg_stride", ctypes.c_int64),
                ("prefix_len", ctypes.c_int), ("mod_args", ctypes.POINTER(_ModArg)),
                ("n_mod_args", ctypes.c_int), ("cu_seqlens_q", ctypes.c_void_p),
                ("cu_seqlens_k", ctypes.c_void_p), ("total_q", ctypes.c_int),
                ("total_k", ctypes.c_int)] + [(n + "_numel", ctypes.c_int64) for n in _NUMEL] + \
               [("block_table", ctypes.c_void_p), ("cache_seqlens", ctypes.c_void_p),
                ("block_table_stride", ctypes.c_int64), ("page_size", ctypes.c_int),
                ("num_pages", ctypes.c_int), ("max_pages", ctypes.c_int),
                ("k_new", ctypes.c_void_p), ("v_new", ctypes.c_void_p),
                ("seqlen_new", ctypes.c_int), ("k_new_stride", _I64x3),
                ("v_new_stride", _I64x3)] + [(n + "_numel", ctypes.c_int64) for n in _PAGED_NUMEL] + \
               [("q_descale", ctypes.c_void_p), ("k_descale", ctypes.c_void_p),
                ("v_descale", ctypes.c_void_p), ("descale_stride", ctypes.c_int64)] + \
               [(n + "_numel", ctypes.c_int64) for n in _DESCALE_NUMEL] + \
               [("dropout_seed", ctypes.c_uint64), ("dropout_offset", ctypes.c_uint64)]


class _BwdArgs(ctypes.Structure):
    _fields_ = [("fwd", _AttnArgs), ("dout", ctypes.c_void_p), ("dq", ctypes.c_void_p),
                ("dk", ctypes.c_void_p), ("dv", ctypes.c_void_p), ("delta", ctypes.c_void_p),
                ("dout_stride", _I64x3), ("dq_stride", _I64x3), ("dk_stride", _I64x3),
                ("dv_stride", _I64x3)] + \
        [(n + "_numel", ctypes.c_int64) for n in ("dout", "dq", "dk", "dv", "delta")] + \
        [("dq_accum", ctypes.c_void_p), ("dq_accum_numel", ctypes.c_int64)]

# kiln_backward_dq: prepare_backward(dq=...)
_BWD_DQ = {"default": 0, "deterministic": 1, "atomic": 2}


_STATS = ["prepares", "memo_hits", "cache_hits", "compiles", "corrupt_entries", "not_stored",
          "tuning_hits", "tunings", "candidates", "launches", "bundle_loads"]


class _Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in _STATS]


# ---- the library ----

_lib = None
_lib_lock = threading.Lock()


def _candidates():
    env = os.environ.get("KILN_LIBRARY")
    if env:
        return [env]  # named explicitly: nothing else is tried
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(here, "libkiln.so")]
    paths += sorted(glob.glob(os.path.join(os.path.dirname(here), "build*", "api", "libkiln.so")))
    found = ctypes.util.find_library("kiln")
    paths += [found] if found else []
    return paths + ["libkiln.so.0", "libkiln.so"]


def library():
    """The loaded libkiln (ctypes.CDLL), loaded on first use."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        errors = []
        for path in _candidates():
            if os.sep in path and not os.path.exists(path):
                errors.append("%s: no such file" % path)
                continue
            try:
                lib = ctypes.CDLL(path)
                break
            except OSError as e:
                errors.append(str(e))
        else:
            raise KilnError(ERR_NO_DEVICE, "cannot load libkiln (set KILN_LIBRARY to the "
                            "kiln_shared build output): " + "; ".join(errors))
        c_int, c_void_p, c_char_p = ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p
        sig = {
            "kiln_status_str": ([c_int], c_char_p),
            "kiln_last_error": ([], c_char_p),
            "kiln_context_create": ([ctypes.POINTER(_ContextOptions), ctypes.POINTER(c_void_p)],
                                    c_int),
            "kiln_context_destroy": ([c_void_p], None),
            "kiln_context_target": ([c_void_p], c_char_p),
            "kiln_context_device_name": ([c_void_p], c_char_p),
            "kiln_context_cache_dir": ([c_void_p], c_char_p),
            "kiln_context_stats": ([c_void_p, ctypes.POINTER(_Stats)], None),
            "kiln_prepare": ([c_void_p, ctypes.POINTER(_AttnDesc), ctypes.POINTER(_PrepareOptions),
                              ctypes.POINTER(c_void_p)], c_int),
            "kiln_kernel_get_info": ([c_void_p, ctypes.POINTER(_KernelInfo)], c_int),
            "kiln_forward": ([c_void_p, ctypes.POINTER(_AttnArgs), c_void_p], c_int),
            "kiln_prepare_backward": ([c_void_p, ctypes.POINTER(_AttnDesc),
                                       ctypes.POINTER(_PrepareOptions), ctypes.POINTER(c_void_p)],
                                      c_int),
            "kiln_backward": ([c_void_p, ctypes.POINTER(_BwdArgs), c_void_p], c_int),
        }
        for name, (args, res) in sig.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
        _lib = lib
        return lib


def _check(status):
    if status != OK:
        raise KilnError(status, library().kiln_last_error().decode("utf-8", "replace"))


def _bytes(s):
    return None if s is None else s.encode() if isinstance(s, str) else s


def _causal(causal):
    try:
        return _CAUSAL[causal]
    except (KeyError, TypeError):
        raise KilnError(ERR_INVALID, "causal %r: False, True (\"bottom_right\") or \"top_left\""
                        % (causal,)) from None


def _address(x):
    """(address, bytes) of a buffer: a tensor (.data_ptr(), with .numel()/.element_size() or
    .shape/.stride()/.dtype), a numpy array (__array_interface__), a ctypes object, or an
    (address, bytes) pair."""
    if isinstance(x, tuple) and len(x) == 2:
        return int(x[0]), int(x[1])
    if hasattr(x, "data_ptr"):
        if hasattr(x, "element_size") and hasattr(x, "stride"):
            size = x.element_size()
        else:
            size = _ITEMSIZE.get(_dtype_name(x))
            if size is None:
                raise KilnError(ERR_INVALID, "a tensor of dtype %s: its element size is unknown"
                                % _dtype_name(x))
        shape, strides = tuple(int(n) for n in x.shape), tuple(int(n) for n in x.stride())
        if any(n == 0 for n in shape):
            return int(x.data_ptr()), 0
        extent = 1 + sum((n - 1) * st for n, st in zip(shape, strides))
        return int(x.data_ptr()), extent * size
    if hasattr(x, "__array_interface__"):
        return int(x.__array_interface__["data"][0]), int(x.nbytes)
    if isinstance(x, ctypes.Array) or isinstance(x, ctypes.Structure):
        return ctypes.addressof(x), ctypes.sizeof(x)
    raise KilnError(ERR_INVALID, "%r is not a tensor, an array or an (address, bytes) pair"
                    % (type(x).__name__,))


def _mod_args(params):
    """{name: int | float | tensor or array} -> a ctypes array of kiln_mod_arg (kept alive by the
    caller while the call runs) and its length"""
    if not params:
        return None, 0
    arr = (_ModArg * len(params))()
    for i, (name, value) in enumerate(params.items()):
        a = arr[i]
        a.name = _bytes(name)
        if isinstance(value, bool) or isinstance(value, int):
            a.kind, a.i = MOD_ARG_INT, int(value)
        elif isinstance(value, float):
            a.kind, a.f = MOD_ARG_FLOAT, value
        else:
            a.kind = MOD_ARG_PTR
            a.p, a.bytes = _address(value)
    return arr, len(params)


class Context:
    """A kiln context: device ("auto", "host", "cuda", "cuda:N", "sm_80", "sm_90a", "hip",
    "hip:N", "gfx90a", "gfx942", "gfx950"; tensors are routed to "host" or "cuda:N"), cache
    directory (None: $KILN_CACHE_DIR, ...), tuning policy, an optional log callable
    log(level, message) (called from any thread), and an AOT bundle (a `kiln aot` directory:
    its kernels are loaded, not compiled; bundle_only: never compile, docs/aot.md)."""

    def __init__(self, device=None, cache_dir=None, no_cache=False, tune_policy=TUNE_CONTEXT,
                 log=None, bundle=None, bundle_only=False):
        lib = library()
        self._log = None
        if log is not None:
            self._log = _LOG_FN(lambda user, level, msg: log(level, msg.decode("utf-8", "replace")))
        opts = _ContextOptions(cache_dir=_bytes(cache_dir), no_cache=1 if no_cache else 0,
                               device=_bytes(device), tune_policy=tune_policy,
                               bundle=_bytes(bundle), bundle_only=1 if bundle_only else 0)
        if self._log is not None:
            opts.log = self._log
        handle = ctypes.c_void_p()
        _check(lib.kiln_context_create(ctypes.byref(opts), ctypes.byref(handle)))
        self._h = handle

    def close(self):
        """Destroys the context and its kernels (no call may be in flight on it)."""
        if self._h:
            library().kiln_context_destroy(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _handle(self):
        if not self._h:
            raise KilnError(ERR_INVALID, "the context is closed")
        return self._h

    @property
    def target(self):
        return library().kiln_context_target(self._handle()).decode()

    @property
    def device_name(self):
        return library().kiln_context_device_name(self._handle()).decode()

    @property
    def cache_dir(self):
        return library().kiln_context_cache_dir(self._handle()).decode()

    def stats(self):
        s = _Stats()
        library().kiln_context_stats(self._handle(), ctypes.byref(s))
        return {n: getattr(s, n) for n in _STATS}

    def prepare(self, dtype, head_dim, causal=False, has_lse=False, seqlen=0, block_m=0,
                block_n=0, warps=0, tune_policy=TUNE_CONTEXT, window=False, softcap=False,
                alibi=False, bias=False, document=False, prefix=False, mods=None,
                mods_name=None, tune_mod_args=None, wgmma=False, layout=LAYOUT_DENSE,
                q_dtype=0, kv_dtype=0, dropout_p=0.0):
        """Compile-or-load the attention kernel; dtype is F16/BF16/F32 or a name ("float16").
        block_m/block_n (together) and warps force the tiling (0: chosen by the policy); wgmma
        (sm_90a) forces the dots onto wgmma.mma_async (kiln_prepare_options.wgmma).

        The variant (docs/variants.md): causal False, True or "bottom_right" (FlashAttention 2's
        alignment), "top_left"; the flags window, softcap, alibi, bias, document, prefix; mods,
        the IR text of the caller's @score_mod / @mask_mod / @block_mask (mods_name: what error
        messages call it).  Their values are Kernel.forward's arguments.  layout: LAYOUT_DENSE
        or LAYOUT_VARLEN (packed sequences with cu_seqlens, docs/serving.md).  tune_mod_args: values
        of the modifiers' own parameters ({name: value}) for tuning (kiln_prepare_options).
        q_dtype, kv_dtype: fp8 inputs (F8E4M3 ... or a torch name, "float8_e4m3fn"; 0: dtype),
        with Kernel.forward's q_descale / k_descale / v_descale.  dropout_p: attention dropout's
        probability in [0, 1) (docs/backward.md), with Kernel.forward's dropout_seed /
        dropout_offset."""
        desc = _desc(dtype, head_dim, causal, has_lse, window, softcap, alibi, bias, document,
                     prefix, mods, mods_name, layout, dropout_p)
        desc.q_dtype, desc.kv_dtype = _FP8.get(q_dtype, q_dtype), _FP8.get(kv_dtype, kv_dtype)
        po = _PrepareOptions(tune_policy=tune_policy, seqlen=seqlen, block_m=block_m,
                             block_n=block_n, warps=warps, wgmma=1 if wgmma else 0)
        targs, po.tune_n_mod_args = _mod_args(tune_mod_args)
        if targs is not None:
            po.tune_mod_args = targs
        k = ctypes.c_void_p()
        _check(library().kiln_prepare(self._handle(), ctypes.byref(desc), ctypes.byref(po),
                                      ctypes.byref(k)))
        return Kernel(self, k)


    def prepare_backward(self, dtype, head_dim, causal=False, block_m=0, block_n=0, warps=0,
                         window=False, softcap=False, alibi=False, bias=False, document=False,
                         prefix=False, mods=None, mods_name=None, dropout_p=0.0,
                         layout=LAYOUT_DENSE, wgmma=False, dq="default"):
        """kiln_prepare_backward: the backward of the forward these arguments describe (as
        prepare's, dropout_p and layout (LAYOUT_DENSE or LAYOUT_VARLEN) included);
        block_m/block_n (together) and warps force its tiling; wgmma (sm_90a) runs its dots
        as wgmma.mma_async (kiln_prepare_options.wgmma); dq "deterministic" or "atomic"
        (kiln_prepare_options.backward_dq: an atomic kernel's backward() needs dq_accum)."""
        if dq not in _BWD_DQ:
            raise KilnError(ERR_INVALID, "dq %r is not 'default', 'deterministic' or 'atomic'" % (dq,))
        desc = _desc(dtype, head_dim, causal, True, window, softcap, alibi, bias, document,
                     prefix, mods, mods_name, layout, dropout_p)
        po = _PrepareOptions(block_m=block_m, block_n=block_n, warps=warps,
                             wgmma=1 if wgmma else 0, backward_dq=_BWD_DQ[dq])
        k = ctypes.c_void_p()
        _check(library().kiln_prepare_backward(self._handle(), ctypes.byref(desc),
                                               ctypes.byref(po), ctypes.byref(k)))
        return BackwardKernel(self, k)


def _desc(dtype, head_dim, causal, has_lse, window, softcap, alibi, bias, document, prefix,
          mods, mods_name, layout, dropout_p=0.0):
    if isinstance(dtype, str):
        if dtype not in _DTYPES:
            raise KilnError(ERR_UNSUPPORTED, "dtype %s: kiln serves float16, bfloat16 and "
                            "float32" % dtype)
        dtype = _DTYPES[dtype]
    return _AttnDesc(dtype, head_dim, _causal(causal), 1 if has_lse else 0,
                     1 if window else 0, 1 if softcap else 0, 1 if alibi else 0,
                     1 if bias else 0, 1 if document else 0, 1 if prefix else 0,
                     _bytes(mods), _bytes(mods_name), layout, dropout_p=float(dropout_p))


class Kernel:
    """A prepared kernel (owned by its context)."""

    def __init__(self, ctx, handle):
        self.context = ctx
        self._h = handle

    def info(self):
        i = _KernelInfo()
        _check(library().kiln_kernel_get_info(self._h, ctypes.byref(i)))
        return {"dtype": i.desc.dtype, "head_dim": i.desc.head_dim, "causal": i.desc.causal,
                "has_lse": bool(i.desc.has_lse), "window": bool(i.desc.window),
                "softcap": bool(i.desc.softcap), "alibi": bool(i.desc.alibi),
                "bias": bool(i.desc.bias), "document": bool(i.desc.document),
                "prefix": bool(i.desc.prefix), "layout": i.desc.layout,
                "mods": i.desc.mods.decode() if i.desc.mods else None,
                "block_m": i.block_m, "block_n": i.block_n,
                "warps": i.warps, "stages": i.stages, "tuned": bool(i.tuned),
                "source": {1: "compiled", 2: "cache"}.get(i.source, "?"),
                "prepare_ms": i.prepare_ms, "cache_key": i.cache_key.decode(),
                "target": i.target.decode(), "wgmma": bool(i.wgmma),
                "atomic_dq": bool(i.atomic_dq),
                "q_dtype": i.desc.q_dtype, "kv_dtype": i.desc.kv_dtype,
                "dropout_p": i.desc.dropout_p}

    def forward(self, q, k, v, o, batch, heads, kv_heads, seqlen_q, seqlen_k, lse=None,
                sm_scale=0.0, q_stride=(0, 0, 0), k_stride=(0, 0, 0), v_stride=(0, 0, 0),
                o_stride=(0, 0, 0), lse_stride=(0, 0), stream=None, window=(0, 0), softcap=0.0,
                alibi_slopes=None, alibi_stride=0, bias=None, bias_stride=(0, 0, 0),
                q_seg=None, k_seg=None, q_seg_stride=0, k_seg_stride=0, prefix_len=0,
                mod_args=None, cu_seqlens_q=None, cu_seqlens_k=None, total_q=0, total_k=0,
                numel=None, block_table=None, cache_seqlens=None, block_table_stride=0,
                page_size=0, num_pages=0, max_pages=0, k_new=None, v_new=None, seqlen_new=0,
                k_new_stride=(0, 0, 0), v_new_stride=(0, 0, 0), q_descale=None, k_descale=None,
                v_descale=None, descale_stride=0, descale_numel=None, dropout_seed=0,
                dropout_offset=0):
        """kiln_forward on raw addresses (ints): host pointers on the host device, device pointers
        on CUDA; strides in elements (zeros: contiguous); stream a CUstream address or None.
        The variant's values as kiln_attn_args has them: window (left, right), softcap, the
        addresses alibi_slopes, bias, q_seg, k_seg with their strides, prefix_len, and mod_args
        {name: int | float | tensor or array} for the caller's modifier parameters.  Varlen
        kernels: the addresses cu_seqlens_q/k and the token counts total_q/k (seqlen_q/k are then
        the longest sequence's).  Paged kernels: the addresses block_table, cache_seqlens, k_new,
        v_new, the pools' page_size, num_pages, max_pages, seqlen_new and the strides (kiln.h).
        numel: {buffer: elements it holds} (q, k, v, o, lse, alibi, bias, q_seg, k_seg,
        block_table, k_new, v_new, q_descale, k_descale, v_descale; docs/api.md "Capacities").  fp8 kernels: the addresses of the
        float32 (batch, kv_heads) q_descale, k_descale, v_descale (None: 1) and their batch
        stride descale_stride (0: kv_heads); descale_numel: {name: elements each holds}, as
        numel's.  Dropout kernels: the generator's dropout_seed and dropout_offset (unsigned
        64-bit)."""
        if descale_numel:
            numel = dict(numel or {}, **descale_numel)
        a = _attn_args(q, k, v, o, batch, heads, kv_heads, seqlen_q, seqlen_k, lse, sm_scale,
                       q_stride, k_stride, v_stride, o_stride, lse_stride, window, softcap,
                       alibi_slopes, alibi_stride, bias, bias_stride, q_seg, k_seg, q_seg_stride,
                       k_seg_stride, prefix_len, mod_args, cu_seqlens_q, cu_seqlens_k, total_q,
                       total_k, numel,
                       paged=dict(block_table=block_table, cache_seqlens=cache_seqlens,
                                  block_table_stride=block_table_stride, page_size=page_size,
                                  num_pages=num_pages, max_pages=max_pages, k_new=k_new,
                                  v_new=v_new, seqlen_new=seqlen_new,
                                  k_new_stride=_I64x3(*k_new_stride),
                                  v_new_stride=_I64x3(*v_new_stride)))
        a.q_descale, a.k_descale, a.v_descale = q_descale, k_descale, v_descale
        a.descale_stride = descale_stride
        a.dropout_seed, a.dropout_offset = _u64(dropout_seed), _u64(dropout_offset)
        if stream is _PLANNING:  # a plan's template (_plan_launch fills in the rest per call)
            return a
        self.context._handle()
        _check(library().kiln_forward(self._h, ctypes.byref(a), stream))


class BackwardKernel:
    """A prepared backward (kiln_prepare_backward; owned by its context)."""

    def __init__(self, ctx, handle):
        self.context = ctx
        self._h = handle

    info = Kernel.info  # kiln_kernel_get_info: the same fields, atomic_dq among them

    def backward(self, q, k, v, o, lse, dout, dq, dk, dv, delta, batch, heads, kv_heads,
                 seqlen_q, seqlen_k, sm_scale=0.0, q_stride=(0, 0, 0), k_stride=(0, 0, 0),
                 v_stride=(0, 0, 0), o_stride=(0, 0, 0), lse_stride=(0, 0),
                 dout_stride=(0, 0, 0), dq_stride=(0, 0, 0), dk_stride=(0, 0, 0),
                 dv_stride=(0, 0, 0), stream=None, window=(0, 0), softcap=0.0,
                 alibi_slopes=None, alibi_stride=0, bias=None, bias_stride=(0, 0, 0),
                 q_seg=None, k_seg=None, q_seg_stride=0, k_seg_stride=0, prefix_len=0,
                 mod_args=None, numel=None, dropout_seed=0, dropout_offset=0,
                 cu_seqlens_q=None, cu_seqlens_k=None, total_q=0, total_k=0, dq_accum=None):
        """kiln_backward on raw addresses: the forward's arguments (q, k, v, its output o and lse;
        a dropout kernel's dropout_seed and dropout_offset, a varlen kernel's cu_seqlens_q/k and
        total_q/k: the forward's) and dout, the gradients dq, dk, dv it writes, and delta, a
        workspace of batch * heads * seqlen_q float32 (varlen: heads * total_q); dq_accum, for a
        kernel with info()["atomic_dq"], a workspace of head_dim times delta's float32.  numel:
        as Kernel.forward's, plus dout, dq, dk, dv, delta, dq_accum."""
        numel = dict(numel or {})
        extra = {n: numel.pop(n, 0) for n in ("dout", "dq", "dk", "dv", "delta", "dq_accum")}
        f = _attn_args(q, k, v, o, batch, heads, kv_heads, seqlen_q, seqlen_k, lse, sm_scale,
                       q_stride, k_stride, v_stride, o_stride, lse_stride, window, softcap,
                       alibi_slopes, alibi_stride, bias, bias_stride, q_seg, k_seg, q_seg_stride,
                       k_seg_stride, prefix_len, mod_args, cu_seqlens_q, cu_seqlens_k, total_q,
                       total_k, numel)
        f.dropout_seed, f.dropout_offset = _u64(dropout_seed), _u64(dropout_offset)
        a = _BwdArgs(fwd=f, dout=dout, dq=dq, dk=dk, dv=dv, delta=delta, dq_accum=dq_accum,
                     dout_stride=_I64x3(*dout_stride), dq_stride=_I64x3(*dq_stride),
                     dk_stride=_I64x3(*dk_stride), dv_stride=_I64x3(*dv_stride))
        for n, x in extra.items():
            setattr(a, n + "_numel", int(x))
        self.context._handle()
        _check(library().kiln_backward(self._h, ctypes.byref(a), stream))


def _u64(x):
    """an unsigned 64-bit generator value (a seed or an offset)"""
    x = int(x)
    if not 0 <= x < 1 << 64:
        raise KilnError(ERR_INVALID, "dropout seed / offset %d is not an unsigned 64-bit value" % x)
    return x


def _dropout_seed(dropout_p, seed):
    """attention()'s Philox seed: seed itself (an int), one drawn from it (a torch.Generator),
    or, for None, one drawn from torch's default generator (torch.manual_seed replays it), or
    from Python's random module without torch; 0 without dropout"""
    if not dropout_p:
        if seed not in (None, 0):
            raise KilnError(ERR_INVALID, "seed given without dropout_p")
        return 0
    if isinstance(seed, int):
        return _u64(seed)
    try:
        import torch
    except ImportError:
        if seed is not None:
            raise KilnError(ERR_INVALID, "seed must be an int (or a torch.Generator)")
        return random.getrandbits(64)
    if seed is not None and not isinstance(seed, torch.Generator):
        raise KilnError(ERR_INVALID, "seed must be an int or a torch.Generator")
    r = torch.randint(0, 1 << 62, (2,), generator=seed, dtype=torch.int64)
    return (int(r[0]) << 2 ^ int(r[1])) & ((1 << 64) - 1)


def _attn_args(q, k, v, o, batch, heads, kv_heads, seqlen_q, seqlen_k, lse, sm_scale, q_stride,
               k_stride, v_stride, o_stride, lse_stride, window, softcap, alibi_slopes,
               alibi_stride, bias, bias_stride, q_seg, k_seg, q_seg_stride, k_seg_stride,
               prefix_len, mod_args, cu_seqlens_q, cu_seqlens_k, total_q, total_k, numel,
               paged=None):
    """the _AttnArgs of one launch (the ctypes array of mod_args is kept on the struct); paged:
    the paged fields, by name"""
    margs, nmargs = _mod_args(mod_args)
    a = _AttnArgs(q=q, k=k, v=v, o=o, lse=lse, batch=batch, heads=heads, kv_heads=kv_heads,
                  seqlen_q=seqlen_q, seqlen_k=seqlen_k, sm_scale=sm_scale,
                  q_stride=_I64x3(*q_stride), k_stride=_I64x3(*k_stride),
                  v_stride=_I64x3(*v_stride), o_stride=_I64x3(*o_stride),
                  lse_stride=(ctypes.c_int64 * 2)(*lse_stride),
                  window_left=window[0], window_right=window[1], softcap=softcap,
                  alibi_slopes=alibi_slopes, alibi_stride=alibi_stride, bias=bias,
                  bias_stride=_I64x3(*bias_stride), q_seg=q_seg, k_seg=k_seg,
                  q_seg_stride=q_seg_stride, k_seg_stride=k_seg_stride,
                  prefix_len=prefix_len, n_mod_args=nmargs, cu_seqlens_q=cu_seqlens_q,
                  cu_seqlens_k=cu_seqlens_k, total_q=total_q, total_k=total_k, **(paged or {}))
    for n, x in (numel or {}).items():
        if n not in _NUMEL + _PAGED_NUMEL + _DESCALE_NUMEL:
            raise KilnError(ERR_INVALID, "numel: %r is none of %s"
                            % (n, ", ".join(_NUMEL + _PAGED_NUMEL + _DESCALE_NUMEL)))
        setattr(a, n + "_numel", int(x))
    if margs is not None:
        a.mod_args = margs
    return a


# ---- attention() on tensors ----

_contexts = {}
_contexts_lock = threading.Lock()


def _context_for(device):
    """The shared context of a device key ("host" or "cuda:N")."""
    with _contexts_lock:
        ctx = _contexts.get(device)
        if ctx is None:
            ctx = _contexts[device] = Context(device=device)
        return ctx


def _dtype_name(t):
    return str(t.dtype).rsplit(".", 1)[-1]


def _device_key(t):
    if getattr(t, "is_cuda", False):
        index = getattr(t.device, "index", None)
        return "cuda:%d" % (index if index is not None else 0)
    kind = getattr(getattr(t, "device", None), "type", "cpu")
    if kind != "cpu":
        raise KilnError(ERR_UNSUPPORTED, "tensors on device %r: kiln runs on CUDA or the CPU"
                        % kind)
    return "host"


def _strides(t, name, rank):
    if len(t.shape) != rank:
        raise KilnError(ERR_INVALID, "%s must have %d dimensions, got shape %s"
                        % (name, rank, tuple(t.shape)))
    s = tuple(int(x) for x in t.stride())
    if int(t.shape[-1]) > 1 and s[-1] != 1:
        raise KilnError(ERR_INVALID, "%s: the last dimension must be contiguous (strides %s)"
                        % (name, s))
    return s


def _dq_accum_for(kern, q, n):
    """atomic dQ's float32 workspace of n elements on q's device (torch), for a backward kernel
    whose info() says atomic_dq; None for the others"""
    if not kern.info()["atomic_dq"]:
        return None
    try:
        import torch
    except ImportError:
        raise KilnError(ERR_INVALID, "this backward adds dQ with atomics and needs a float32 "
                        "workspace (dq_accum), which attention_backward allocates with torch")
    return torch.empty(int(n), dtype=torch.float32, device=q.device)


def _addr(t):
    return None if t is None else t.data_ptr()


def _numel(t, size=None):
    """the elements t's memory holds from t.data_ptr() (its storage past its offset; 0 when the
    tensor does not say: not checked); size: its element size when known already"""
    try:
        st = t.untyped_storage()
        return st.nbytes() // (size or _ITEMSIZE[_dtype_name(t)]) - int(t.storage_offset())
    except (AttributeError, KeyError, TypeError):
        return 0


# ---- the plan cache: a repeated call skips the checks and kiln_prepare ----
#
# attention(), attention_varlen() and attention_with_kvcache() each split into a plan (every
# check of the arguments, the kernel from kiln_prepare, and the kiln_attn_args of the launch with
# every per-call field zeroed) and its launch (_plan_launch: a copy of that struct per call, the
# addresses, storage sizes, dropout seed / offset and modifier parameters of this call's tensors
# filled in, then kiln_forward).  A plan is kept, after its first launch succeeded, under a key
# of everything the plan was decided from: each tensor's type, shape, strides, dtype and device
# (is_cuda, device.type, device.index: what _device_key reads), whether it was given, and every
# flag and option by type and value; the context is the device's (_contexts), checked on each
# hit.  Only plain values (None, bool, int, float, str, bytes; window_size a tuple or list of
# them) make a key: a call with any other option (a tensor as sm_scale, a numpy scalar) is
# planned every time.  What a call's data decide (cu_seqlens, block tables, cache lengths, the
# storage sizes) is checked by kiln_forward on every launch, cached or not; a plan whose launch
# failed is never kept.  The keys are an LRU of _plans_max entries (set_plan_cache_size).

_PLANNING = object()  # Kernel.forward's stream while a plan is made: return the struct, no launch
_PLAIN = frozenset((type(None), bool, int, float, str, bytes))


def _per_call_mask():
    """kiln_attn_args as an int of its bytes with those of every per-call field cleared (each
    address, each _numel, the dropout seed and offset, mod_args and n_mod_args), all else set"""
    m = bytearray(b"\xff" * ctypes.sizeof(_AttnArgs))
    for n, t in _AttnArgs._fields_:
        if t is ctypes.c_void_p or n.endswith("_numel") or n in (
                "dropout_seed", "dropout_offset", "mod_args", "n_mod_args"):
            f = getattr(_AttnArgs, n)
            m[f.offset:f.offset + f.size] = bytes(f.size)
    return int.from_bytes(m, "little")


_PER_CALL_MASK = _per_call_mask()
_plans = collections.OrderedDict()
_plans_lock = threading.Lock()
_plans_max = 256
_plans_count = {"hits": 0, "misses": 0}


class _Plan:
    """what a call's checks and kiln_prepare decided, for every later call of its key: the device
    key and context, the kernel's handle, the launch's kiln_attn_args with the per-call fields
    zeroed (tmpl), slots ((index into the call's tensors, address field, numel field or None,
    element size) of each tensor given), allocs ((index, make()) of the tensors made per call
    when the caller gave none: out, an lse, a dense cache's block table), the CUDA device index
    (None on the host), whether the kernel has dropout, and ret (the index of the tensor
    returned, or a tuple of them)"""
    __slots__ = ("dev", "ctx", "kern", "tmpl", "slots", "allocs", "cuda", "dropout", "ret")

    def __init__(self, dev, ctx, kern, args, ts, spec, allocs, dropout, ret):
        n = ctypes.sizeof(_AttnArgs)  # the per-call fields zeroed: a field left out is a NULL
        self.tmpl = _AttnArgs.from_buffer_copy(
            (int.from_bytes(bytes(args), "little") & _PER_CALL_MASK).to_bytes(n, "little"))
        self.dev, self.ctx, self.kern = dev, ctx, kern._h
        self.slots = tuple((i, f, nf, _ITEMSIZE.get(_dtype_name(ts[i]))) for i, f, nf in spec
                           if ts[i] is not None)
        self.allocs, self.dropout, self.ret = tuple(allocs), bool(dropout), ret
        self.cuda = None if dev == "host" else int(dev.split(":")[1])


def _sig(t):
    """a tensor's part of a plan key, read as _device_key reads it (None: not given)"""
    if t is None:
        return None
    d = getattr(t, "device", None)
    return (type(t), t.shape, t.stride(), t.dtype, getattr(t, "is_cuda", False),
            getattr(d, "type", "cpu"), getattr(d, "index", None))


def _plan_find(tag, scalars, window, ts, params=None):
    """(key, plan) of a call: its plan key (tag: which function; its options, scalars: plain
    values, by type and value; window: None or a tuple / list of plain values, likewise; its
    tensors ts; params {name: value}: the names and types, a tensor's _sig, their values being
    the launch's) and the plan kept under it (an LRU hit), else None; key None: the cache is off
    or the call cannot be keyed (an option not a plain value, a tensor without the attributes),
    and is planned every time"""
    if not _plans_max:
        return None, None
    try:
        opts = tuple(map(type, scalars))
        if not _PLAIN.issuperset(opts):
            return None, None
        if window is not None:
            t = type(window)
            if t is not tuple and t is not list:
                return None, None
            window = tuple(window)
            wt = tuple(map(type, window))
            if not _PLAIN.issuperset(wt):
                return None, None
            window = (t, window, wt)
        key = [tag, scalars, opts, window]
        for t in ts:  # a tensor's seven fields, a None, or (another shape of tensor) its _sig
            if t is None:
                key.append(None)
                continue
            try:
                d = t.device
                key += (type(t), t.shape, t.stride(), t.dtype, t.is_cuda, d.type, d.index)
            except AttributeError:
                key.append(_sig(t))
        if params:
            if not _PLAIN.issuperset(map(type, params)):
                return None, None
            key += [(n, type(x), _sig(x) if hasattr(x, "data_ptr") else None)
                    for n, x in params.items()]
        key = tuple(key)
        with _plans_lock:
            plan = _plans.get(key)
            if plan is None or _contexts.get(plan.dev) is not plan.ctx:
                _plans_count["misses"] += 1
                return key, None
            _plans.move_to_end(key)
            _plans_count["hits"] += 1
        return key, plan
    except Exception:  # an unhashable shape or option, a stride() that raises: not cached
        return None, None


def _plan_launch(plan, ts, params, seed, offset, keep=None):
    """one launch of plan on this call's tensors ts (params: the modifiers' values; seed, offset:
    dropout's); keep: the key to keep the plan under once the launch succeeded"""
    for i, make in plan.allocs:
        if ts[i] is None:
            ts[i] = make()
    a = _AttnArgs.from_buffer_copy(plan.tmpl)  # this call's own struct: nothing shared with C
    for i, field, nfield, size in plan.slots:
        t = ts[i]
        setattr(a, field, t.data_ptr())
        if nfield is not None:
            setattr(a, nfield, _numel(t, size))
    if plan.dropout:
        a.dropout_seed, a.dropout_offset = _u64(seed), _u64(offset)
    margs = None
    if params:
        margs, a.n_mod_args = _mod_args(params)
        a.mod_args = margs
    stream = _cuda_stream(plan.cuda) if plan.cuda is not None else None
    plan.ctx._handle()
    _check(_lib.kiln_forward(plan.kern, ctypes.byref(a), stream))
    if keep is not None:
        with _plans_lock:
            _plans[keep] = plan
            while len(_plans) > _plans_max:
                _plans.popitem(last=False)
    r = plan.ret
    return ts[r] if type(r) is int else tuple(ts[i] for i in r)


def _empty(allocs, i, shape, name, device):
    """a new torch tensor of shape and dtype name on device (an out or lse the caller did not
    give), its make() for the plan's later launches appended to allocs as ts[i]'s"""
    import torch  # lazily: the caller's tensors are torch's, so it is installed
    dt = getattr(torch, name)
    allocs.append((i, lambda: torch.empty(shape, dtype=dt, device=device)))
    return torch.empty(shape, dtype=dt, device=device)


_raw_stream = None


def _cuda_stream(index):
    """torch's current stream on CUDA device index (a CUstream address; None: the default
    stream), so that the launch orders like a torch op"""
    global _raw_stream
    if _raw_stream is None:
        import torch  # the caller's tensors are torch's, so it is installed
        # the raw address torch's compiled code reads (torch.cuda.current_stream(i).cuda_stream
        # without making a Stream object per call), else that public call
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _raw_stream = raw or (lambda i: torch.cuda.current_stream(i).cuda_stream)
    return _raw_stream(index) or None


def set_plan_cache_size(n):
    """keep at most n plans (docs/api.md "The plan cache"; 0: none, every call is planned)"""
    global _plans_max
    n = int(n)
    if n < 0:
        raise KilnError(ERR_INVALID, "plan cache size %d is negative" % n)
    with _plans_lock:
        _plans_max = n
        while len(_plans) > n:
            _plans.popitem(last=False)


def plan_cache_info():
    """{"hits", "misses", "size", "maxsize"} of the plan cache (hits and misses since the last
    plan_cache_clear(); a call the cache cannot key counts as neither)"""
    with _plans_lock:
        return dict(_plans_count, size=len(_plans), maxsize=_plans_max)


def plan_cache_clear():
    """forgets every plan and zeroes the counts"""
    with _plans_lock:
        _plans.clear()
        _plans_count.update(hits=0, misses=0)


def _variant_tensor(t, name, dev, rank, dtypes, shape, broadcast=False):
    """checks a variant tensor (device, rank, dtype, last dimension contiguous, shape; with
    broadcast, a dimension of 1 but the last stands for all, stride 0); returns its strides"""
    if _device_key(t) != dev:
        raise KilnError(ERR_INVALID, "%s is on %s, q on %s" % (name, _device_key(t), dev))
    if _dtype_name(t) not in dtypes:
        raise KilnError(ERR_INVALID, "%s has dtype %s, expected %s"
                        % (name, _dtype_name(t), " or ".join(dtypes)))
    st = _strides(t, name, rank)
    got = tuple(int(x) for x in t.shape)
    for i, (g, w) in enumerate(zip(got, shape)):
        if g != w and not (broadcast and g == 1 and i < rank - 1):
            raise KilnError(ERR_INVALID, "%s has shape %s, expected %s" % (name, got, shape))
    return tuple(0 if g == 1 and w != 1 else x for g, w, x in zip(got, shape, st))


def _scalar_variants(var, val, window_size, softcap, alibi_slopes, dev, B, H):
    """The window, soft-capping and ALiBi arguments of attention() and attention_varlen() into
    the descriptor flags (var) and launch values (val)."""
    if window_size is not None and tuple(window_size) != (-1, -1):
        var["window"], val["window"] = True, (int(window_size[0]), int(window_size[1]))
    if softcap:
        var["softcap"], val["softcap"] = True, float(softcap)
    if alibi_slopes is not None:
        rank = len(alibi_slopes.shape)
        if rank not in (1, 2):
            raise KilnError(ERR_INVALID, "alibi_slopes must be (H) or (B, H), got shape %s"
                            % (tuple(alibi_slopes.shape),))
        st = _variant_tensor(alibi_slopes, "alibi_slopes", dev, rank, ("float32",),
                             (H,) if rank == 1 else (B, H), broadcast=True)
        var["alibi"], val["alibi_slopes"] = True, alibi_slopes.data_ptr()
        val["alibi_stride"] = st[0] if rank == 2 else 0


def _types(q, k, out, default="bfloat16"):
    """the compute dtype's name and the fp8 input types (q_dtype, kv_dtype: 0 or F8...) of a
    call whose q and k (v has k's dtype) may be torch float8 tensors: the compute dtype is q's
    when q is not fp8, else out's when given, else `default` (FlashAttention 3's bfloat16)"""
    qn, kn = _dtype_name(q), _dtype_name(k)
    if qn in _FP8:
        if kn != qn:
            raise KilnError(ERR_INVALID, "q is %s, k is %s: an fp8 q needs k and v of its dtype"
                            % (qn, kn))
        name = _dtype_name(out) if out is not None else default
        if name not in ("float16", "bfloat16"):
            raise KilnError(ERR_UNSUPPORTED, "fp8 inputs are computed in float16 or bfloat16, "
                            "out is %s" % name)
        return name, _FP8[qn], _FP8[kn]
    if qn not in _DTYPES:
        raise KilnError(ERR_UNSUPPORTED, "dtype %s: kiln serves float16, bfloat16 and float32 "
                        "(and torch's float8 types as inputs)" % qn)
    return qn, 0, _FP8.get(kn, 0)


def _descales(q_descale, k_descale, v_descale, fp8, dev, B, HK):
    """FlashAttention 3's descale tensors, float32 (B, HK) on q's device: Kernel.forward's
    keyword arguments (their addresses and batch stride)"""
    given = [(n, t) for n, t in (("q_descale", q_descale), ("k_descale", k_descale),
                                 ("v_descale", v_descale)) if t is not None]
    if given and not fp8:
        raise KilnError(ERR_INVALID, "%s given, but q, k and v are not fp8"
                        % ", ".join(n for n, _ in given))
    out, sb = {"descale_numel": {}}, set()
    for n, t in given:
        st = _variant_tensor(t, n, dev, 2, ("float32",), (B, HK))
        sb.add(st[0] if B > 1 else HK)
        out[n] = t.data_ptr()
        out["descale_numel"][n] = _numel(t)  # kiln_forward checks the rows fit the storage
    if len(sb) > 1:
        raise KilnError(ERR_INVALID, "q_descale, k_descale and v_descale must share one batch "
                        "stride")
    out["descale_stride"] = sb.pop() if sb else 0
    return out


def _plan(q, k, v, out, window_size, softcap, alibi_slopes, bias, document_ids, prefix_len,
          score_mod, mask_mod, params, fp8=False, dropout=(0.0, 0, 0)):
    """attention()'s checks of its tensors and variant: the shapes, strides and the variant's
    descriptor flags (var) and launch values (val), for the forward and the backward alike;
    fp8: q, k, v may be torch float8 tensors (the forward), then qt / kt are their types;
    dropout: (p, seed, offset), the seed an int already"""
    name = _dtype_name(q)
    qt = kt = 0
    if fp8:
        name, qt, kt = _types(q, k, out)
    elif name not in _DTYPES:
        raise KilnError(ERR_UNSUPPORTED, "dtype %s: kiln serves float16, bfloat16 and float32"
                        % name)
    want = {"k": _dtype_name(k) if kt else name, "v": _dtype_name(k) if kt else name,
            "out": name}
    for n, t in (("k", k), ("v", v)) + ((("out", out),) if out is not None else ()):
        if _dtype_name(t) != want[n]:
            raise KilnError(ERR_INVALID, "%s has dtype %s, expected %s"
                            % (n, _dtype_name(t), want[n]))
    dev = _device_key(q)
    for n, t in (("k", k), ("v", v), ("out", out)):
        if t is not None and _device_key(t) != dev:
            raise KilnError(ERR_INVALID, "%s is on %s, q on %s" % (n, _device_key(t), dev))
    qs, ks, vs = _strides(q, "q", 4), _strides(k, "k", 4), _strides(v, "v", 4)
    B, H, Nq, D = (int(x) for x in q.shape)
    HK, Nk = int(k.shape[1]), int(k.shape[2])
    if tuple(int(x) for x in k.shape) != (B, HK, Nk, D) or \
            tuple(int(x) for x in v.shape) != (B, HK, Nk, D):
        raise KilnError(ERR_INVALID, "shapes q %s, k %s, v %s: expected (B, H, Nq, D), "
                        "(B, HK, Nk, D), (B, HK, Nk, D)"
                        % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))

    # the variant: descriptor flags and launch values
    var, val = {}, {}
    _scalar_variants(var, val, window_size, softcap, alibi_slopes, dev, B, H)
    if bias is not None:
        st = _variant_tensor(bias, "bias", dev, 4, (name,), (B, H, Nq, Nk), broadcast=True)
        if st[:3] == (0, 0, 0) and (B, H, Nq) != (1, 1, 1):
            raise KilnError(ERR_INVALID, "a bias broadcast over batch, heads and rows at once is "
                            "not supported: expand it along one of them")
        var["bias"], val["bias"], val["bias_stride"] = True, bias.data_ptr(), st[:3]
    if document_ids is not None:
        q_seg, k_seg = document_ids if isinstance(document_ids, (tuple, list)) else \
            (document_ids, document_ids)
        sq = _variant_tensor(q_seg, "q_seg", dev, 2, ("int32",), (B, Nq))
        sk = _variant_tensor(k_seg, "k_seg", dev, 2, ("int32",), (B, Nk))
        var["document"] = True
        val.update(q_seg=q_seg.data_ptr(), k_seg=k_seg.data_ptr(), q_seg_stride=sq[0] or Nq,
                   k_seg_stride=sk[0] or Nk)
    if prefix_len is not None:
        var["prefix"], val["prefix_len"] = True, int(prefix_len)
    if dropout[0]:
        var["dropout_p"] = float(dropout[0])
        val["dropout_seed"], val["dropout_offset"] = _u64(dropout[1]), _u64(dropout[2])
    mods = "\n".join(t for t in (score_mod, mask_mod) if t) or None
    margs = {}
    for pname, pval in (params or {}).items():
        if hasattr(pval, "data_ptr") and _device_key(pval) != dev:
            raise KilnError(ERR_INVALID, "params[%r] is on %s, q on %s"
                            % (pname, _device_key(pval), dev))
        margs[pname] = pval

    return dict(name=name, dev=dev, qs=qs, ks=ks, vs=vs, B=B, H=H, Nq=Nq, D=D, HK=HK, Nk=Nk,
                var=var, val=val, mods=mods, margs=margs, qt=qt, kt=kt)


def attention(q, k, v, causal=False, sm_scale=None, out=None, lse=None, window_size=None,
              softcap=None, alibi_slopes=None, bias=None, document_ids=None, prefix_len=None,
              score_mod=None, mask_mod=None, params=None, q_descale=None, k_descale=None,
              v_descale=None, dropout_p=0.0, seed=None, offset=0):
    """softmax(mods(q k^T * sm_scale)) v for q (B, H, Nq, D), k and v (B, HK, Nk, D); returns out
    (B, H, Nq, D), allocated with torch when not given.  lse (B, H, Nq) float32, when given,
    receives the natural-log sum of exp of each query row's modified scores.  sm_scale None:
    1/sqrt(D).  The variant (docs/variants.md; each a kernel of its own, its values arguments):

    causal        False; True or "bottom_right": query i sees key j iff j <= i + Nk - Nq
                  (FlashAttention 2's alignment); "top_left": iff j <= i
    window_size   (left, right): key j is visible to query i iff
                  -left <= j - (i + Nk - Nq) <= right; -1 leaves a side unbounded ((-1, -1)
                  or None: no window)
    softcap       c > 0: scores become c * tanh(score / c) (None or 0: off)
    alibi_slopes  float32 (H) or (B, H): score -= slope * |i + Nk - Nq - j|
    bias          (B, H, Nq, Nk) of q's dtype, added to the scores; a dimension of 1 (batch,
                  heads or rows) broadcasts
    document_ids  (q_seg, k_seg), int32 (B, Nq) and (B, Nk), or one (B, N) tensor for both
                  (Nq == Nk): query i sees key j only in the same segment; ids non-decreasing
                  along each row (packed documents)
    prefix_len    prefix-LM: keys [0, prefix_len) are visible to every query, the rest causal
                  (bottom-right); leave causal False
    score_mod,    the IR text (docs/ir.md, docs/variants.md) of @score_mod and of @mask_mod
    mask_mod      (and an optional @block_mask), put together into the kernel's modifier text
    params        {name: value} for the modifiers' own parameters: an int (i32/i64), a float
                  (f32), or a tensor/array on q's device (ptr<T>), passed by address with its
                  size in bytes

    dropout_p     attention dropout (training, docs/backward.md): each weight is dropped with
                  probability dropout_p in [0, 1) and the kept ones scaled by 1 / (1 - p)
                  (lse stays the undropped one); the mask is Philox 4x32-10 of seed (an int,
                  or a torch.Generator to draw it from; None: drawn from torch's default
                  generator, so torch.manual_seed replays it) and offset (the counter offset;
                  query head h of batch b uses offset + b * H + h), regenerated, not stored,
                  by the backward

    Differentiable (docs/backward.md): when torch is present, grad mode is on and q, k or v
    requires grad (and out and lse are not given), the call is a torch.autograd.Function whose
    backward is kiln's (attention_backward): dq, dk, dv for every variant above whose score
    modifiers kiln differentiates; the variant tensors (bias, alibi_slopes, params) get no
    gradient.

    fp8 inputs (docs/serving.md): q, k, v torch float8 tensors (float8_e4m3fn, float8_e5m2,
    float8_e4m3fnuz, float8_e5m2fnuz), or only k and v with q float16 / bfloat16, with
    FlashAttention 3's q_descale, k_descale, v_descale: float32 (B, HK) (None: 1); computed and
    returned in q's dtype, or out's, or bfloat16 when q is fp8 and out is not given.

    Every failure is a KilnError, with the C library's status and message (a malformed modifier
    text: its <mods>:line:col)."""
    seed = _dropout_seed(dropout_p, seed)
    if out is None and lse is None and _wants_grad(q, k, v):
        return _autograd().apply(q, k, v, causal, sm_scale, window_size, softcap, alibi_slopes,
                                 bias, document_ids, prefix_len, score_mod, mask_mod, params,
                                 dropout_p, seed, offset)
    segs, segs_given = (document_ids, document_ids), document_ids is not None
    if isinstance(document_ids, (tuple, list)):  # (q_seg, k_seg); another length: _plan says
        segs, segs_given = tuple(document_ids) if len(document_ids) == 2 else (None, None), \
            len(document_ids)
    ts = [q, k, v, out, lse, alibi_slopes, bias, segs[0], segs[1], q_descale, k_descale,
          v_descale]
    key, plan = _plan_find("attention", (causal, sm_scale, softcap, prefix_len, score_mod,
                                         mask_mod, dropout_p, segs_given), window_size, ts,
                           params)
    if plan is not None:
        return _plan_launch(plan, ts, params, seed, offset)
    plan = _attention_plan(ts, causal, sm_scale, window_size, softcap, document_ids, prefix_len,
                           score_mod, mask_mod, params, dropout_p, seed, offset)
    return _plan_launch(plan, ts, params, seed, offset, keep=key)


_DENSE_SLOTS = ((0, "q", "q_numel"), (1, "k", "k_numel"), (2, "v", "v_numel"), (3, "o", "o_numel"),
                (4, "lse", "lse_numel"), (5, "alibi_slopes", None), (6, "bias", None),
                (7, "q_seg", None), (8, "k_seg", None), (9, "q_descale", "q_descale_numel"),
                (10, "k_descale", "k_descale_numel"), (11, "v_descale", "v_descale_numel"))


def _attention_plan(ts, causal, sm_scale, window_size, softcap, document_ids, prefix_len,
                    score_mod, mask_mod, params, dropout_p, seed, offset):
    """attention()'s plan (_Plan) of its tensors ts (q, k, v, out, lse, alibi_slopes, bias,
    q_seg, k_seg, q_descale, k_descale, v_descale): every check, kiln_prepare, the launch's
    struct; out is made here (into ts) when not given"""
    q, k, v, out, lse, alibi_slopes, bias = ts[:7]
    q_descale, k_descale, v_descale = ts[9:]
    pl = _plan(q, k, v, out, window_size, softcap, alibi_slopes, bias, document_ids, prefix_len,
               score_mod, mask_mod, params, fp8=True, dropout=(dropout_p, seed, offset))
    name, dev, qs, ks, vs = pl["name"], pl["dev"], pl["qs"], pl["ks"], pl["vs"]
    B, H, Nq, D, HK, Nk = pl["B"], pl["H"], pl["Nq"], pl["D"], pl["HK"], pl["Nk"]
    var, val, mods = pl["var"], pl["val"], pl["mods"]
    val.update(_descales(q_descale, k_descale, v_descale, pl["qt"] or pl["kt"], dev, B, HK))
    if lse is not None and _device_key(lse) != dev:
        raise KilnError(ERR_INVALID, "lse is on %s, q on %s" % (_device_key(lse), dev))
    allocs = []
    if out is None:
        out = ts[3] = _empty(allocs, 3, (B, H, Nq, D), name, q.device)
    elif tuple(int(x) for x in out.shape) != (B, H, Nq, D):
        raise KilnError(ERR_INVALID, "out has shape %s, expected %s"
                        % (tuple(out.shape), (B, H, Nq, D)))
    os_ = _strides(out, "out", 4)
    ls = (0, 0)
    if lse is not None:
        if _dtype_name(lse) != "float32" or tuple(int(x) for x in lse.shape) != (B, H, Nq):
            raise KilnError(ERR_INVALID, "lse must be float32 of shape %s" % ((B, H, Nq),))
        ls = _strides(lse, "lse", 3)[:2]
    ctx = _context_for(dev)
    kern = ctx.prepare(_DTYPES[name], D, causal=causal, has_lse=lse is not None,
                       seqlen=max(Nq, Nk), mods=mods, q_dtype=pl["qt"], kv_dtype=pl["kt"], **var)
    a = kern.forward(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), B, H, HK, Nq, Nk,
                     lse=lse.data_ptr() if lse is not None else None,
                     sm_scale=0.0 if sm_scale is None else float(sm_scale),
                     q_stride=qs[:3], k_stride=ks[:3], v_stride=vs[:3], o_stride=os_[:3],
                     lse_stride=ls, stream=_PLANNING, **val)
    return _Plan(dev, ctx, kern, a, ts, _DENSE_SLOTS, allocs, dropout_p, 3)


def _plan_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, out, window_size, softcap, alibi_slopes,
                 fp8=False, dropout=(0.0, 0, 0)):
    """attention_varlen()'s checks of its tensors and variant, for the forward and the backward
    alike: the packed shapes and strides, the batch, the descriptor flags (var) and launch values
    (val); fp8: q, k, v may be torch float8 tensors (the forward); dropout: (p, seed, offset)"""
    if fp8:
        name, qt, kt = _types(q, k, out)
    else:
        name, qt, kt = _dtype_name(q), 0, 0
        if name not in _DTYPES:
            raise KilnError(ERR_UNSUPPORTED, "dtype %s: kiln trains float16, bfloat16 and "
                            "float32" % name)
    dev = _device_key(q)
    qs, ks, vs = _strides(q, "q", 3), _strides(k, "k", 3), _strides(v, "v", 3)
    Tq, H, D = (int(x) for x in q.shape)
    Tk, HK = int(k.shape[0]), int(k.shape[1])
    if tuple(int(x) for x in k.shape) != (Tk, HK, D) or tuple(int(x) for x in v.shape) != (Tk, HK, D):
        raise KilnError(ERR_INVALID, "shapes q %s, k %s, v %s: expected (total_q, H, D), "
                        "(total_k, HK, D), (total_k, HK, D)"
                        % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    for n, t in (("k", k), ("v", v)):
        if _dtype_name(t) != (_dtype_name(k) if kt else name):
            raise KilnError(ERR_INVALID, "%s has dtype %s, expected %s"
                            % (n, _dtype_name(t), _dtype_name(k) if kt else name))
    for n, t in (("k", k), ("v", v)):
        if _device_key(t) != dev:
            raise KilnError(ERR_INVALID, "%s is on %s, q on %s" % (n, _device_key(t), dev))
    for n, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if len(t.shape) != 1 or int(t.shape[0]) < 1:
            raise KilnError(ERR_INVALID, "%s must be (batch + 1), got shape %s"
                            % (n, tuple(t.shape)))
        _variant_tensor(t, n, dev, 1, ("int32",), (int(t.shape[0]),))
    B = int(cu_seqlens_q.shape[0]) - 1
    if int(cu_seqlens_k.shape[0]) != B + 1:
        raise KilnError(ERR_INVALID, "cu_seqlens_q has %d entries, cu_seqlens_k %d"
                        % (B + 1, int(cu_seqlens_k.shape[0])))
    var, val = {}, {}
    _scalar_variants(var, val, window_size, softcap, alibi_slopes, dev, B, H)
    if dropout[0]:
        var["dropout_p"] = float(dropout[0])
        val["dropout_seed"], val["dropout_offset"] = _u64(dropout[1]), _u64(dropout[2])
    return dict(name=name, qt=qt, kt=kt, dev=dev, qs=qs, ks=ks, vs=vs, Tq=Tq, Tk=Tk, H=H, HK=HK,
                D=D, B=B, var=var, val=val)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                     softcap=0.0, alibi_slopes=None, out=None, lse=None, return_lse=False,
                     q_descale=None, k_descale=None, v_descale=None, seed=None, offset=0):
    """FlashAttention's flash_attn_varlen_func on kiln (docs/serving.md): q (total_q, H, D), k and
    v (total_k, HK, D), the batch's sequences packed along the tokens; cu_seqlens_q/k int32
    (batch + 1) prefix sums on q's device (sequence b owns tokens [cu[b], cu[b+1]); empty
    sequences are allowed); max_seqlen_q/k the longest lengths (the grid).  One launch for the
    whole batch.  causal (True / "bottom_right": each sequence aligned bottom-right to its own
    lengths, FlashAttention's varlen convention; "top_left"), window_size (left, right), softcap
    and alibi_slopes ((H) or (B, H) float32) as attention().  Returns out (total_q, H, D), or
    (out, lse) with return_lse (lse (H, total_q) float32, FlashAttention's softmax_lse);
    dropout_p with seed and offset as attention()'s (each sequence's rows and keys counted from
    its first token).  fp8 inputs and q_descale / k_descale / v_descale ((batch, HK) float32)
    as attention().  Differentiable as attention() (docs/backward.md): with torch present, grad
    mode on and q, k or v requiring grad (out, lse and return_lse not given), a
    torch.autograd.Function whose backward is attention_varlen_backward.  Every failure is a
    KilnError."""
    seed = _dropout_seed(dropout_p, seed)
    if out is None and lse is None and not return_lse and _wants_grad(q, k, v):
        return _autograd_varlen().apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                        max_seqlen_k, dropout_p, softmax_scale, causal,
                                        window_size, softcap, alibi_slopes, seed, offset)
    ts = [q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, q_descale, k_descale,
          v_descale]
    key, plan = _plan_find("varlen", (max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                                      causal, softcap, return_lse), window_size, ts)
    if plan is not None:
        return _plan_launch(plan, ts, None, seed, offset)
    plan = _varlen_plan(ts, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                        window_size, softcap, return_lse, seed, offset)
    return _plan_launch(plan, ts, None, seed, offset, keep=key)


_VARLEN_SLOTS = ((0, "q", "q_numel"), (1, "k", "k_numel"), (2, "v", "v_numel"),
                 (3, "o", "o_numel"), (4, "lse", "lse_numel"), (5, "cu_seqlens_q", None),
                 (6, "cu_seqlens_k", None), (7, "alibi_slopes", None),
                 (8, "q_descale", "q_descale_numel"), (9, "k_descale", "k_descale_numel"),
                 (10, "v_descale", "v_descale_numel"))


def _varlen_plan(ts, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_size,
                 softcap, return_lse, seed, offset):
    """attention_varlen()'s plan (_Plan) of its tensors ts (q, k, v, out, lse, cu_seqlens_q,
    cu_seqlens_k, alibi_slopes, q_descale, k_descale, v_descale); out (and lse, with return_lse)
    made here (into ts) when not given"""
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes = ts[:8]
    q_descale, k_descale, v_descale = ts[8:]
    pl = _plan_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, out, window_size, softcap,
                      alibi_slopes, fp8=True, dropout=(dropout_p, seed, offset))
    name, qt, kt, dev = pl["name"], pl["qt"], pl["kt"], pl["dev"]
    qs, ks, vs, Tq, Tk, H, HK, D, B = (pl[n] for n in ("qs", "ks", "vs", "Tq", "Tk", "H", "HK",
                                                       "D", "B"))
    var, val = pl["var"], pl["val"]
    val.update(_descales(q_descale, k_descale, v_descale, qt or kt, dev, B, HK))
    allocs = []
    if out is None:
        out = ts[3] = _empty(allocs, 3, (Tq, H, D), name, q.device)
    elif tuple(int(x) for x in out.shape) != (Tq, H, D) or _dtype_name(out) != name:
        raise KilnError(ERR_INVALID, "out must be %s of shape %s" % (name, (Tq, H, D)))
    os_ = _strides(out, "out", 3)
    if return_lse and lse is None:
        lse = ts[4] = _empty(allocs, 4, (H, Tq), "float32", q.device)
    ls = (0, 0)
    if lse is not None:
        if _dtype_name(lse) != "float32" or tuple(int(x) for x in lse.shape) != (H, Tq):
            raise KilnError(ERR_INVALID, "lse must be float32 of shape %s" % ((H, Tq),))
        ls = (0, _strides(lse, "lse", 2)[0])
    for n, t in (("out", out), ("lse", lse)):
        if t is not None and _device_key(t) != dev:
            raise KilnError(ERR_INVALID, "%s is on %s, q on %s" % (n, _device_key(t), dev))
    ctx = _context_for(dev)
    kern = ctx.prepare(_DTYPES[name], D, causal=causal, has_lse=lse is not None,
                       seqlen=max(max_seqlen_q, max_seqlen_k), layout=LAYOUT_VARLEN,
                       q_dtype=qt, kv_dtype=kt, **var)
    a = kern.forward(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), B, H, HK,
                     int(max_seqlen_q), int(max_seqlen_k),
                     lse=lse.data_ptr() if lse is not None else None,
                     sm_scale=0.0 if softmax_scale is None else float(softmax_scale),
                     q_stride=(0, qs[1], qs[0]), k_stride=(0, ks[1], ks[0]),
                     v_stride=(0, vs[1], vs[0]), o_stride=(0, os_[1], os_[0]), lse_stride=ls,
                     stream=_PLANNING, total_q=Tq, total_k=Tk, **val)
    return _Plan(dev, ctx, kern, a, ts, _VARLEN_SLOTS, allocs, dropout_p,
                 (3, 4) if return_lse else 3)


# ---- training: the backward ----

def _wants_grad(q, k, v):
    """is this call part of a torch autograd graph?"""
    if not any(getattr(t, "requires_grad", False) for t in (q, k, v)):
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.is_grad_enabled()


_autograd_fn = None


def _autograd():
    """the torch.autograd.Function of attention(), defined on first use (torch is imported only
    by a caller whose tensors require grad)"""
    global _autograd_fn
    if _autograd_fn is not None:
        return _autograd_fn
    import torch

    class _Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal, sm_scale, window_size, softcap, alibi_slopes, bias,
                    document_ids, prefix_len, score_mod, mask_mod, params, dropout_p, seed,
                    offset):
            B, H, Nq, _ = (int(x) for x in q.shape)
            lse = torch.empty((B, H, Nq), dtype=torch.float32, device=q.device)
            kw = dict(causal=causal, sm_scale=sm_scale, window_size=window_size, softcap=softcap,
                      alibi_slopes=alibi_slopes, bias=bias, document_ids=document_ids,
                      prefix_len=prefix_len, score_mod=score_mod, mask_mod=mask_mod,
                      params=params, dropout_p=dropout_p, seed=seed, offset=offset)
            out = torch.empty((B, H, Nq, int(q.shape[3])), dtype=q.dtype, device=q.device)
            attention(q, k, v, out=out, lse=lse, **kw)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.kw = kw  # the same seed and offset: the backward regenerates the forward's mask
            return out

        @staticmethod
        def backward(ctx, dout):
            q, k, v, out, lse = ctx.saved_tensors
            dq, dk, dv = attention_backward(q, k, v, out, lse, dout.contiguous(), **ctx.kw)
            return (dq, dk, dv) + (None,) * 14

    _autograd_fn = _Attention
    return _autograd_fn


def _grad_buffers(q, name, dev, given, shapes, lse, delta, rows, zero=False):
    """the backward's tensors: given (out, dout, dq, dk, dv; the gradients allocated with torch
    where None, zeroed with `zero`) of the shapes and q's dtype and device, lse and delta
    (allocated where None) float32 of shape rows, delta contiguous; returns (given, delta,
    {name: strides})"""
    for n in ("dq", "dk", "dv"):
        if given[n] is None:
            import torch  # lazily, as attention() does
            given[n] = (torch.zeros if zero else torch.empty)(shapes[n], dtype=q.dtype,
                                                               device=q.device)
    if delta is None:
        import torch
        delta = torch.empty(rows, dtype=torch.float32, device=q.device)
    st = {}
    for n, t in given.items():
        if tuple(int(x) for x in t.shape) != shapes[n] or _dtype_name(t) != name:
            raise KilnError(ERR_INVALID, "%s must be %s of shape %s" % (n, name, shapes[n]))
        if _device_key(t) != dev:
            raise KilnError(ERR_INVALID, "%s is on %s, q on %s" % (n, _device_key(t), dev))
        st[n] = _strides(t, n, len(shapes[n]))
    for n, t in (("lse", lse), ("delta", delta)):
        if _dtype_name(t) != "float32" or tuple(int(x) for x in t.shape) != rows:
            raise KilnError(ERR_INVALID, "%s must be float32 of shape %s" % (n, rows))
        if _device_key(t) != dev:
            raise KilnError(ERR_INVALID, "%s is on %s, q on %s" % (n, _device_key(t), dev))
    want = tuple(math.prod(rows[i + 1:]) for i in range(len(rows)))
    if _strides(delta, "delta", len(rows)) != want:
        raise KilnError(ERR_INVALID, "delta must be contiguous")
    return given, delta, st


def attention_backward(q, k, v, out, lse, dout, causal=False, sm_scale=None, dq=None, dk=None,
                       dv=None, delta=None, window_size=None, softcap=None, alibi_slopes=None,
                       bias=None, document_ids=None, prefix_len=None, score_mod=None,
                       mask_mod=None, params=None, dropout_p=0.0, seed=None, offset=0):
    """The backward of attention(q, k, v, ...) with the same variant arguments: out and lse
    (float32 (B, H, Nq)) are what that forward returned and wrote, dout (B, H, Nq, D) the
    gradient of the loss with respect to out.  Returns (dq, dk, dv), allocated with torch when
    not given (dk, dv: (B, HK, Nk, D), summed over the query heads of each kv head); delta, a
    float32 workspace of B * H * Nq elements, likewise.  Deterministic: no atomics.  Dropout:
    the forward's dropout_p, seed (an int) and offset, which regenerate its mask."""
    if dropout_p and not isinstance(seed, int):
        raise KilnError(ERR_INVALID, "attention_backward with dropout_p needs the forward's seed "
                        "(an int)")
    seed = _dropout_seed(dropout_p, seed)
    pl = _plan(q, k, v, out, window_size, softcap, alibi_slopes, bias, document_ids, prefix_len,
               score_mod, mask_mod, params, dropout=(dropout_p, seed, offset))
    name, dev = pl["name"], pl["dev"]
    B, H, Nq, D, HK, Nk = pl["B"], pl["H"], pl["Nq"], pl["D"], pl["HK"], pl["Nk"]
    shapes = {"out": (B, H, Nq, D), "dout": (B, H, Nq, D), "dq": (B, H, Nq, D),
              "dk": (B, HK, Nk, D), "dv": (B, HK, Nk, D)}
    given, delta, st = _grad_buffers(q, name, dev, {"out": out, "dout": dout, "dq": dq, "dk": dk,
                                                     "dv": dv}, shapes, lse, delta, (B, H, Nq))
    st = {n: x[:3] for n, x in st.items()}
    ctx = _context_for(dev)
    kern = ctx.prepare_backward(_DTYPES[name], D, causal=causal, mods=pl["mods"], **pl["var"])
    acc = _dq_accum_for(kern, q, B * H * Nq * D)
    stream = None
    if dev != "host":
        import torch
        stream = torch.cuda.current_stream(q.device).cuda_stream or None
    kern.backward(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                  dout.data_ptr(), given["dq"].data_ptr(), given["dk"].data_ptr(),
                  given["dv"].data_ptr(), delta.data_ptr(), B, H, HK, Nq, Nk,
                  sm_scale=0.0 if sm_scale is None else float(sm_scale),
                  q_stride=pl["qs"][:3], k_stride=pl["ks"][:3], v_stride=pl["vs"][:3],
                  o_stride=st["out"], lse_stride=_strides(lse, "lse", 3)[:2],
                  dout_stride=st["dout"], dq_stride=st["dq"], dk_stride=st["dk"],
                  dv_stride=st["dv"], stream=stream, mod_args=pl["margs"],
                  numel={"q": _numel(q), "k": _numel(k), "v": _numel(v), "o": _numel(out),
                         "lse": _numel(lse), "dout": _numel(dout), "dq": _numel(given["dq"]),
                         "dk": _numel(given["dk"]), "dv": _numel(given["dv"]),
                         "delta": _numel(delta), "dq_accum": _numel(acc)}, dq_accum=_addr(acc),
                  **pl["val"])
    return given["dq"], given["dk"], given["dv"]


_autograd_varlen_fn = None


def _autograd_varlen():
    """the torch.autograd.Function of attention_varlen(), defined on first use"""
    global _autograd_varlen_fn
    if _autograd_varlen_fn is not None:
        return _autograd_varlen_fn
    import torch

    class _AttentionVarlen(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                    dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, seed,
                    offset):
            Tq, H, D = (int(x) for x in q.shape)
            lse = torch.empty((H, Tq), dtype=torch.float32, device=q.device)
            out = torch.empty((Tq, H, D), dtype=q.dtype, device=q.device)
            kw = dict(dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      seed=seed, offset=offset)
            attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                             out=out, lse=lse, **kw)
            ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
            ctx.lens = (max_seqlen_q, max_seqlen_k)
            ctx.kw = kw  # the same seed and offset: the backward regenerates the forward's mask
            return out

        @staticmethod
        def backward(ctx, dout):
            q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
            dq, dk, dv = attention_varlen_backward(q, k, v, out, lse, dout.contiguous(), cu_q,
                                                   cu_k, ctx.lens[0], ctx.lens[1], **ctx.kw)
            return (dq, dk, dv) + (None,) * 12

    _autograd_varlen_fn = _AttentionVarlen
    return _autograd_varlen_fn


def attention_varlen_backward(q, k, v, out, lse, dout, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                              max_seqlen_k, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None, dq=None,
                              dk=None, dv=None, delta=None, seed=None, offset=0):
    """The backward of attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, ...) with the same
    arguments: out (total_q, H, D) and lse (float32 (H, total_q)) are what that forward returned
    and wrote, dout (total_q, H, D) the gradient of the loss with respect to out.  Returns (dq,
    dk, dv), allocated with torch when not given (dk, dv: (total_k, HK, D), summed over the query
    heads of each kv head; tokens of no sequence are not written); delta, a float32 workspace
    (H, total_q), likewise.  Deterministic: no atomics.  Dropout: the forward's dropout_p, seed
    (an int) and offset."""
    if dropout_p and not isinstance(seed, int):
        raise KilnError(ERR_INVALID, "attention_varlen_backward with dropout_p needs the "
                        "forward's seed (an int)")
    seed = _dropout_seed(dropout_p, seed)
    pl = _plan_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, out, window_size, softcap,
                      alibi_slopes, dropout=(dropout_p, seed, offset))
    name, dev = pl["name"], pl["dev"]
    Tq, Tk, H, HK, D, B = (pl[n] for n in ("Tq", "Tk", "H", "HK", "D", "B"))
    shapes = {"out": (Tq, H, D), "dout": (Tq, H, D), "dq": (Tq, H, D), "dk": (Tk, HK, D),
              "dv": (Tk, HK, D)}
    # (zeros: the tokens of no sequence are not written)
    given, delta, st = _grad_buffers(q, name, dev, {"out": out, "dout": dout, "dq": dq, "dk": dk,
                                                     "dv": dv}, shapes, lse, delta, (H, Tq),
                                     zero=True)
    st = {n: (0, x[1], x[0]) for n, x in st.items()}  # {batch: none, head, token}
    qs, ks, vs = pl["qs"], pl["ks"], pl["vs"]
    ctx = _context_for(dev)
    kern = ctx.prepare_backward(_DTYPES[name], D, causal=causal, layout=LAYOUT_VARLEN,
                                **pl["var"])
    acc = _dq_accum_for(kern, q, H * Tq * D)
    stream = None
    if dev != "host":
        import torch
        stream = torch.cuda.current_stream(q.device).cuda_stream or None
    kern.backward(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                  dout.data_ptr(), given["dq"].data_ptr(), given["dk"].data_ptr(),
                  given["dv"].data_ptr(), delta.data_ptr(), B, H, HK, int(max_seqlen_q),
                  int(max_seqlen_k),
                  sm_scale=0.0 if softmax_scale is None else float(softmax_scale),
                  q_stride=(0, qs[1], qs[0]), k_stride=(0, ks[1], ks[0]),
                  v_stride=(0, vs[1], vs[0]), o_stride=st["out"],
                  lse_stride=(0, _strides(lse, "lse", 2)[0]), dout_stride=st["dout"],
                  dq_stride=st["dq"], dk_stride=st["dk"], dv_stride=st["dv"], stream=stream,
                  cu_seqlens_q=cu_seqlens_q.data_ptr(), cu_seqlens_k=cu_seqlens_k.data_ptr(),
                  total_q=Tq, total_k=Tk,
                  numel={"q": _numel(q), "k": _numel(k), "v": _numel(v), "o": _numel(out),
                         "lse": _numel(lse), "dout": _numel(dout), "dq": _numel(given["dq"]),
                         "dk": _numel(given["dk"]), "dv": _numel(given["dv"]),
                         "delta": _numel(delta), "dq_accum": _numel(acc)}, dq_accum=_addr(acc),
                  **pl["val"])
    return given["dq"], given["dk"], given["dv"]


def attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                           cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None,
                           block_table=None, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                           alibi_slopes=None, num_splits=0, return_softmax_lse=False,
                           out=None, lse=None, q_descale=None, k_descale=None, v_descale=None):
    """FlashAttention's flash_attn_with_kvcache on kiln (docs/serving.md): q (B, Nq, H, D);
    k_cache and v_cache either page pools (num_pages, page_size, HK, D) with block_table int32
    (B, max_pages) naming each sequence's pages in order (any page_size 1..256), or, without a
    block table, dense caches (B, S, HK, D) (viewed as pages of a size dividing S); cache_seqlens
    int32 (B) tensor or an int: the keys already in each sequence's cache (None: all S of a dense
    cache).  k and v (B, seqlen_new, HK, D), when given, are written into the cache at positions
    cache_seqlens[b].. first (on CUDA by an append kernel on the same stream), then the queries
    attend over cache_seqlens[b] + seqlen_new keys; cache_seqlens is not
    updated (as in FlashAttention).  causal (True / "bottom_right": the queries are each
    sequence's last Nq positions), window_size, softcap and alibi_slopes as attention().  Returns
    out (B, Nq, H, D), or (out, lse) with return_softmax_lse (lse (B, H, Nq) float32).  Rotary
    embeddings, cache_batch_idx, cache_leftpad and num_splits are not supported (KilnError).
    fp8 KV pages (docs/serving.md): k_cache / v_cache (and k / v) torch float8 tensors with
    k_descale / v_descale float32 (B, HK) (q float16 / bfloat16, or fp8 with q_descale)."""
    for n, x in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin),
                 ("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad)):
        if x is not None:
            raise KilnError(ERR_UNSUPPORTED, "%s: not supported by kiln yet" % n)
    if num_splits not in (0, 1):
        raise KilnError(ERR_UNSUPPORTED, "num_splits %r: kiln's paged kernel does not split "
                        "the keys yet" % (num_splits,))
    cs = cache_seqlens if cache_seqlens is not None and not isinstance(cache_seqlens, int) \
        else None  # a tensor; an int (or None) is an option, its tensor made per call
    ts = [q, k_cache, v_cache, out, lse, block_table, cs, k, v, alibi_slopes, q_descale, k_descale,
          v_descale]
    key, plan = _plan_find("kvcache", (softmax_scale, causal, softcap, return_softmax_lse,
                                       None if cs is not None else cache_seqlens), window_size,
                           ts)
    if plan is not None:
        return _plan_launch(plan, ts, None, 0, 0)
    plan = _kvcache_plan(ts, cache_seqlens, softmax_scale, causal, window_size, softcap,
                         return_softmax_lse)
    return _plan_launch(plan, ts, None, 0, 0, keep=key)


_PAGED_SLOTS = ((0, "q", "q_numel"), (1, "k", "k_numel"), (2, "v", "v_numel"), (3, "o", "o_numel"),
                (4, "lse", "lse_numel"), (5, "block_table", "block_table_numel"),
                (6, "cache_seqlens", None), (7, "k_new", "k_new_numel"),
                (8, "v_new", "v_new_numel"), (9, "alibi_slopes", None),
                (10, "q_descale", "q_descale_numel"), (11, "k_descale", "k_descale_numel"),
                (12, "v_descale", "v_descale_numel"))


def _kvcache_plan(ts, cache_seqlens, softmax_scale, causal, window_size, softcap,
                  return_softmax_lse):
    """attention_with_kvcache()'s plan (_Plan) of its tensors ts (q, k_cache, v_cache, out, lse,
    block_table, cache_seqlens (a tensor, else None), k, v, alibi_slopes, q_descale, k_descale,
    v_descale); what it makes (out, lse, a dense cache's block table, the cache_seqlens tensor of
    an int) goes into ts"""
    q, k_cache, v_cache, out, lse, block_table, _, k, v, alibi_slopes = ts[:10]
    q_descale, k_descale, v_descale = ts[10:]
    allocs = []
    name, qt, kt = _types(q, k_cache, out)
    dev = _device_key(q)
    qs = _strides(q, "q", 4)
    B, Nq, H, D = (int(x) for x in q.shape)
    kcs, vcs = _strides(k_cache, "k_cache", 4), _strides(v_cache, "v_cache", 4)
    P, PS, HK = int(k_cache.shape[0]), int(k_cache.shape[1]), int(k_cache.shape[2])
    if tuple(int(x) for x in k_cache.shape) != (P, PS, HK, D) or \
            tuple(int(x) for x in v_cache.shape) != (P, PS, HK, D):
        raise KilnError(ERR_INVALID, "shapes q %s, k_cache %s, v_cache %s: expected (B, Nq, H, "
                        "D) and (num_pages, page_size, HK, D) twice (or (B, S, HK, D) without a "
                        "block table)" % (tuple(q.shape), tuple(k_cache.shape),
                                          tuple(v_cache.shape)))
    kvn = _dtype_name(k_cache) if kt else name
    for n, t in (("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v), ("out", out)):
        want = name if n == "out" else kvn
        if t is not None and _dtype_name(t) != want:
            raise KilnError(ERR_INVALID, "%s has dtype %s, expected %s" % (n, _dtype_name(t), want))
        if t is not None and _device_key(t) != dev:
            raise KilnError(ERR_INVALID, "%s is on %s, q on %s" % (n, _device_key(t), dev))
    if block_table is None:
        # a dense (B, S, HK, D) cache is pages of a size dividing S, numbered in order
        if P != B or kcs[0] != PS * kcs[1] or vcs[0] != PS * vcs[1]:
            raise KilnError(ERR_UNSUPPORTED, "without block_table, k_cache and v_cache must be "
                            "(B, S, HK, D) with the batch stride S times the row stride")
        S = PS
        PS = max(p for p in range(1, min(S, 256) + 1) if S % p == 0) if S else 1
        import torch  # lazily: the caller's tensors are torch's, so it is installed
        npb, qd = S // PS, q.device

        def table():
            return torch.arange(B * npb, dtype=torch.int32, device=qd).reshape(B, npb)
        block_table = ts[5] = table()
        allocs.append((5, table))
        kcs = (PS * kcs[1], kcs[1], kcs[2], 1)
        vcs = (PS * vcs[1], vcs[1], vcs[2], 1)
        P = B * npb
        if cache_seqlens is None:
            cache_seqlens = S
    if cache_seqlens is None:
        raise KilnError(ERR_INVALID, "cache_seqlens is required with a block table")
    if isinstance(cache_seqlens, int):
        import torch
        n, qd = cache_seqlens, q.device

        def lens():
            return torch.full((B,), n, dtype=torch.int32, device=qd)
        cache_seqlens = ts[6] = lens()
        allocs.append((6, lens))
    _variant_tensor(cache_seqlens, "cache_seqlens", dev, 1, ("int32",), (B,))
    if len(block_table.shape) != 2 or int(block_table.shape[0]) != B:
        raise KilnError(ERR_INVALID, "block_table must be (B, max_pages), got shape %s"
                        % (tuple(block_table.shape),))
    MP = int(block_table.shape[1])
    bts = _variant_tensor(block_table, "block_table", dev, 2, ("int32",), (B, MP))
    Nn, ns = 0, [(0, 0, 0), (0, 0, 0)]
    if (k is None) != (v is None):
        raise KilnError(ERR_INVALID, "k and v come together")
    if k is not None:
        Nn = int(k.shape[1])
        for i, (n, t) in enumerate((("k", k), ("v", v))):
            st = _strides(t, n, 4)
            if tuple(int(x) for x in t.shape) != (B, Nn, HK, D):
                raise KilnError(ERR_INVALID, "%s has shape %s, expected %s"
                                % (n, tuple(t.shape), (B, Nn, HK, D)))
            ns[i] = (st[0], st[2], st[1])
    var, val = {}, {}
    _scalar_variants(var, val, window_size, softcap, alibi_slopes, dev, B, H)
    val.update(_descales(q_descale, k_descale, v_descale, qt or kt, dev, B, HK))
    if out is None:
        out = ts[3] = _empty(allocs, 3, (B, Nq, H, D), name, q.device)
    elif tuple(int(x) for x in out.shape) != (B, Nq, H, D):
        raise KilnError(ERR_INVALID, "out has shape %s, expected %s"
                        % (tuple(out.shape), (B, Nq, H, D)))
    os_ = _strides(out, "out", 4)
    if return_softmax_lse and lse is None:
        lse = ts[4] = _empty(allocs, 4, (B, H, Nq), "float32", q.device)
    ls = (0, 0)
    if lse is not None:
        if _dtype_name(lse) != "float32" or tuple(int(x) for x in lse.shape) != (B, H, Nq):
            raise KilnError(ERR_INVALID, "lse must be float32 of shape %s" % ((B, H, Nq),))
        ls = _strides(lse, "lse", 3)[:2]
    ctx = _context_for(dev)
    kern = ctx.prepare(_DTYPES[name], D, causal=causal, has_lse=lse is not None,
                       seqlen=MP * PS, layout=LAYOUT_PAGED, q_dtype=qt, kv_dtype=kt, **var)
    a = kern.forward(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(), B, H,
                     HK, Nq, 0, lse=lse.data_ptr() if lse is not None else None,
                     sm_scale=0.0 if softmax_scale is None else float(softmax_scale),
                     q_stride=(qs[0], qs[2], qs[1]), k_stride=(kcs[0], kcs[2], kcs[1]),
                     v_stride=(vcs[0], vcs[2], vcs[1]), o_stride=(os_[0], os_[2], os_[1]),
                     lse_stride=ls, stream=_PLANNING, block_table_stride=bts[0] or MP,
                     page_size=PS, num_pages=P, max_pages=MP, seqlen_new=Nn,
                     k_new_stride=ns[0], v_new_stride=ns[1], **val)
    return _Plan(dev, ctx, kern, a, ts, _PAGED_SLOTS, allocs, 0,
                 (3, 4) if return_softmax_lse else 3)


if __name__ == "__main__":
    # `python3 kiln.py`: where the library is and what "auto" picks
    with Context() as c:
        print("libkiln: %s\ntarget: %s (%s)\ncache: %s" % (library()._name, c.target,
                                                          c.device_name, c.cache_dir or "none"))
