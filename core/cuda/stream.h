// The stream the CUDA backend queues the calling thread's work on: the legacy default stream
// (0), except while the thread captures a CUDA graph (core/device_graph.h), when it is the
// capture's stream. Kernels (launch.cuh), cuBLAS (matmul.cu), CUB (index.cu), memsets and
// device-to-device copies (backend.cu) all take it from here, so a capture records them all
// and eager work stays on the legacy stream, ordered after everything queued before it.
#pragma once
#include "core/cuda/runtime.cuh"

namespace dark::cuda {

inline cudaStream_t& current_stream_slot() {
  thread_local cudaStream_t stream = nullptr;
  return stream;
}
inline cudaStream_t current_stream() { return current_stream_slot(); }

}  // namespace dark::cuda
