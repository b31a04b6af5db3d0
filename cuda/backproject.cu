// Voxel-driven cone-beam FDK backprojection of a slab of slices.
//
// Computes, for every voxel centre (x, y, z) of the slab and every angle b,
// exactly what gpumr/ct/backproject.py states (and its CPU backprojector
// computes):
//     t = x cos b + y sin b,  s = -x sin b + y cos b,  L = DSO - t
//     col = s DSD / L / du + cu,  row = z DSD / L / dv + cv   (+1: padded border)
//     vol += (DSO / L)^2 * bilinear(q_b, row, col)
// with projections padded by a one-pixel zero border, so that clamping the
// coordinates to the padded range replaces every branch.
//
// The angles' cosines and sines are read from global memory by angle (the same
// address for every thread), so that no launch waits for constants to be replaced.
//
// Each thread owns one (x, y) column and ZB consecutive slices: the division,
// the column and the weight are computed once per angle and reused for the
// ZB slices, whose sums stay in registers across the thread's angles.
// Interpolation is explicit float32, not the texture unit's 8-bit weights;
// built with fused multiply-adds (and the host emulation with contraction),
// the GPU agrees with the CPU to within 1e-5 (relative L2), which the
// device's self-check proves before any slab is trusted.
//
// Cost per voxel update (bench/gpu_model.py reads it from the SASS): one
// 32-bit index per gather (the row below has its own base pointer), no
// integer clamps (coordinates clamp to just under the last padded cell), FMA
// in the interpolation; __launch_bounds__ keeps 6 blocks of 256 threads per SM.
//
// The launch's angles may be cut into `split` parts along grid z (grid z =
// slice blocks x split), so that a slab's launch fills whole waves of blocks;
// the parts' sums meet in `out` through atomic adds (their order varies from
// run to run by float32 rounding only).

#ifndef ZB
#define ZB 8
#endif
// Angles per launch (the driver cuts more into launches of this many).
#define MAX_ANGLES 2048

extern "C" __global__ void __launch_bounds__(256, 6) backproject_slab(
    const float* __restrict__ proj,   // [n_angles, nv + 2, nu + 2], this launch's angles
    const float2* __restrict__ trig,  // [n_angles] (cos b, sin b), this launch's angles
    int n_angles, int nv, int nu,
    const float* __restrict__ zs, const float* __restrict__ ys, const float* __restrict__ xs,
    int nz, int ny, int nx,
    float dso, float dsd, float cu, float cv, float inv_du, float inv_dv,
    int split,                        // the angles cut into this many parts (grid z = slice blocks x split)
    float* __restrict__ out)          // [nz, ny, nx], accumulated
{
    const int ix = blockIdx.x * blockDim.x + threadIdx.x;
    const int iy = blockIdx.y * blockDim.y + threadIdx.y;
    const int zblocks = (nz + ZB - 1) / ZB;
    const int part = blockIdx.z / zblocks;
    const int z0 = (blockIdx.z - part * zblocks) * ZB;
    if (ix >= nx || iy >= ny) return;
    const int per = (n_angles + split - 1) / split;
    const int a0 = part * per, a1 = min(n_angles, a0 + per);

    const int width = nu + 2;
    const int plane = width * (nv + 2);  // the driver keeps a launch's projections under 2^31 elements
    const float x = xs[ix], y = ys[iy];
    // Coordinates are clamped to just under the last padded row and column: the cell
    // (ir, ic) and its right and lower neighbours then lie inside the padded projection
    // with no integer clamp (the border is zero, so what the last ulp weighs is nothing).
    const float col_max = nextafterf((float)(nu + 1), 0.0f), row_max = nextafterf((float)(nv + 1), 0.0f);
    const float cu1 = cu + 1.0f, cv1 = cv + 1.0f;
    // Slices are evenly spaced: slice z0 + k sits at zA + k dz (to float32 rounding of the axis),
    // so a row is one FMA from the angle's first row and step, and no slice array is kept.
    const float zA = zs[min(z0, nz - 1)];
    const float dz = nz > 1 ? (zs[nz - 1] - zs[0]) / (float)(nz - 1) : 0.0f;
    float acc[ZB];
#pragma unroll
    for (int k = 0; k < ZB; ++k) acc[k] = 0.0f;
    const float* lower = proj + width;  // the row below: its own base, so each gather is one address
    int base = a0 * plane;               // this angle's first element (32-bit indexing)
    for (int a = a0; a < a1; ++a, base += plane) {
        const float2 cs = __ldg(trig + a);  // the same for every thread: one request per warp
        const float c = cs.x, s = cs.y;
        const float inv = 1.0f / (dso - (x * c + y * s));
        const float mag = dsd * inv;
        const float col = fminf(fmaxf((y * c - x * s) * (mag * inv_du) + cu1, 0.0f), col_max);
        const int ic = (int)col;
        const float fc = col - (float)ic;
        const float w = dso * inv;
        const float w2 = w * w;
        const float rmag = mag * inv_dv;
        const float row0 = zA * rmag + cv1, drow = dz * rmag;
        const int cell = base + ic;
#pragma unroll
        for (int k = 0; k < ZB; ++k) {
            const float row = fminf(fmaxf((float)k * drow + row0, 0.0f), row_max);
            const int ir = (int)row;
            const float fr = row - (float)ir;
            const int e = cell + ir * width;
            const float p00 = __ldg(proj + e), p01 = __ldg(proj + e + 1);
            const float p10 = __ldg(lower + e), p11 = __ldg(lower + e + 1);
            const float top = p00 + fc * (p01 - p00);
            const float bot = p10 + fc * (p11 - p10);
            acc[k] += w2 * (top + fr * (bot - top));
        }
    }
#pragma unroll
    for (int k = 0; k < ZB; ++k)
        if (z0 + k < nz) {
            float* o = out + ((size_t)(z0 + k) * ny + iy) * nx + ix;
            if (split == 1) *o += acc[k]; else atomicAdd(o, acc[k]);
        }
}
