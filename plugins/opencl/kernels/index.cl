/* index.cl -- embedding, gather/scatter/index_select and layout kernels (tril/triu,
 * constant padding, slice_backward). Values move as float or long per g.cfl, and as double
 * when either side is float64 (through float, tril and padding rounded float64 data). */

inline void move_elem(gbuf dst, long ed, int dtd, gcbuf src, long es, int dts, int cfl) {
#ifdef OCL_HAS_FP64
  if (dtd == DT_F64 || dts == DT_F64) {
    st_d(dst, ed, dtd, ld_d(src, es, dts));
    return;
  }
#endif
  if (cfl)
    st_f(dst, ed, dtd, ld_f(src, es, dts));
  else
    st_i(dst, ed, dtd, ld_i(src, es, dts));
}

/* The fill value of positions outside the input: for a float64 output li[3] holds the
 * double's bits (the host side stores them so), else lf[1] (float) or li[3] (integer). */
inline void put_value(gbuf dst, long ed, const ocl_geom* g) {
#ifdef OCL_HAS_FP64
  if (g->dt[0] == DT_F64) {
    st_d(dst, ed, DT_F64, as_double(g->li[3]));
    return;
  }
#endif
  if (g->cfl)
    st_f(dst, ed, g->dt[0], g->lf[1]);
  else
    st_i(dst, ed, g->dt[0], g->li[3]);
}

/* out[r, j] = w[idx[r], j]; flags = index dtype, li1 = rows of w; op = element size (4:
 * float32, 2: float16/bfloat16, moved as 16-bit words: a row lookup is exact in any type). */
__kernel void embedding_fwd(gbuf out, gcbuf w, gcbuf idx, ocl_rows g, __global int* err) {
  long i = get_global_id(0);
  if (i >= g.rows * g.len) return;
  long r = i / g.len, j = i % g.len;
  long v = ld_i(idx, g.off[2] + r, g.flags);
  int ok = v >= 0 && v < g.li1;
  if (!ok) index_fault(err, OCL_SITE_EMBEDDING, v, 0, g.li1);
  long from = g.off[1] + (ok ? v : 0) * g.len + j;
  if (g.op == 2)
    ((__global ushort*)out)[g.off[0] + i] = ok ? ((__global const ushort*)w)[from] : 0;
  else
    ((__global float*)out)[g.off[0] + i] = ok ? ((__global const float*)w)[from] : 0.0f;
}

/* One work-item per column j: gw[idx[r], j] += go[r, j] over all rows in order, so the
 * result is deterministic without atomics. li0 padding_idx; li1 rows of gw; op: index
 * dtype; flags 1: scale_grad_by_freq. */
__kernel void embedding_bwd(__global float* gw, __global const float* go, gcbuf idx, ocl_rows g,
                            __global int* err) {
  long j = get_global_id(0);
  if (j >= g.len) return;
  for (long r = 0; r < g.rows; r++) {
    long v = ld_i(idx, g.off[2] + r, g.op);
    if (v == g.li0) continue;
    if (v < 0 || v >= g.li1) {
      index_fault(err, OCL_SITE_EMBEDDING_BACKWARD, v, 0, g.li1);
      continue;
    }
    float scale = 1.0f;
    if (g.flags & 1) {
      long cnt = 0;
      for (long q = 0; q < g.rows; q++) cnt += ld_i(idx, g.off[2] + q, g.op) == v;
      scale = 1.0f / (float)cnt;
    }
    gw[g.off[0] + v * g.len + j] += go[g.off[1] + r * g.len + j] * scale;
  }
}

/* out[c] = self[c with c[dim] = index[c]]; iteration over index's shape; li1 = size of
 * self along dim. */
__kernel void gather_k(gbuf out, gcbuf self, gcbuf index, ocl_geom g, __global int* err) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  long c[OCL_MAXR];
  geom_coords(&g, i, c);
  long eo = g.off[0], es = g.off[1], ei = g.off[2];
  for (int d = 0; d < g.ndim; d++) {
    eo += c[d] * g.st[0][d];
    ei += c[d] * g.st[2][d];
    if (d != g.li[0]) es += c[d] * g.st[1][d];
  }
  long k = ld_i(index, ei, g.dt[2]);
  if (k < 0 || k >= g.li[1]) {
    index_fault(err, OCL_SITE_GATHER, k, g.li[0], g.li[1]);
    return;
  }
  es += k * g.st[1][g.li[0]];
  move_elem(out, eo, g.dt[0], self, es, g.dt[1], g.cfl);
}

/* out[c] = self[c with c[dim] = index[c[dim]]]; iteration over out's shape; li1 = size
 * of self along dim. */
__kernel void index_select_k(gbuf out, gcbuf self, gcbuf index, ocl_geom g, __global int* err) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  long c[OCL_MAXR];
  geom_coords(&g, i, c);
  long eo = g.off[0], es = g.off[1];
  for (int d = 0; d < g.ndim; d++) {
    eo += c[d] * g.st[0][d];
    if (d != g.li[0]) es += c[d] * g.st[1][d];
  }
  long k = ld_i(index, g.off[2] + c[g.li[0]] * g.st[2][0], g.dt[2]);
  if (k < 0 || k >= g.li[1]) {
    index_fault(err, OCL_SITE_INDEX_SELECT, k, g.li[0], g.li[1]);
    return;
  }
  es += k * g.st[1][g.li[0]];
  move_elem(out, eo, g.dt[0], self, es, g.dt[1], g.cfl);
}

/* One work-item per line along `dim` of index: out[.., index[..j..], ..] (+)= src[..j..],
 * j in order, so duplicate indices resolve deterministically. op 1: add; li2 = size of
 * out along dim. */
__kernel void scatter_k(gbuf out, gcbuf index, gcbuf src, ocl_geom g, __global int* err) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  long c[OCL_MAXR];
  geom_coords(&g, i, c);
  int dim = (int)g.li[0];
  long eo = g.off[0], ei = g.off[1], es = g.off[2];
  for (int d = 0; d < g.ndim; d++) {
    if (d == dim) continue;
    eo += c[d] * g.st[0][d];
    ei += c[d] * g.st[1][d];
    es += c[d] * g.st[2][d];
  }
  for (long j = 0; j < g.li[1]; j++) {
    long k = ld_i(index, ei + j * g.st[1][dim], g.dt[1]);
    if (k < 0 || k >= g.li[2]) {
      index_fault(err, OCL_SITE_SCATTER + g.op, k, dim, g.li[2]);
      continue;
    }
    long at = eo + k * g.st[0][dim], from = es + j * g.st[2][dim];
    if (g.op == 0) {
      move_elem(out, at, g.dt[0], src, from, g.dt[2], g.cfl);
    } else if (g.cfl) {
      st_f(out, at, g.dt[0], ld_f(out, at, g.dt[0]) + ld_f(src, from, g.dt[2]));
    } else {
      st_i(out, at, g.dt[0], ld_i(out, at, g.dt[0]) + ld_i(src, from, g.dt[2]));
    }
  }
}

/* tril (op 0) / triu (op 1) of contiguous [.., R, C]: li = {R, C, diagonal}. */
__kernel void tri_k(gbuf out, gcbuf in, ocl_geom g) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  long col = i % g.li[1], row = (i / g.li[1]) % g.li[0];
  int keep = g.op == 0 ? col - row <= g.li[2] : col - row >= g.li[2];
  if (keep)
    move_elem(out, g.off[0] + i, g.dt[0], in, g.off[1] + i, g.dt[1], g.cfl);
  else
    put_value(out, g.off[0] + i, &g);
}

/* constant_pad_nd: st[2] = padding before each dim (may be negative), st[3] = input sizes.
 * Outside positions get the value in lf[1] / li[3] (zero for the other kernels). */
__kernel void pad_k(gbuf out, gcbuf in, ocl_geom g) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  long c[OCL_MAXR];
  geom_coords(&g, i, c);
  long eo = g.off[0], ei = g.off[1];
  int inside = 1;
  for (int d = 0; d < g.ndim; d++) {
    long s = c[d] - g.st[2][d];
    inside &= s >= 0 && s < g.st[3][d];
    eo += c[d] * g.st[0][d];
    ei += s * g.st[1][d];
  }
  if (inside)
    move_elem(out, eo, g.dt[0], in, ei, g.dt[1], g.cfl);
  else
    put_value(out, eo, &g);
}

/* slice_backward: zeros except out[.., start + k*step, ..] = grad[.., k, ..];
 * li = {dim, start, end}, flags = step. */
__kernel void slice_bwd_k(gbuf out, gcbuf grad, ocl_geom g) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  long c[OCL_MAXR];
  geom_coords(&g, i, c);
  int dim = (int)g.li[0];
  long eo = g.off[0], eg = g.off[1];
  long s = c[dim] - g.li[1];
  int inside = s >= 0 && c[dim] < g.li[2] && s % g.flags == 0;
  for (int d = 0; d < g.ndim; d++) {
    eo += c[d] * g.st[0][d];
    eg += (d == dim ? s / g.flags : c[d]) * g.st[1][d];
  }
  if (inside)
    move_elem(out, eo, g.dt[0], grad, eg, g.dt[1], g.cfl);
  else
    put_value(out, eo, &g);
}

/* CPU form of tri_k for float32: a chunk of rows per work-item (li[0] rows x li[1] columns
 * per matrix); a row is a straight copy up to (or from) its diagonal and zeros elsewhere. */
__kernel void tri_c(__global float* out, __global const float* in, ocl_geom g, long chunk) {
  long R = g.li[0], C = g.li[1], rows = g.n / (C > 0 ? C : 1);
  long r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long row = r % R;
    __global float* o = out + g.off[0] + r * C;
    __global const float* x = in + g.off[1] + r * C;
    /* kept columns: tril j <= row + k; triu j >= row + k */
    long lo = g.op == 0 ? 0 : clamp(row + g.li[2], 0L, C), hi = g.op == 0 ? clamp(row + g.li[2] + 1, 0L, C) : C;
    for (long j = 0; j < lo; j++) o[j] = 0.0f;
    for (long j = lo; j < hi; j++) o[j] = x[j];
    for (long j = hi; j < C; j++) o[j] = 0.0f;
  }
}
