/* random.cl -- Philox4x32-10 keyed by the [seed, offset] the runtime passes: element i
 * (row-major position) uses counter offset + i under key seed, exactly as the host
 * plugin does, so both devices draw the same numbers (bit-exact where fp64 exists). */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

inline uint4 philox(ulong counter, ulong seed) {
  uint c0 = (uint)counter, c1 = (uint)(counter >> 32), c2 = 0, c3 = 0;
  uint k0 = (uint)seed, k1 = (uint)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    uint hi0 = mul_hi(PHILOX_M0, c0), lo0 = PHILOX_M0 * c0;
    uint hi1 = mul_hi(PHILOX_M1, c2), lo1 = PHILOX_M1 * c2;
    uint n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c1 = lo1;
    c3 = lo0;
    c0 = n0;
    c2 = n2;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  return (uint4)(c0, c1, c2, c3);
}

#ifdef OCL_HAS_FP64
typedef double real;
#define REAL_2PI 6.283185307179586
inline real unit(uint a, uint b) { return (double)((((ulong)a << 32) | b) >> 11) * 0x1.0p-53; }
inline real as_real(long bits) { return as_double(bits); }
#else
typedef float real;
#define REAL_2PI 6.2831853f
inline real unit(uint a, uint b) { return (float)(a >> 8) * 0x1.0p-24f; }
inline real as_real(long bits) { return (float)as_double(bits); }
#endif

/* li = {seed, offset, a bits, b bits} (a, b as IEEE doubles); op = RNG_*. */
__kernel void random_k(gbuf out, ocl_geom g) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  long e[1];
  geom_offsets(&g, i, e, 1);
  uint4 r = philox((ulong)g.li[1] + (ulong)i, (ulong)g.li[0]);
  real u = unit(r.x, r.y), a = as_real(g.li[2]), b = as_real(g.li[3]), v;
  if (g.op == RNG_UNIFORM) {
    v = a + (b - a) * u;
    if (g.dt[0] != DT_F64 && v >= b) v = nextafter((float)b, (float)a);
  } else if (g.op == RNG_NORMAL) {
    real u2 = unit(r.z, r.w);
    v = a + b * sqrt(-2 * log(1 - u)) * cos(REAL_2PI * u2);
  } else {
    v = u < a ? 1 : 0;
  }
#ifdef OCL_HAS_FP64
  if (g.dt[0] == DT_F64) {
    ((__global double*)out)[e[0]] = v;
    return;
  }
#endif
  st_f(out, e[0], g.dt[0], (float)v);
}
