// The scale-space Laplacian of Gaussian of scikit-image's blob_log, in double precision,
// bit for bit as scipy.ndimage computes it on the CPU (gpumr/blobs/scalespace.py is the
// reference; gpumr/blobs/gpu.py drives these kernels):
//
//   correlate_axis  one separable pass of scipy's correlate1d along axis 0 (rows) or 1
//                   (columns) with a symmetric kernel w[0..radius] (w[0] the centre), mode
//                   'reflect' (d c b a | a b c d | d c b a, repeated for kernels longer than
//                   the line): acc = x[i] w[0], then for k = radius down to 1,
//                   acc += (x[i - k] + x[i + k]) w[k], the order scipy's C loop sums in
//   log_scale       cube[pixel, scale] = -(A + B) s^2, where A is the second-derivative pass
//                   along rows then the smoothing pass along columns, and B the other way
//                   round: -gaussian_laplace(image, s) * s^2, as blob_log stacks it
//
// Per scale the host runs four passes (two per term) and one log_scale. The weights are
// scipy's own (the impulse responses of gaussian_filter1d, made on the host).
// No fused multiply-add, so that every sum rounds as scipy's does (x86-64 builds of scipy
// have none in this loop):
// nvcc: -fmad=false

__device__ __forceinline__ int reflect(int i, int n)
{
    const int period = 2 * n;
    i %= period;
    if (i < 0) i += period;
    return i < n ? i : period - 1 - i;
}

extern "C" __global__ void correlate_axis(
    const double* __restrict__ in,   // [height, width]
    double* __restrict__ out,        // [height, width]
    int height, int width,
    int axis,                        // 0: along each column (rows vary), 1: along each row
    const double* __restrict__ w,    // [radius + 1]: the centre, then the weights at offsets 1..radius
    int radius)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    const int n = axis == 0 ? height : width;
    const int i = axis == 0 ? y : x;
    const size_t stride = axis == 0 ? (size_t)width : 1;
    const double* line = in + (axis == 0 ? (size_t)x : (size_t)y * width);
    double acc = __ldg(line + i * stride) * __ldg(w);
    for (int k = radius; k > 0; --k) {
        const double pair = __ldg(line + reflect(i - k, n) * stride) + __ldg(line + reflect(i + k, n) * stride);
        acc += pair * __ldg(w + k);
    }
    out[(size_t)y * width + x] = acc;
}

extern "C" __global__ void log_scale(
    const double* __restrict__ a,    // [pixels]: rows' second derivative, then columns smoothed
    const double* __restrict__ b,    // [pixels]: rows smoothed, then columns' second derivative
    double* __restrict__ cube,       // [pixels, scales]
    int pixels, int scales, int scale,
    double s2)                       // the scale's sigma squared
{
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= pixels) return;
    cube[(size_t)p * scales + scale] = -(a[p] + b[p]) * s2;
}
