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
// Each thread owns one (x, y) column and ZB consecutive slices: the division,
// the column and the weight are computed once per angle and reused for the
// ZB slices, whose sums stay in registers across all angles of the launch.
// Interpolation is explicit (exact float32), not the texture unit's 8-bit
// weights, so the GPU agrees with the CPU to float32 rounding.

#ifndef ZB
#define ZB 8
#endif
#define MAX_ANGLES 2048

__constant__ float2 c_trig[MAX_ANGLES];  // (cos b, sin b) of this launch's angles

extern "C" __global__ void backproject_slab(
    const float* __restrict__ proj,   // [n_angles, nv + 2, nu + 2], this launch's angles
    int n_angles, int nv, int nu,
    const float* __restrict__ zs, const float* __restrict__ ys, const float* __restrict__ xs,
    int nz, int ny, int nx,
    float dso, float dsd, float cu, float cv, float inv_du, float inv_dv,
    float* __restrict__ out)          // [nz, ny, nx], accumulated
{
    const int ix = blockIdx.x * blockDim.x + threadIdx.x;
    const int iy = blockIdx.y * blockDim.y + threadIdx.y;
    const int z0 = blockIdx.z * ZB;
    if (ix >= nx || iy >= ny) return;

    const int width = nu + 2;
    const size_t plane = (size_t)width * (nv + 2);
    const float x = xs[ix], y = ys[iy];
    const float col_max = (float)(nu + 1), row_max = (float)(nv + 1);
    float z[ZB], acc[ZB];
#pragma unroll
    for (int k = 0; k < ZB; ++k) {
        z[k] = (z0 + k < nz) ? zs[z0 + k] : 0.0f;
        acc[k] = 0.0f;
    }
    for (int a = 0; a < n_angles; ++a) {
        const float c = c_trig[a].x, s = c_trig[a].y;
        const float* p = proj + a * plane;
        const float inv = 1.0f / (dso - (x * c + y * s));
        const float mag = dsd * inv;
        const float col = fminf(fmaxf((-x * s + y * c) * mag * inv_du + cu + 1.0f, 0.0f), col_max);
        const int ic = min((int)col, nu);
        const float fc = col - (float)ic;
        const float w = dso * inv;
        const float w2 = w * w;
        const float rmag = mag * inv_dv;
#pragma unroll
        for (int k = 0; k < ZB; ++k) {
            const float row = fminf(fmaxf(z[k] * rmag + cv + 1.0f, 0.0f), row_max);
            const int ir = min((int)row, nv);
            const float fr = row - (float)ir;
            const float* q = p + ir * width + ic;
            const float p00 = __ldg(q), p01 = __ldg(q + 1);
            const float p10 = __ldg(q + width), p11 = __ldg(q + width + 1);
            const float top = p00 + fc * (p01 - p00);
            const float bot = p10 + fc * (p11 - p10);
            acc[k] += w2 * (top + fr * (bot - top));
        }
    }
#pragma unroll
    for (int k = 0; k < ZB; ++k)
        if (z0 + k < nz) out[((size_t)(z0 + k) * ny + iy) * nx + ix] += acc[k];
}
