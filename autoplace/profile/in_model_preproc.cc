// In-model preprocessing for a stock TVM RPC server: the profiler's ``autoplace.profile.in_model_cache`` in C++.
//
// A server started with ``python -m tvm.exec.rpc_server`` runs no autoplace code, so a kernel timed there cannot
// be timed in-model by the Python function the profiler registers locally (autoplace/profile/cache_state.py) or
// the one a bundle's runner registers (remote_runner.register_stream_preproc). This file is linked into the
// streaming kernels a bundle ships (autoplace/profile/remote.py, export_stream_kernel: ``main(x, y)``, ``y = x + x``
// over float32 vectors in parallel, ``serial(x, y)`` on one thread, compiled by TVM for the server's CPU); the
// library is uploaded and loaded with ``session.load_module``, and loading it registers three global functions in
// the server process:
//
//   autoplace.profile.in_model_configure(reread_mask: int, parallel_min_elems: int[, flush_mask: int]) -> int
//       The arguments the next preprocessing reads back in (bit i: argument i), the length from which a
//       vector is streamed by ``main`` (in parallel) rather than ``serial``, and the arguments the weights-cold
//       preprocessing flushes (the kernel's weights; 0 when not given); returns the L2 bytes it evicts
//       (sysfs index2 of cpu0 times the CPUs this process may use when the library was loaded, 512 KiB per CPU
//       when sysfs does not say: remote_runner.l2_bytes).
//   autoplace.profile.in_model_cache(*kernel arguments)
//       The ``f_preproc`` of ``time_evaluator``: streams over twice that L2 (in parallel: each core's L2 sees
//       its share), then over each argument of the mask of at least 4 KiB, as remote_runner.register_stream_preproc
//       does with the same kernels.
//   autoplace.profile.weights_cold_cache(*kernel arguments)
//       The same, then the arguments of the flush mask flushed from every cache level by TVM's own
//       ``cache_flush_cpu_non_first_arg`` (which skips its first argument), as
//       remote_runner.register_weights_cold_preproc does.
//
// Only the C API of tvm-ffi (the function registry, calling a global function) is called, and the two TVM kernels
// beside this code.

#include <dlpack/dlpack.h>
#include <sched.h>
#include <tvm/ffi/c_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int64_t kDefaultL2PerCoreBytes = 512 << 10;  // remote_runner.DEFAULT_L2_PER_CORE_BYTES
constexpr int64_t kRereadMinBytes = 4 << 10;           // remote_runner.REREAD_MIN_BYTES

struct State {
  int64_t l2_bytes = 0;
  int64_t parallel_min = 32768;
  uint64_t reread_mask = 0;
  uint64_t flush_mask = 0;
  TVMFFIObjectHandle flush = nullptr;  // TVM's cache_flush_cpu_non_first_arg, looked up once
  float* evict = nullptr;
  int64_t evict_n = 0;
  float* scratch = nullptr;
  int64_t scratch_n = 0;
} state;

int64_t ReadL2Bytes() {
  int64_t per_core = kDefaultL2PerCoreBytes;
  if (FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index2/size", "r")) {
    long long value = 0;
    char unit = 0;
    if (std::fscanf(f, "%lld%c", &value, &unit) >= 1 && value > 0) {
      per_core = value << (unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0);
    }
    std::fclose(f);
  }
  cpu_set_t cpus;
  int cores = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  return per_core * (cores > 0 ? cores : 1);
}

int Fail(const char* message) {
  TVMFFIErrorSetRaisedFromCStr("RuntimeError", message);
  return -1;
}

float* Grow(float** buffer, int64_t* have, int64_t n) {
  if (*have < n) {
    std::free(*buffer);
    *buffer = static_cast<float*>(std::aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64));
    *have = *buffer ? n : 0;
  }
  return *buffer;
}

}  // namespace

// The streaming kernels TVM compiled into this library (their ``global_symbol``s: ``main``, ``serial``).
extern "C" int __tvm_ffi_main(void* self, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result);
extern "C" int __tvm_ffi_serial(void* self, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result);

namespace {

// y = x + x over n floats (y: the scratch buffer), with ``main`` from parallel_min elements, ``serial`` below.
int StreamOnce(const float* x, int64_t n) {
  float* y = Grow(&state.scratch, &state.scratch_n, n);
  if (y == nullptr) return Fail("in_model_cache: out of memory");
  int64_t shape[1] = {n};
  DLTensor tensors[2];
  void* data[2] = {const_cast<float*>(x), y};
  TVMFFIAny args[2];
  for (int i = 0; i < 2; ++i) {
    tensors[i] = DLTensor{data[i], DLDevice{kDLCPU, 0}, 1, DLDataType{kDLFloat, 32, 1}, shape, nullptr, 0};
    std::memset(&args[i], 0, sizeof(TVMFFIAny));
    args[i].type_index = kTVMFFIDLTensorPtr;
    args[i].v_ptr = &tensors[i];
  }
  TVMFFIAny result;
  std::memset(&result, 0, sizeof(result));
  result.type_index = kTVMFFINone;
  return (n < state.parallel_min ? __tvm_ffi_serial : __tvm_ffi_main)(nullptr, args, 2, &result);
}

DLTensor* TensorOf(const TVMFFIAny& arg) {
  if (arg.type_index == kTVMFFIDLTensorPtr) return static_cast<DLTensor*>(arg.v_ptr);
  if (arg.type_index == kTVMFFITensor) {
    return reinterpret_cast<DLTensor*>(reinterpret_cast<char*>(arg.v_obj) + sizeof(TVMFFIObject));
  }
  return nullptr;
}

int Configure(void*, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result) {
  if ((num_args != 2 && num_args != 3) || args[0].type_index != kTVMFFIInt || args[1].type_index != kTVMFFIInt ||
      (num_args == 3 && args[2].type_index != kTVMFFIInt)) {
    return Fail("autoplace.profile.in_model_configure(reread_mask: int, parallel_min_elems: int[, flush_mask: int])");
  }
  state.reread_mask = static_cast<uint64_t>(args[0].v_int64);
  state.parallel_min = args[1].v_int64;
  state.flush_mask = num_args == 3 ? static_cast<uint64_t>(args[2].v_int64) : 0;
  if (state.l2_bytes == 0) state.l2_bytes = ReadL2Bytes();
  result->type_index = kTVMFFIInt;
  result->v_int64 = state.l2_bytes;
  return 0;
}

int Preproc(void*, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result) {
  if (state.l2_bytes == 0) state.l2_bytes = ReadL2Bytes();
  int64_t n = 2 * state.l2_bytes / 4;
  if (state.evict_n < n) {
    if (Grow(&state.evict, &state.evict_n, n) == nullptr) return Fail("in_model_cache: out of memory");
    for (int64_t i = 0; i < n; ++i) state.evict[i] = 1.0f;
  }
  if (StreamOnce(state.evict, n) != 0) return -1;  // the error is set
  for (int32_t i = 0; i < num_args && i < 64; ++i) {
    if (!((state.reread_mask >> i) & 1)) continue;
    DLTensor* t = TensorOf(args[i]);
    if (t == nullptr || t->data == nullptr) continue;
    int64_t elems = 1;
    for (int d = 0; d < t->ndim; ++d) elems *= t->shape[d];
    int64_t nbytes = elems * ((t->dtype.bits * t->dtype.lanes + 7) / 8);
    if (nbytes < kRereadMinBytes || nbytes % 4 != 0) continue;
    const float* x = reinterpret_cast<const float*>(static_cast<const char*>(t->data) + t->byte_offset);
    if (StreamOnce(x, nbytes / 4) != 0) return -1;
  }
  result->type_index = kTVMFFINone;
  return 0;
}

int WeightsCold(void* self, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result) {
  if (Preproc(self, args, num_args, result) != 0) return -1;  // the error is set
  if (state.flush_mask == 0 || num_args == 0) return 0;
  if (state.flush == nullptr) {
    const char* name = "cache_flush_cpu_non_first_arg";
    TVMFFIByteArray key{name, std::strlen(name)};
    if (TVMFFIFunctionGetGlobal(&key, &state.flush) != 0 || state.flush == nullptr) {
      return Fail("weights_cold_cache: this TVM has no cache_flush_cpu_non_first_arg");
    }
  }
  TVMFFIAny call[65];
  int32_t n = 0;
  call[n++] = args[0];  // skipped by the flush: any argument
  for (int32_t i = 0; i < num_args && i < 64; ++i) {
    if ((state.flush_mask >> i) & 1) call[n++] = args[i];
  }
  TVMFFIAny out;
  std::memset(&out, 0, sizeof(out));
  out.type_index = kTVMFFINone;
  if (TVMFFIFunctionCall(state.flush, call, n, &out) != 0) return -1;
  result->type_index = kTVMFFINone;
  return 0;
}

int Register(const char* name, TVMFFISafeCallType body) {
  TVMFFIObjectHandle f = nullptr;
  if (TVMFFIFunctionCreate(nullptr, body, nullptr, &f) != 0) return -1;
  TVMFFIByteArray key{name, std::strlen(name)};
  int rc = TVMFFIFunctionSetGlobal(&key, f, 1);
  TVMFFIObjectDecRef(f);
  return rc;
}

__attribute__((constructor)) void RegisterOnLoad() {
  // The L2 of the CPUs this process may use, read before it runs a kernel: TVM's thread pool, with fewer
  // threads than CPUs, pins the thread that launches a parallel kernel to one CPU.
  state.l2_bytes = ReadL2Bytes();
  Register("autoplace.profile.in_model_configure", Configure);
  Register("autoplace.profile.in_model_cache", Preproc);
  Register("autoplace.profile.weights_cold_cache", WeightsCold);
}

}  // namespace
