// Haar-cascade (Viola-Jones, OpenCV's cascade format) face detection, restating
// OpenCV 4's detectMultiScale step for step (see gpumr/haar.py, whose numba
// scan is the CPU reference of these kernels):
//
//   pyramid                       every level of every frame resized from the frame, bit for
//                                 bit as OpenCV's INTER_LINEAR_EXACT (8-bit, one channel)
//   integral_rows, integral_cols  integral images of every pyramid level of every frame
//   first_stage                   every window on the level's step grid: variance check
//                                 and stage 0 -> code -1 (flat), 0 (failed stage 0), 1 (passed)
//   row_count, row_write          OpenCV visits the positions of a row in order and skips
//                                 the one after a stage-0 failure; one thread per row
//                                 replays that, counting, then (at the prefix sum of the
//                                 counts) writing its survivors: the list is in window order
//   scan_blocks, add_block_offsets  exclusive prefix sums (shared memory, barriers)
//   run_stages, compact           stages [first, last) for each survivor, early exit, a
//                                 pass flag each; the passing ones compacted in order
//
// Rounding follows OpenCV's CPU code: compile with -fmad=false.

// A global load, as written: the host emulation's measuring build (bench/gpu_model.py)
// defines it to record each warp's addresses; the GPU build is plain indexing.
#ifndef LOAD
#define LOAD(p) (*(p))
#endif

struct Level {
    int img_off;    // first pixel of the scaled image in the image buffer
    int int_off;    // first element of its integral images
    int width;      // scaled image width (integral rows are width + 1 long)
    int height;
    int nx, ny;     // window columns 0 .. nx-1, and the rows OpenCV scans 0 .. ny-1, before stepping
    int step;       // 2, or 1 once the scale is >= 2
    int gx, gy;     // positions on the step grid
    int win_off;    // first window of this level in the code array
};

struct Cascade {
    int n_stages;
    int win_w, win_h;
    const int2* stages;         // first tree, tree count
    const float* stage_thr;
    const int2* trees;          // first node, first leaf
    const int4* nodes;          // feature, left, right, unused
    const float* node_thr;
    const float* leaves;
    const int4* rects;          // [feature * 3 + r]: x, y, w, h
    const float* weights;       // [feature * 3 + r]
};

extern "C" __global__ void integral_rows(const unsigned char* __restrict__ img, const Level* __restrict__ levels,
                                         const int2* __restrict__ rows, int n_rows,
                                         unsigned* __restrict__ sum, unsigned* __restrict__ sq)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_rows) return;
    const Level L = levels[rows[i].x];
    const int y = rows[i].y;                       // 0 .. height: integral row y
    const int W = L.width + 1;
    unsigned* s = sum + L.int_off + y * W;
    unsigned* q = sq + L.int_off + y * W;
    unsigned acc = 0, accq = 0;
    s[0] = 0;
    q[0] = 0;
    if (y == 0) {
        for (int x = 1; x < W; ++x) { s[x] = 0; q[x] = 0; }
        return;
    }
    const unsigned char* p = img + L.img_off + (y - 1) * L.width;
    for (int x = 1; x < W; ++x) {
        const unsigned v = LOAD(&p[x - 1]);
        acc += v;
        accq += v * v;
        s[x] = acc;
        q[x] = accq;
    }
}

extern "C" __global__ void integral_cols(const Level* __restrict__ levels, const int2* __restrict__ cols, int n_cols,
                                         unsigned* __restrict__ sum, unsigned* __restrict__ sq)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_cols) return;
    const Level L = levels[cols[i].x];
    const int x = cols[i].y;
    const int W = L.width + 1;
    unsigned* s = sum + L.int_off + x;
    unsigned* q = sq + L.int_off + x;
    for (int y = 1; y <= L.height; ++y) {
        s[y * W] += s[(y - 1) * W];
        q[y * W] += q[(y - 1) * W];
    }
}

// The pyramid, resized on the device as cv::resize(..., INTER_LINEAR_EXACT) does for 8-bit
// grey images. The host computes per destination column and row (gpumr/faces/gpu.py,
// resize_taps) a tap: the first source index and the second source pixel's weight c1 in
// 1/256 (OpenCV's ufixedpoint16, rounded from (d + 0.5) * src / dst - 0.5 in double); the
// first pixel's weight is 256 - c1, and a destination outside the source's centres takes
// the edge pixel (c1 = 0, index clamped). Rows are interpolated first, into 8.8 fixed
// point (exact in 16 bits), then columns of those into 16.16, rounded half up to 8 bits;
// all integer arithmetic, so the device gives OpenCV's bytes.
struct Source {
    int off;        // first pixel of the level's frame in the frame buffer
    int width;      // the frame's row length
    int xtap, ytap; // first tap of the level's columns and of its rows
};

// The level holding pyramid pixel i: the last whose img_off is <= i.
__device__ __forceinline__ int level_of_pixel(const Level* levels, int n_levels, int i)
{
    int lo = 0, hi = n_levels - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (levels[mid].img_off <= i) lo = mid; else hi = mid - 1;
    }
    return lo;
}

extern "C" __global__ void pyramid(const unsigned char* __restrict__ frames, const Level* __restrict__ levels,
                                   const Source* __restrict__ sources, int n_levels, int n_pixels,
                                   const int2* __restrict__ taps, unsigned char* __restrict__ img)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_pixels) return;
    const int lv = level_of_pixel(levels, n_levels, i);
    const Level L = levels[lv];
    const Source S = sources[lv];
    const int k = i - L.img_off;
    const int y = k / L.width, x = k - y * L.width;
    const int2 tx = LOAD(&taps[S.xtap + x]);
    const int2 ty = LOAD(&taps[S.ytap + y]);
    const unsigned char* row0 = frames + S.off + ty.x * S.width;
    const unsigned char* row1 = ty.y ? row0 + S.width : row0;
    const int x1 = tx.y ? tx.x + 1 : tx.x;
    const unsigned cx1 = tx.y, cx0 = 256u - cx1, cy1 = ty.y, cy0 = 256u - cy1;
    const unsigned h0 = cx0 * LOAD(&row0[tx.x]) + cx1 * LOAD(&row0[x1]);
    const unsigned h1 = cx0 * LOAD(&row1[tx.x]) + cx1 * LOAD(&row1[x1]);
    img[i] = (unsigned char)((cy0 * h0 + cy1 * h1 + 32768u) >> 16);
}

// The cascade's arrays, as every kernel that evaluates stages takes them.
#define CASCADE_PARAMS int n_stages, int win_w, int win_h, const int2* __restrict__ stages, \
    const float* __restrict__ stage_thr, const int2* __restrict__ trees, const int4* __restrict__ nodes, \
    const float* __restrict__ node_thr, const float* __restrict__ leaves, const int4* __restrict__ rects, \
    const float* __restrict__ weights
#define CASCADE {n_stages, win_w, win_h, stages, stage_thr, trees, nodes, node_thr, leaves, rects, weights}

// Integral images wrap modulo 2^32 on large frames (as OpenCV's do); a rectangle's
// sum is exact once the differences are taken in unsigned arithmetic.
__device__ __forceinline__ int rect_sum(const unsigned* s, int W, int x, int y, int w, int h)
{
    return (int)(LOAD(&s[(y + h) * W + x + w]) - LOAD(&s[y * W + x + w]) - LOAD(&s[(y + h) * W + x])
                 + LOAD(&s[y * W + x]));
}

// 1 / nf for the window at (x, y), or 0 when OpenCV rejects it for low variance.
__device__ __forceinline__ float norm_factor(const unsigned* s, const unsigned* q, int W, int x, int y, int ww, int wh)
{
    const int x0 = x + 1, y0 = y + 1, x1 = x + ww - 1, y1 = y + wh - 1;
    const int vs = rect_sum(s, W, x0, y0, x1 - x0, y1 - y0);
    const unsigned vq = LOAD(&q[y1 * W + x1]) - LOAD(&q[y0 * W + x1]) - LOAD(&q[y1 * W + x0])
                        + LOAD(&q[y0 * W + x0]);
    const int area = (ww - 2) * (wh - 2);
    const double nf = (double)area * (double)vq - (double)vs * (double)vs;
    if (!(nf > 0.0)) return 0.0f;
    const float inv = (float)(1.0 / sqrt(nf));
    return ((double)area * (double)inv < 0.1) ? inv : 0.0f;
}

// Stages [first, last) at window (x, y); returns the failing stage's index, or -1 when all pass.
__device__ int stages_at(const Cascade C, const unsigned* s, int W, int x, int y, float inv, int first, int last)
{
    for (int si = first; si < last; ++si) {
        const int2 st = LOAD(&C.stages[si]);
        double acc = 0.0;  // OpenCV sums a stage's leaves in double
        for (int t = st.x; t < st.x + st.y; ++t) {
            const int2 tree = LOAD(&C.trees[t]);
            int idx = 0;
            do {
                const int4 node = LOAD(&C.nodes[tree.x + idx]);
                const int f = node.x;
                float val = 0.0f;
#pragma unroll
                for (int r = 0; r < 3; ++r) {
                    const float wt = LOAD(&C.weights[f * 3 + r]);
                    if (wt != 0.0f) {
                        const int4 R = LOAD(&C.rects[f * 3 + r]);
                        val += wt * (float)rect_sum(s, W, x + R.x, y + R.y, R.z, R.w);
                    }
                }
                idx = (val * inv < LOAD(&C.node_thr[tree.x + idx])) ? node.y : node.z;
            } while (idx > 0);
            acc += LOAD(&C.leaves[tree.y - idx]);
        }
        if (acc < LOAD(&C.stage_thr[si])) return si;
    }
    return -1;
}

__device__ __forceinline__ int find_level(const Level* levels, int n_levels, int w)
{
    int lo = 0, hi = n_levels - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (levels[mid].win_off <= w) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// Window w: its level's integral image, top-left corner and variance factor.
struct Window {
    const unsigned* s;  // the level's sum integral image
    int W;          // its row length
    int x, y;
    float inv;      // 1 / nf, or 0 when OpenCV rejects the window for low variance
};

__device__ __forceinline__ Window window_at(const Cascade C, const Level* levels, int n_levels, int w,
                                            const unsigned* sum, const unsigned* sq)
{
    const Level L = levels[find_level(levels, n_levels, w)];
    const int k = w - L.win_off;
    Window win;
    win.s = sum + L.int_off;
    win.W = L.width + 1;
    win.x = (k % L.gx) * L.step;
    win.y = (k / L.gx) * L.step;
    win.inv = norm_factor(win.s, sq + L.int_off, win.W, win.x, win.y, C.win_w, C.win_h);
    return win;
}

extern "C" __global__ void first_stage(CASCADE_PARAMS, const Level* __restrict__ levels, int n_levels, int n_windows,
                                       const unsigned* __restrict__ sum, const unsigned* __restrict__ sq,
                                       signed char* __restrict__ codes)
{
    int w = blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= n_windows) return;
    const Cascade C = CASCADE;
    const Window v = window_at(C, levels, n_levels, w, sum, sq);
    if (v.inv == 0.0f) { codes[w] = -1; return; }
    codes[w] = (stages_at(C, v.s, v.W, v.x, v.y, v.inv, 0, 1) < 0) ? 1 : 0;
}

// OpenCV visits a grid row's positions in order and skips the one after a stage-0
// failure: the survivors of grid row i, in window order, counted (out null) or written.
__device__ __forceinline__ int row_survivors(const Level* levels, const int2* grid_rows, int i,
                                             const signed char* codes, int* out)
{
    const int level = LOAD(&grid_rows[i]).x, gyi = LOAD(&grid_rows[i]).y;
    const Level L = levels[level];
    const int base = L.win_off + gyi * L.gx;
    int n = 0;
    for (int gxi = 0; gxi < L.gx; ++gxi) {
        const int code = LOAD(&codes[base + gxi]);
        if (code == 1) {
            if (out) out[n] = base + gxi;
            ++n;
        } else if (code == 0) {
            ++gxi;  // OpenCV skips the position after a stage-0 failure
        }
    }
    return n;
}

extern "C" __global__ void row_count(const Level* __restrict__ levels, const int2* __restrict__ grid_rows, int n_rows,
                                     const signed char* __restrict__ codes, int* __restrict__ counts)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_rows) counts[i] = row_survivors(levels, grid_rows, i, codes, 0);
}

// Each row's survivors at its offset (the prefix sum of row_count's counts): window order.
extern "C" __global__ void row_write(const Level* __restrict__ levels, const int2* __restrict__ grid_rows, int n_rows,
                                     const signed char* __restrict__ codes, const int* __restrict__ offsets,
                                     int* __restrict__ out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_rows) row_survivors(levels, grid_rows, i, codes, out + offsets[i]);
}

// Exclusive prefix sums in place, SCAN_THREADS x SCAN_CHUNK elements per block: each
// thread sums its chunk, the block scans the chunk sums in shared memory, each thread
// writes its chunk's prefixes; the block's total goes to sums[blockIdx.x] (the driver
// scans those and adds them back with add_block_offsets when there are several blocks).
#define SCAN_THREADS 256
#define SCAN_CHUNK 16
extern "C" __global__ void __launch_bounds__(SCAN_THREADS) scan_blocks(int* __restrict__ data, int n,
                                                                      int* __restrict__ sums)
{
    __shared__ int part[SCAN_THREADS];
    const int t = threadIdx.x;
    const int first = (blockIdx.x * SCAN_THREADS + t) * SCAN_CHUNK;
    int total = 0;
    for (int k = 0; k < SCAN_CHUNK; ++k)
        if (first + k < n) total += data[first + k];
    part[t] = total;
    __syncthreads();
    for (int d = 1; d < SCAN_THREADS; d *= 2) {
        const int v = t >= d ? part[t - d] : 0;
        __syncthreads();
        part[t] += v;
        __syncthreads();
    }
    int run = part[t] - total;
    for (int k = 0; k < SCAN_CHUNK; ++k)
        if (first + k < n) {
            const int v = data[first + k];
            data[first + k] = run;
            run += v;
        }
    if (t == SCAN_THREADS - 1) sums[blockIdx.x] = part[t];
}

extern "C" __global__ void add_block_offsets(int* __restrict__ data, int n, const int* __restrict__ offsets)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += offsets[i / (SCAN_THREADS * SCAN_CHUNK)];
}

// Stages [first, last) for each survivor: 1 where it passes them all, else 0.
extern "C" __global__ void run_stages(CASCADE_PARAMS, const Level* __restrict__ levels, int n_levels,
                                      const unsigned* __restrict__ sum, const unsigned* __restrict__ sq,
                                      const int* __restrict__ in, int n_in, int first, int last,
                                      int* __restrict__ passed)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_in) return;
    const int w = LOAD(&in[i]);
    const Cascade C = CASCADE;
    const Window v = window_at(C, levels, n_levels, w, sum, sq);
    passed[i] = stages_at(C, v.s, v.W, v.x, v.y, v.inv, first, last) < 0;
}

// The inputs that passed, in their order: offsets are the exclusive prefix sums of the
// pass flags (n + 1 of them, the last the total), so input i passed where its offset grows.
extern "C" __global__ void compact(const int* __restrict__ in, const int* __restrict__ offsets, int n,
                                   int* __restrict__ out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && offsets[i + 1] > offsets[i]) out[offsets[i]] = in[i];
}
