// FDK pre-processing on the device, around a ramp filter the launcher runs (cuFFT):
// the same arithmetic as gpumr/ct/fdk.py's filter_projections.
//
//   fdk_weigh  rows[a, r, c] = (q[a, r, c] cosw[r, c]) weights[a, c] for the columns
//              c < nu of a row still to filter, zero beyond them (the ramp's padding to
//              N columns, against wrap-around) and for rows already filtered
//   fdk_store  q[a, r, c] = rows[a, r, c] for the columns c < nu of the rows filtered now
//
// q is the padded projections [angle, nv + 2, nu + 2] (a one-pixel zero border, as the
// backprojection kernel reads them), filtered in place; rows is [angle, nv, N]. One thread
// per column, grid y the detector rows, grid z the angles of the launch.
// Only products: the rounding is the host's whatever the contraction.

extern "C" __global__ void fdk_weigh(
    const float* __restrict__ q,        // [n_angles, nv + 2, nu + 2], this launch's angles
    const float* __restrict__ cosw,     // [nv, nu]
    const float* __restrict__ weights,  // [n_angles, nu], this launch's angles
    const unsigned char* __restrict__ todo,  // [nv]: 1 where the row is still to filter
    int n_angles, int nv, int nu, int n,
    float* __restrict__ rows)           // [n_angles, nv, n]
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y, a = blockIdx.z;
    if (c >= n || r >= nv || a >= n_angles) return;
    float v = 0.0f;
    if (c < nu && todo[r])
        v = (q[((size_t)a * (nv + 2) + r + 1) * (nu + 2) + c + 1] * cosw[(size_t)r * nu + c]) *
            weights[(size_t)a * nu + c];
    rows[((size_t)a * nv + r) * n + c] = v;
}

extern "C" __global__ void fdk_store(
    const float* __restrict__ rows,     // [n_angles, nv, n], filtered
    const unsigned char* __restrict__ todo,  // [nv]
    int n_angles, int nv, int nu, int n,
    float* __restrict__ q)              // [n_angles, nv + 2, nu + 2], this launch's angles
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y, a = blockIdx.z;
    if (c >= nu || r >= nv || a >= n_angles || !todo[r]) return;
    q[((size_t)a * (nv + 2) + r + 1) * (nu + 2) + c + 1] = rows[((size_t)a * nv + r) * n + c];
}
