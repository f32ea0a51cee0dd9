/* Vendor renames so one CUDA-flavoured source builds for NVIDIA (nvcc) and AMD (hipcc): under
 * __HIP_PLATFORM_AMD__ the cuda* names used in backends/gpu map onto their hip* twins. */
#ifndef PL_BACKENDS_GPU_GPU_VENDOR_H
#define PL_BACKENDS_GPU_GPU_VENDOR_H

/* clang in HIP mode defines __HIP__; the build also passes -D__HIP_PLATFORM_AMD__ everywhere */
#if defined(__HIP__) && !defined(__HIP_PLATFORM_AMD__)
#define __HIP_PLATFORM_AMD__ 1
#endif

#if defined(__HIP_PLATFORM_AMD__)

#if defined(__HIPCC__)
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#else
#include <hip/hip_runtime_api.h>
#endif

#define PL_GPU_BACKEND "hip"

typedef hipDeviceProp_t pl_gpu_prop_t;
#define cudaError_t hipError_t
#define cudaErrorInsufficientDriver hipErrorInsufficientDriver
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaErrorNoDevice hipErrorNoDevice
#define cudaEventCreate hipEventCreate
#define cudaEventDestroy hipEventDestroy
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEvent_t hipEvent_t
#define cudaDevAttrWarpSize hipDeviceAttributeWarpSize
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDeviceGetPCIBusId hipDeviceGetPCIBusId
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaFree hipFree
#define cudaFreeHost hipHostFree
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define cudaFuncSetAttribute hipFuncSetAttribute
#define cudaGetDevice hipGetDevice
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaGraphDestroy hipGraphDestroy
#define cudaGraphExecDestroy hipGraphExecDestroy
#define cudaGraphExec_t hipGraphExec_t
#define cudaGraphInstantiateWithFlags hipGraphInstantiateWithFlags
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraph_t hipGraph_t
#define cudaMalloc hipMalloc
#define cudaMallocHost(p, n) hipHostMalloc((p), (n), hipHostMallocDefault)
#define cudaMemGetInfo hipMemGetInfo
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemset hipMemset
#define cudaMemsetAsync hipMemsetAsync
#define cudaPeekAtLastError hipPeekAtLastError
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaSetDevice hipSetDevice
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStream_t hipStream_t
#define cudaSuccess hipSuccess

/* Wavefront size is a per-target property on AMD: 64 on CDNA (gfx9xx), 32 on RDNA (gfx10+).
 * Only device code may use PL_WARP_SIZE; the host pass sees the conservative 64. */
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define PL_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define PL_WARP_SIZE 64
#endif
#define PL_SHFL_XOR(v, m) __shfl_xor((v), (m), PL_WARP_SIZE)

#else /* NVIDIA */

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#else
#include <cuda_runtime_api.h>
#endif

#define PL_GPU_BACKEND "cuda"
typedef struct cudaDeviceProp pl_gpu_prop_t; /* a plain tag in C, a class in C++ */
#define PL_WARP_SIZE 32
#define PL_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m), PL_WARP_SIZE)

#endif

/* Host-side block sizes are multiples of this so they hold whole warps on every target. */
#define PL_GPU_MAX_WARP 64

#endif
