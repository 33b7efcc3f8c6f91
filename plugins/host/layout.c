/*
 * layout.c -- kernels that place tensors inside others: cat, tril/triu, constant_pad_nd,
 * slice_backward. Each is a fill plus strided copies into views of the output, so they
 * inherit host_copy's threading and casts.
 */
#include "host.h"

/* v narrowed to [start, start + len) along dim. */
static void narrow(host_view* v, const ral_tensor* t, int dim, int64_t start, int64_t len) {
  host_view_of(v, t);
  v->t.byte_offset += (uint64_t)(start * t->strides[dim] * host_dtype_size(t->dtype));
  v->sizes[dim] = len;
}

/* cat(Tensor[] tensors, int dim): scalars [len(tensors), dim] */
ral_status host_cat(const ral_kernel_call* c) {
  const ral_tensor* out = host_out(c, 0);
  int64_t n = host_scalar_int(c, 0, c->n_inputs);
  if (c->n_outputs != 1 || n != c->n_inputs)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expected 1 output and %lld inputs", (long long)n);
  int dim = host_wrap_dim(host_scalar_int(c, 1, 0), out->ndim);
  if (dim < 0 || out->ndim == 0) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "bad dim");
  int64_t at = 0;
  for (int i = 0; i < c->n_inputs; i++) {
    const ral_tensor* x = host_in(c, i);
    if (host_numel(x) == 0 && x->ndim == 1) continue; /* legacy empty tensors are skipped */
    host_view v;
    if (x->ndim != out->ndim || at + x->sizes[dim] > out->sizes[dim])
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input %d does not fit the output", i);
    narrow(&v, out, dim, at, x->sizes[dim]);
    ral_status st = host_copy(&v.t, x);
    if (st != RAL_OK) return host_fail(c, st, "input %d: %s", i, host_last_error());
    at += x->sizes[dim];
  }
  return at == out->sizes[dim] ? RAL_OK
                               : host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "inputs do not fill the output");
}

/* tril/triu(self, diagonal): copy, then zero each row's excluded column range. */
static ral_status triangle(const ral_kernel_call* c, int upper) {
  ral_status st = host_check_arity(c, 1, 1, 0);
  const ral_tensor *out = host_out(c, 0), *x = host_in(c, 0);
  if (st != RAL_OK) return st;
  if (x->ndim < 2 || !host_same_shape(out, x))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expects a tensor of rank >= 2");
  if ((st = host_copy(out, x)) != RAL_OK) return host_fail(c, st, "%s", host_last_error());
  int64_t k = host_scalar_int(c, 0, 0), R = out->sizes[out->ndim - 2], C = out->sizes[out->ndim - 1];
  int64_t batch = R && C ? host_numel(out) / (R * C) : 0, es = host_dtype_size(out->dtype);
  for (int64_t b = 0; b < batch; b++) {
    int64_t boff = 0, rest = b;
    for (int d = out->ndim - 3; d >= 0; d--) {
      boff += (rest % out->sizes[d]) * out->strides[d];
      rest /= out->sizes[d];
    }
    for (int64_t i = 0; i < R; i++) {
      int64_t j0 = upper ? 0 : i + k + 1, j1 = upper ? i + k : C;
      j0 = j0 < 0 ? 0 : j0 > C ? C : j0;
      j1 = j1 < 0 ? 0 : j1 > C ? C : j1;
      if (j0 >= j1) continue;
      ral_tensor seg = {out->data,
                        out->byte_offset + (uint64_t)((boff + i * out->strides[out->ndim - 2] +
                                                       j0 * out->strides[out->ndim - 1]) * es),
                        out->dtype, 1, (int64_t[]){j1 - j0}, &out->strides[out->ndim - 1]};
      host_fill(&seg, 0, 0);
    }
  }
  return RAL_OK;
}

ral_status host_tril(const ral_kernel_call* c) { return triangle(c, 0); }
ral_status host_triu(const ral_kernel_call* c) { return triangle(c, 1); }

/* constant_pad_nd(self, pad, value): pad pairs start at the last dim; negative pads crop. */
ral_status host_constant_pad_nd(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 1, 1, 1);
  const ral_tensor *out = host_out(c, 0), *x = host_in(c, 0);
  if (st != RAL_OK) return st;
  int np;
  const int64_t* pad = host_scalar_list(c, 0, &np);
  double f = 0;
  int64_t i = 0;
  host_scalar_num(c, 1, &f, &i);
  if (np % 2 || np / 2 > x->ndim || out->ndim != x->ndim)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "pad has %d entries for rank %d", np, x->ndim);
  host_fill(out, f, i);
  host_view dst, src;
  host_view_of(&dst, out);
  host_view_of(&src, x);
  for (int k = 0; k < np / 2; k++) {
    int d = x->ndim - 1 - k;
    int64_t before = pad[2 * k], after = pad[2 * k + 1];
    if (out->sizes[d] != x->sizes[d] + before + after)
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "output size at dim %d does not match pad", d);
    int64_t skip = before < 0 ? -before : 0, len = x->sizes[d] - skip - (after < 0 ? -after : 0);
    if (len <= 0) return RAL_OK;
    int64_t at = before > 0 ? before : 0;
    dst.t.byte_offset += (uint64_t)(at * out->strides[d] * host_dtype_size(out->dtype));
    src.t.byte_offset += (uint64_t)(skip * x->strides[d] * host_dtype_size(x->dtype));
    dst.sizes[d] = src.sizes[d] = len;
  }
  st = host_copy(&dst.t, &src.t);
  return st == RAL_OK ? st : host_fail(c, st, "%s", host_last_error());
}

/* slice_backward(grad, input_sizes, dim, start, end, step): zeros with grad at the slice */
ral_status host_slice_backward(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 1, 1, 5);
  const ral_tensor *out = host_out(c, 0), *g = host_in(c, 0);
  if (st != RAL_OK) return st;
  int dim = host_wrap_dim(host_scalar_int(c, 1, 0), out->ndim);
  int64_t start = host_scalar_int(c, 2, 0), step = host_scalar_int(c, 4, 1);
  if (dim < 0 || step < 1 || g->ndim != out->ndim)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "bad dim, step or rank");
  int64_t n = out->sizes[dim];
  if (start < 0) start += n;
  start = start < 0 ? 0 : start > n ? n : start;
  int64_t len = g->sizes[dim];
  if (len > 0 && start + (len - 1) * step >= n)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "the slice does not fit input_sizes");
  host_fill(out, 0, 0);
  host_view v;
  narrow(&v, out, dim, start, len);
  v.strides[dim] *= step;
  st = host_copy(&v.t, g);
  return st == RAL_OK ? st : host_fail(c, st, "%s", host_last_error());
}
