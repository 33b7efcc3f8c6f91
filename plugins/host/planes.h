/*
 * planes.h -- [N, C, H, W] operands of any strides (NCHW, channels_last, sliced) as blocks
 * of whole planes in float scratch: what pooling (pool2d.c, pool3d.c) and upsampling (upsample.c)
 * share. A kernel cuts the N x C planes into tasks of `cb` channels of one sample, reads
 * a task's planes into a contiguous float [cb][H][W] block (half types widened), computes
 * there and writes the result block back through the output's strides and dtype. Also the
 * average pooling options both pooling files parse.
 */
#ifndef HOST_PLANES_H
#define HOST_PLANES_H

#include "host.h"

/* A 3-d ([C, H, W], one sample) or 4-d operand as N, C, H, W with element strides; a
 * volume operand (plane_operand_of3: [C, D, H, W] or [N, C, D, H, W]) also has a depth d
 * (stride sd), and its planes are [d][h][w] volumes (d = 1, sd = 0 for a 2-d operand). */
typedef struct {
  const ral_tensor* t;
  int64_t n, c, h, w;
  int64_t sn, sc, sh, sw;
  int64_t d, sd;
} plane_operand;

/*! Fills p from t (3-d or 4-d); 0 when t has another rank. */
HOST_HIDDEN int plane_operand_of(plane_operand* p, const ral_tensor* t);
/*! Fills p from a volume operand t (4-d [C, D, H, W] or 5-d); 0 when t has another rank. */
HOST_HIDDEN int plane_operand_of3(plane_operand* p, const ral_tensor* t);
/*! Reads channels [c0, c0 + cb) of sample n into dst[cb][d][h][w] (float). */
HOST_HIDDEN void plane_load(const plane_operand* p, int64_t n, int64_t c0, int64_t cb, float* dst);
/*! Writes src[cb][h][w] to channels [c0, c0 + cb) of sample n. */
HOST_HIDDEN void plane_store(const plane_operand* p, int64_t n, int64_t c0, int64_t cb, const float* src);

/*! One task's work: src is the block of [cb][src h][src w] read from channels
 *  [c0, c0 + cb) of sample n, dst the [cb][dst h][dst w] block written back after it
 *  (zeroed first when the run accumulates). */
typedef void (*plane_body)(void* job, int64_t n, int64_t c0, int64_t cb, const float* src, float* dst);

typedef struct {
  const plane_operand *src, *dst; /* of one N and C */
  plane_body body;
  void* job;
  int accumulate; /* dst starts at zero (a backward that scatters) */
  int64_t cb, blocks;
  int failed; /* out of memory for a block */
} plane_run;

/*! Runs r->body over every block of planes on the pool; 0 when a block's scratch could not
 *  be allocated. */
HOST_HIDDEN int plane_run_all(plane_run* r);

/*! avg_pool2d/avg_pool3d's count_include_pad (scalar 4) and divisor_override (scalar 5; 0:
 *  none); a zero divisor fails the call, as CPU's does. */
HOST_HIDDEN ral_status plane_avg_options(const ral_kernel_call* c, int* count_include_pad, int64_t* divisor);

#endif /* HOST_PLANES_H */
