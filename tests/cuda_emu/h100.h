/* The H100 SXM model of the emulated GPU's profiler (h100.cc, docs/cuda.md "The profiler"):
 * counts in, predicted seconds out. Test infrastructure only. */
#ifndef ZS_EMU_H100_H
#define ZS_EMU_H100_H

#include "emu_profile.h"

namespace zs_emu {

enum GemmMath { GEMM_FP32, GEMM_TF32, GEMM_BF16 };

/* Fill r's t_* terms, predicted and bound from its counts and declared cost. */
void h100_predict(zs_emu_record *r);
/* A cuBLAS GEMM of batch products of m x n x k in math, moving bytes at least: its record
 * (name, FLOPs, terms, predicted time). */
void h100_gemm(zs_emu_record *r, int m, int n, int k, int batch, GemmMath math, double bytes,
               bool ta, bool tb);
/* A device-to-device copy or memset of bytes (read + written). */
void h100_memory_op(zs_emu_record *r, const char *name, double bytes);
/* A host <-> device copy of bytes over PCIe (cudaMemcpy*). */
void h100_host_copy(zs_emu_record *r, const char *name, double bytes);

} // namespace zs_emu

#endif
