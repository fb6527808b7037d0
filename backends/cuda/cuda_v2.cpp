// The backend ABI v2 entries of the CUDA plugin: asynchronous copies,
// events, stream-ordered memory, device queries, the per-op capability
// query and the native stream for DLPack, all on the instance's stream.
#include "cuda_backend.hpp"

namespace oslo_cuda {

oslo_status copy_async(void* self, void* dst, const void* src, size_t bytes,
                       oslo_bk_copy_kind kind_arg) {
  const int kind = enum_value(kind_arg);
  return guard(self, "copy_async", [&](Instance& in) {
    if (!oslo_backend_glue::check_copy("", kind_arg, dst, src, bytes)) return;
    const cudaMemcpyKind k = kind == OSLO_BK_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                             : kind == OSLO_BK_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                              : cudaMemcpyDeviceToDevice;
    check_cuda(cudaMemcpyAsync(dst, src, bytes, k, in.stream), "cudaMemcpyAsync");
  });
}

oslo_status event_create(void* self, void** event) {
  return guard(self, "event_create", [&](Instance&) {
    if (event == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, "event is NULL");
    *event = nullptr;
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    *event = e;
  });
}

void event_destroy(void* self, void* event) {
  if (self == nullptr || event == nullptr) return;
  int prev = -1;
  (void)cudaGetDevice(&prev);
  (void)cudaSetDevice(static_cast<Instance*>(self)->device);
  (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
  if (prev >= 0) (void)cudaSetDevice(prev);
}

oslo_status event_record(void* self, void* event) {
  return guard(self, "event_record", [&](Instance& in) {
    if (event == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, "event is NULL");
    check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(event), in.stream), "cudaEventRecord");
  });
}

oslo_status event_wait(void* self, void* event) {
  return guard(self, "event_wait", [&](Instance& in) {
    if (event == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, "event is NULL");
    check_cuda(cudaStreamWaitEvent(in.stream, static_cast<cudaEvent_t>(event), 0),
               "cudaStreamWaitEvent");
  });
}

oslo_status event_synchronize(void* self, void* event) {
  return guard(self, "event_synchronize", [&](Instance&) {
    if (event == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, "event is NULL");
    check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "cudaEventSynchronize");
  });
}

oslo_status alloc_async(void* self, size_t bytes, void** out) {
  return guard(self, "alloc_async", [&](Instance& in) {
    if (out == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    // The caching allocator is ordered on the instance's one stream: a block
    // freed earlier is reused only by work enqueued after its last use.
    *out = in.mem->allocate(bytes, in.stream);
  });
}

void free_async(void* self, void* ptr, size_t /*bytes*/) {
  if (self == nullptr || ptr == nullptr) return;
  try {
    static_cast<Instance*>(self)->mem->release(ptr);
  } catch (...) {
  }
}

const char* device_name(void* self) {
  return self ? static_cast<Instance*>(self)->device_name.c_str() : "cuda";
}

oslo_status memory_info(void* self, size_t* free_bytes, size_t* total_bytes) {
  return guard(self, "memory_info", [&](Instance& in) {
    if (free_bytes == nullptr || total_bytes == nullptr)
      fail(OSLO_ERR_INVALID_ARGUMENT, "NULL output");
    size_t f = 0, t = 0;
    check_cuda(cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
    // Blocks cached by the allocator are free for oslo's use.
    *free_bytes = f + in.mem->cached_bytes();
    *total_bytes = t;
  });
}

int op_supported(void*, oslo_bk_op op_arg, oslo_dtype dtype) {
  const int op = enum_value(op_arg);
  // Block-quantized weights (cuda_quant.cu).
  if (op == OSLO_BK_OP_DEQUANTIZE || op == OSLO_BK_OP_MATMUL_QUANT)
    return quant_dtype(dtype) ? 1 : 0;
  // The int8 KV cache's rows (cuda_kv8.cu): the float side's dtype.
  if (op == OSLO_BK_OP_QUANTIZE_ROWS || op == OSLO_BK_OP_DEQUANTIZE_ROWS)
    return is_float(dtype) ? 1 : 0;
  if (!is_float(dtype) && !is_int(dtype)) return 0;
  if (op >= OSLO_BK_OP_CONVERT && op <= OSLO_BK_OP_SCATTER_ADD_COLS) return 1;
  // The fused entries (cuda_fused.cu, cuda_paged.cu): float dtypes; AdamW in f32 only.
  switch (op) {
    case OSLO_BK_OP_ATTENTION:
    case OSLO_BK_OP_RESIDUAL_NORM:
    case OSLO_BK_OP_ROPE:
    case OSLO_BK_OP_MATMUL_ACT:
    case OSLO_BK_OP_ARGMAX:
    case OSLO_BK_OP_NORM_BACKWARD:
    case OSLO_BK_OP_PAGED_ATTENTION: return is_float(dtype) ? 1 : 0;
    case OSLO_BK_OP_ADAMW: return dtype == OSLO_DTYPE_F32 ? 1 : 0;
    case OSLO_BK_OP_MATMUL_MIXED: return dtype == OSLO_DTYPE_BF16 || dtype == OSLO_DTYPE_F16;
    default: return 0;
  }
}

int64_t native_stream(void* self) {
  return self ? static_cast<int64_t>(
                    reinterpret_cast<uintptr_t>(static_cast<Instance*>(self)->stream))
              : 0;
}

oslo_status stream_wait_event(void* self, int64_t stream, void* event) {
  return guard(self, "stream_wait_event", [&](Instance&) {
    if (event == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, "event is NULL");
    cudaStream_t s = stream == 1   ? cudaStreamLegacy
                     : stream == 2 ? cudaStreamPerThread
                                   : reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(stream));
    if (stream == 0) fail(OSLO_ERR_INVALID_ARGUMENT, "stream 0 is not a CUDA stream value");
    check_cuda(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(event), 0), "cudaStreamWaitEvent");
  });
}

void refuse_while_capturing(const Instance& in, const char* what) {
  if (in.capturing)
    fail(OSLO_ERR_NOT_SUPPORTED,
         std::string(what) + " while a graph is being recorded (graph_begin .. graph_end)");
}

oslo_status graph_begin(void* self) {
  if (self != nullptr && !static_cast<Instance*>(self)->graphs) return OSLO_ERR_NOT_SUPPORTED;
  return guard(self, "graph_begin", [&](Instance& in) {
    if (in.capturing) fail(OSLO_ERR_INVALID_ARGUMENT, "a graph is already being recorded");
    if (in.graph_stage == nullptr) {
      check_cuda(
          cudaMallocHost(reinterpret_cast<void**>(&in.graph_stage), Instance::kGraphStageBytes),
          "cudaMallocHost (graph staging)");
      check_cuda(cudaEventCreateWithFlags(&in.graph_done, cudaEventDisableTiming),
                 "cudaEventCreate");
    } else {
      // The previous graph may still read the staging this one overwrites.
      check_cuda(cudaEventSynchronize(in.graph_done), "cudaEventSynchronize");
    }
    in.graph_stage_used = 0;
    // Relaxed: the caching allocator may still call cudaMalloc while recording.
    check_cuda(cudaStreamBeginCapture(in.stream, cudaStreamCaptureModeRelaxed),
               "cudaStreamBeginCapture");
    in.capturing = true;
  });
}

oslo_status graph_end(void* self, int launch) {
  return guard(self, "graph_end", [&](Instance& in) {
    if (!in.capturing) fail(OSLO_ERR_INVALID_ARGUMENT, "no graph is being recorded");
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(in.stream, &g);
    in.capturing = false;
    struct Drop {
      cudaGraph_t g;
      ~Drop() {
        if (g) (void)cudaGraphDestroy(g);
      }
    } drop{g};
    if (e != cudaSuccess || g == nullptr) {
      (void)cudaGetLastError();
      if (!launch) return;
      fail(OSLO_ERR_INTERNAL, std::string("recording the step failed: ") + cudaGetErrorString(e));
    }
    if (!launch) return;
    if (in.graph_exec) {
      // Same topology, other arguments (a longer cache, other buffers): the
      // executable is updated in place, far cheaper than a new one.
      cudaGraphExecUpdateResultInfo info{};
      if (cudaGraphExecUpdate(in.graph_exec, g, &info) != cudaSuccess) {
        (void)cudaGetLastError();
        (void)cudaGraphExecDestroy(in.graph_exec);
        in.graph_exec = nullptr;
      } else if (in.profile) {
        ++in.prof["(graph updated)"].calls;
      }
    }
    if (!in.graph_exec) {
      check_cuda(cudaGraphInstantiate(&in.graph_exec, g, 0), "cudaGraphInstantiate");
      if (in.profile) ++in.prof["(graph instantiated)"].calls;
    }
    check_cuda(cudaGraphLaunch(in.graph_exec, in.stream), "cudaGraphLaunch");
    check_cuda(cudaEventRecord(in.graph_done, in.stream), "cudaEventRecord");
  });
}

}  // namespace oslo_cuda
