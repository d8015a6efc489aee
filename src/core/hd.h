/* ZS_HD marks a static inline function as callable from host and device code, so elementwise
 * math is written once and shared by the CPU backend and the CUDA kernels. */
#ifndef ZS_CORE_HD_H
#define ZS_CORE_HD_H
#ifdef __CUDACC__
#define ZS_HD __host__ __device__ __forceinline__
#elif defined(__cplusplus)
#define ZS_HD inline /* the emulated GPU's build of the .cu files (tests/cuda_emu) */
#else
#define ZS_HD inline
#endif
#endif
