/* common.cl -- typed loads/stores by ral dtype code and N-d index decoding, prepended
 * (after ral_half.h and shared.h) to every kernel program. bfloat16 converts through
 * ral_half.h's ral_bf2f / ral_f2bf (c10's rounding), the same code as the host plugin's. */
#ifdef OCL_HAS_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

typedef __global char* gbuf;
typedef __global const char* gcbuf;

/* Element e of a buffer holding `dt` values, as float. */
inline float ld_f(gcbuf p, long e, int dt) {
  switch (dt) {
    case DT_F32: return ((__global const float*)p)[e];
    case DT_I64: return (float)((__global const long*)p)[e];
    case DT_I32: return (float)((__global const int*)p)[e];
    case DT_I16: return (float)((__global const short*)p)[e];
    case DT_I8: return (float)((__global const char*)p)[e];
    case DT_F16: return vload_half(e, (__global const half*)p);
    case DT_BF16: return ral_bf2f(((__global const ushort*)p)[e]);
#ifdef OCL_HAS_FP64
    case DT_F64: return (float)((__global const double*)p)[e];
#endif
    default: return (float)((__global const uchar*)p)[e];
  }
}

/* Element e as long (exact for every integer dtype). */
inline long ld_i(gcbuf p, long e, int dt) {
  switch (dt) {
    case DT_I64: return ((__global const long*)p)[e];
    case DT_I32: return ((__global const int*)p)[e];
    case DT_I16: return ((__global const short*)p)[e];
    case DT_I8: return ((__global const char*)p)[e];
    case DT_F32: return (long)((__global const float*)p)[e];
    case DT_F16: return (long)vload_half(e, (__global const half*)p);
    case DT_BF16: return (long)ral_bf2f(((__global const ushort*)p)[e]);
#ifdef OCL_HAS_FP64
    case DT_F64: return (long)((__global const double*)p)[e];
#endif
    default: return ((__global const uchar*)p)[e];
  }
}

inline void st_f(gbuf p, long e, int dt, float v) {
  switch (dt) {
    case DT_F32: ((__global float*)p)[e] = v; break;
    case DT_I64: ((__global long*)p)[e] = (long)v; break;
    case DT_I32: ((__global int*)p)[e] = (int)v; break;
    case DT_I16: ((__global short*)p)[e] = (short)v; break;
    case DT_I8: ((__global char*)p)[e] = (char)v; break;
    case DT_BOOL: ((__global uchar*)p)[e] = v != 0.0f; break;
    case DT_F16: vstore_half(v, e, (__global half*)p); break;
    case DT_BF16: ((__global ushort*)p)[e] = ral_f2bf(v); break;
#ifdef OCL_HAS_FP64
    case DT_F64: ((__global double*)p)[e] = v; break;
#endif
    default: ((__global uchar*)p)[e] = (uchar)v; break;
  }
}

inline void st_i(gbuf p, long e, int dt, long v) {
  switch (dt) {
    case DT_I64: ((__global long*)p)[e] = v; break;
    case DT_I32: ((__global int*)p)[e] = (int)v; break;
    case DT_I16: ((__global short*)p)[e] = (short)v; break;
    case DT_I8: ((__global char*)p)[e] = (char)v; break;
    case DT_BOOL: ((__global uchar*)p)[e] = v != 0; break;
    case DT_F32: ((__global float*)p)[e] = (float)v; break;
    case DT_F16: vstore_half((float)v, e, (__global half*)p); break;
    case DT_BF16: ((__global ushort*)p)[e] = ral_f2bf((float)v); break;
#ifdef OCL_HAS_FP64
    case DT_F64: ((__global double*)p)[e] = (double)v; break;
#endif
    default: ((__global uchar*)p)[e] = (uchar)v; break;
  }
}

#ifdef OCL_HAS_FP64
/* Element e as double: exact for float64 and for every integer below 2^53. */
inline double ld_d(gcbuf p, long e, int dt) {
  switch (dt) {
    case DT_F64: return ((__global const double*)p)[e];
    case DT_F32: case DT_F16: case DT_BF16: return (double)ld_f(p, e, dt);
    /* Integers through long: int32 values past 2^24 are not exact in float. */
    default: return (double)ld_i(p, e, dt);
  }
}

inline void st_d(gbuf p, long e, int dt, double v) {
  switch (dt) {
    case DT_F64: ((__global double*)p)[e] = v; break;
    case DT_F32: case DT_F16: case DT_BF16: st_f(p, e, dt, (float)v); break;
    case DT_BOOL: ((__global uchar*)p)[e] = v != 0.0; break;
    default: st_i(p, e, dt, (long)v); break;
  }
}
#endif

/* Compensated (Neumaier) summation: hi + lo carries a running sum to about twice float32's
 * precision, so a long or badly conditioned float32 sum (sum, mean, var, softmax, norms,
 * losses) keeps float32 accuracy however the work is split. (.x = hi, .y = lo) */
inline float2 cs_add(float2 a, float v) {
  float t = a.x + v;
  float e = fabs(a.x) >= fabs(v) ? (a.x - t) + v : (v - t) + a.x;
  return (float2)(t, a.y + e);
}

inline float2 cs_merge(float2 a, float2 b) {
  float2 r = cs_add(a, b.x);
  r.y += b.y;
  return r;
}

/* The sum's value; an infinite or NaN hi is the answer (lo is NaN then: inf - inf). */
inline float cs_val(float2 a) {
  return (as_uint(a.x) & 0x7f800000u) == 0x7f800000u ? a.x : a.x + a.y;
}

/* cs_add on 16 lanes at once (each lane its own compensated sum). */
inline void cs_add16(float16* hi, float16* lo, float16 v) {
  float16 t = *hi + v;
  float16 e = select((v - t) + *hi, (*hi - t) + v, isgreaterequal(fabs(*hi), fabs(v)));
  *hi = t;
  *lo += e;
}

/* The 16 lanes of (hi, lo) merged into one compensated sum (lane order). */
inline float2 cs_lanes16(float16 hi, float16 lo) {
  float h[16], l[16];
  vstore16(hi, 0, h);
  vstore16(lo, 0, l);
  float2 r = (float2)(h[0], l[0]);
  for (int k = 1; k < 16; k++) r = cs_merge(r, (float2)(h[k], l[k]));
  return r;
}

/* Element offsets of operands 0..nt-1 at linear position i of an ocl_geom. */
inline void geom_offsets(const ocl_geom* g, long i, long* e, int nt) {
  for (int k = 0; k < nt; k++) e[k] = g->off[k];
  if (g->ndim == 1) {
    for (int k = 0; k < nt; k++) e[k] += i * g->st[k][0];
    return;
  }
  for (int d = g->ndim - 1; d >= 0; d--) {
    long c = i % g->size[d];
    i /= g->size[d];
    for (int k = 0; k < nt; k++) e[k] += c * g->st[k][d];
  }
}

/* Coordinates of linear position i over g->size (row-major). */
inline void geom_coords(const ocl_geom* g, long i, long* c) {
  for (int d = g->ndim - 1; d >= 0; d--) {
    c[d] = i % g->size[d];
    i /= g->size[d];
  }
}

/* Record the first out-of-range index of a launch in the stream's fault record (site,
 * index, dim, size; read by the host at the next synchronization). The caller skips the
 * access, so no kernel reads or writes outside its buffers whatever the indices. */
inline void index_fault(__global int* err, int site, long v, long dim, long size) {
  if (atomic_cmpxchg(err, 0, site) == 0) {
    err[1] = (int)(v & 0xffffffffL);
    err[2] = (int)(v >> 32);
    err[3] = (int)dim;
    err[4] = (int)(size & 0xffffffffL);
    err[5] = (int)(size >> 32);
  }
}

/* CPU-shaped launches (ocl_cpu_chunks): work-item i covers the linear positions
 * [i * chunk, min((i + 1) * chunk, n)), walked as runs along the innermost dim, so the N-d
 * index is decoded once per work-item instead of once per element. */
inline void geom_start(const ocl_geom* g, long i, long* c, long* e, int nt) {
  for (int k = 0; k < nt; k++) e[k] = g->off[k];
  for (int d = g->ndim - 1; d >= 0; d--) {
    c[d] = i % g->size[d];
    i /= g->size[d];
    for (int k = 0; k < nt; k++) e[k] += c[d] * g->st[k][d];
  }
}

/* Advance c/e by `len` positions along the innermost dim, carrying into outer dims. */
inline void geom_advance(const ocl_geom* g, long len, long* c, long* e, int nt) {
  int d = g->ndim - 1;
  c[d] += len;
  for (int k = 0; k < nt; k++) e[k] += len * g->st[k][d];
  while (d > 0 && c[d] >= g->size[d]) {
    for (int k = 0; k < nt; k++) e[k] += g->st[k][d - 1] - c[d] * g->st[k][d];
    c[d] = 0;
    c[--d]++;
  }
}

/* Walk the chunk of this work-item: BODY sees j (0..run) and element offsets e[k] + j * s[k]. */
#define GEOM_CHUNK_WALK(g, chunk, NT, BODY)                                    \
  {                                                                            \
    long i0 = get_global_id(0) * (chunk), i1 = min(i0 + (chunk), (g).n);       \
    long c[OCL_MAXR], e[4], s[4];                                              \
    int last = (g).ndim - 1;                                                   \
    for (int k = 0; k < (NT); k++) s[k] = (g).st[k][last];                     \
    if (i0 < i1) geom_start(&(g), i0, c, e, (NT));                             \
    for (long i = i0; i < i1;) {                                               \
      long run = min((g).size[last] - c[last], i1 - i);                        \
      for (long j = 0; j < run; j++) BODY                                      \
      i += run;                                                                \
      if (i < i1) geom_advance(&(g), run, c, e, (NT));                         \
    }                                                                          \
  }
