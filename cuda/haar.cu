// Haar-cascade (Viola-Jones, OpenCV's cascade format) face detection, restating
// OpenCV 4's detectMultiScale step for step (see gpumr/haar.py, whose numba
// scan is the CPU reference of these kernels):
//
//   pyramid                       every level of every frame resized from the frame, bit for
//                                 bit as OpenCV's INTER_LINEAR_EXACT (8-bit, one channel)
//   integral_rows, integral_cols  integral images of every pyramid level of every frame (a
//                                 warp per row, then a thread per column)
//   feature_offsets               the cascade's rectangles' corner offsets at each level's row length
//   first_stage                   every window on the level's step grid: variance check
//                                 and stage 0 -> code -1 (flat), 0 (failed stage 0), 1 (passed)
//   first_survivors               OpenCV visits the positions of a row in order and skips
//                                 the one after a stage-0 failure; one thread per row
//                                 replays that and appends its survivors to a list
//   run_stages                    stages [first, last) for each survivor of a list, early
//                                 exit; the passing ones appended to the next list
//   first_stage_global, run_stages_global  the same for a cascade too large for constant memory
//
// The lists' lengths stay on the device: a kernel that appends counts on a device counter, the
// next reads it from there, so the host launches a part's kernels one after another without
// waiting for any of them, and reads back once (the last list and its length). A block appends
// its threads' items together (block_append: a prefix sum in shared memory, one atomicAdd): in
// thread order within the block, blocks in the order they arrive; the host sorts the last list.
//
// nvcc: -fmad=false (rounding follows OpenCV's CPU code: no fused multiply-add)

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

// The cascade as the stage kernels read it (gpumr.faces.cascade.Cascade.packed). A stage:
// its trees' nodes [first, end) and threshold. A node, 16 bytes: its threshold, its feature
// and children's kinds, and each child as a node (its index from the tree's root) or a leaf
// (its value's bits).
struct __align__(16) Stage {
    int first, end;
    float thr;      // less OpenCV's 1e-5
    int unused;
};
struct __align__(16) Node {
    float thr;
    int meta;       // left / right child a node (bits 0 / 1), its tree's node count (bits 2-11), feature (from bit 12)
    int left, right;
};
#define NODE_LEFT_BIT 0
#define NODE_RIGHT_BIT 1
#define NODE_SIZE_BIT 2
#define NODE_FEATURE_BIT 12

// A feature at one integral-image row length W (feature_offsets): each rectangle's corner
// offsets from the window's top-left corner (top-left, top-right, bottom-left, bottom-right:
// y * W + x each), the rectangles' weights, and how many it has (w.w's bits: 2, or 3 where the
// third's weight is not 0). A rectangle's sum then costs four loads at the window's base plus
// these, no multiply.
struct __align__(16) Feature {
    int4 r[3];
    float4 w;
};

// The cascade in constant memory where it fits (the host decides, gpumr.faces.gpu): every
// lane of a warp reads the same stage and node, which the constant cache serves in one go.
// Larger cascades are read from global memory by the *_global kernels.
#define CONST_STAGES 64
#define CONST_NODES 3968
__constant__ Node c_nodes[CONST_NODES];  // first: a node's address is its index times 16
__constant__ Stage c_stages[CONST_STAGES];

struct Cascade {
    int win_w, win_h;
    const Stage* stages;        // the global copies (the *_global kernels read these)
    const Node* nodes;
    const Feature* feats;       // the feature tables of every row length in the launch
    const int* level_feats;     // [level]: its row length's table, the first entry's index
};

// Integral rows: one warp per row, ROW_ITEMS consecutive pixels per lane, so that a warp
// reads 128 consecutive bytes and writes 128 consecutive sums at a time; each lane sums its
// pixels, the lanes' totals are prefix-summed by shuffles (once per 128 pixels), and the run
// is carried to the next 128. Integer sums: the same values in any order.
#define ROW_WARP 32
#define ROW_ITEMS 4

extern "C" __global__ void integral_rows(const unsigned char* __restrict__ img, const Level* __restrict__ levels,
                                         const int2* __restrict__ rows, int n_rows,
                                         unsigned* __restrict__ sum, unsigned* __restrict__ sq)
{
    const int lane = threadIdx.x % ROW_WARP;
    const int i = (blockIdx.x * blockDim.x + threadIdx.x) / ROW_WARP;  // the same for the whole warp
    if (i >= n_rows) return;
    const Level L = levels[rows[i].x];
    const int y = rows[i].y;                       // 0 .. height: integral row y
    const int W = L.width + 1;
    unsigned* s = sum + L.int_off + y * W;
    unsigned* q = sq + L.int_off + y * W;
    if (y == 0) {
        for (int x = lane; x < W; x += ROW_WARP) { s[x] = 0; q[x] = 0; }
        return;
    }
    if (lane == 0) { s[0] = 0; q[0] = 0; }
    const unsigned char* p = img + L.img_off + (y - 1) * L.width;
    unsigned carry = 0, carryq = 0;
    for (int x0 = 1; x0 < W; x0 += ROW_WARP * ROW_ITEMS) {
        const int x = x0 + lane * ROW_ITEMS;      // this lane's first column
        unsigned v[ROW_ITEMS], own = 0, ownq = 0;
#pragma unroll
        for (int k = 0; k < ROW_ITEMS; ++k) {
            v[k] = x + k < W ? LOAD(&p[x + k - 1]) : 0u;
            own += v[k];
            ownq += v[k] * v[k];
        }
        unsigned upto = own, uptoq = ownq;         // inclusive prefix sums of the lanes' totals
        for (int d = 1; d < ROW_WARP; d *= 2) {
            const unsigned up = __shfl_up_sync(0xffffffffu, upto, d);
            const unsigned upq = __shfl_up_sync(0xffffffffu, uptoq, d);
            if (lane >= d) { upto += up; uptoq += upq; }
        }
        unsigned run = carry + upto - own, runq = carryq + uptoq - ownq;
#pragma unroll
        for (int k = 0; k < ROW_ITEMS; ++k) {
            run += v[k];
            runq += v[k] * v[k];
            if (x + k < W) { s[x + k] = run; q[x + k] = runq; }
        }
        carry += __shfl_sync(0xffffffffu, upto, ROW_WARP - 1);
        carryq += __shfl_sync(0xffffffffu, uptoq, ROW_WARP - 1);
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

// The level an item belongs to, levels holding consecutive runs of items from their field F on
// (pyramid pixels from img_off, windows from win_off): the last level whose F is <= i. One binary
// search for both lists.
template <int Level::*F>
__device__ __forceinline__ int level_at(const Level* levels, int n_levels, int i)
{
    int lo = 0, hi = n_levels - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (levels[mid].*F <= i) lo = mid; else hi = mid - 1;
    }
    return lo;
}

extern "C" __global__ void pyramid(const unsigned char* __restrict__ frames, const Level* __restrict__ levels,
                                   const Source* __restrict__ sources, int n_levels, int n_pixels,
                                   const int2* __restrict__ taps, unsigned char* __restrict__ img)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_pixels) return;
    const int lv = level_at<&Level::img_off>(levels, n_levels, i);
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
#define CASCADE_PARAMS int win_w, int win_h, const Stage* __restrict__ stages, const Node* __restrict__ nodes, \
    const Feature* __restrict__ feats, const int* __restrict__ level_feats
#define CASCADE {win_w, win_h, stages, nodes, feats, level_feats}

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

// A float's bits as an int, and back.
__device__ __forceinline__ int float_bits(float value)
{
    union { float f; int i; } u;
    u.f = value;
    return u.i;
}

__device__ __forceinline__ float bits_float(int bits)
{
    union { int i; float f; } u;
    u.i = bits;
    return u.f;
}

// Each feature's rectangles at each integral-image row length of a launch: thread
// t * n_features + i writes feature i at row length widths[t] (the host keeps the product an int).
extern "C" __global__ void feature_offsets(const int4* __restrict__ rects, const float* __restrict__ weights,
                                           int n_features, const int* __restrict__ widths, int n_tables,
                                           Feature* __restrict__ out)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_features * n_tables) return;
    const int t = i / n_features, k = i - t * n_features;
    const int W = widths[t];
    Feature f;
    for (int r = 0; r < 3; ++r) {
        const int4 R = rects[k * 3 + r];  // x, y, w, h
        const int top = R.y * W + R.x, bottom = (R.y + R.w) * W + R.x;
        f.r[r] = make_int4(top, top + R.z, bottom, bottom + R.z);
    }
    const float w2 = weights[k * 3 + 2];
    f.w = make_float4(weights[k * 3], weights[k * 3 + 1], w2, bits_float(w2 != 0.0f ? 3 : 2));
    out[i] = f;
}

// Where a stage kernel reads the cascade: constant memory (K) or global memory.
template <bool K> __device__ __forceinline__ Stage stage_at(const Cascade& C, int i)
{ return K ? LOAD(&c_stages[i]) : LOAD(&C.stages[i]); }
template <bool K> __device__ __forceinline__ Node node_at(const Cascade& C, int i)
{ return K ? LOAD(&c_nodes[i]) : LOAD(&C.nodes[i]); }

// Window w: its top-left corner in its level's sum integral image, its level's feature table
// (both as addresses), and its variance factor. A load in the stage loops is then one widening
// multiply-add of an int offset onto an address (a launch's buffers hold fewer than 2^31
// elements: gpumr.faces.gpu.MAX_ELEMENTS). Kept as pointers, the compiler folds the level's and
// the window's offsets into every load's index and widens each sum to 64 bits: 4 instructions
// a load instead of 1.
struct Window {
    unsigned long long p;   // &sum[the level's start + the window's corner]
    unsigned long long f;   // &feats[the level's table]
    float inv;              // 1 / nf, or 0 when OpenCV rejects the window for low variance
};

// A rectangle's weighted sum at the window (its corners' offsets o from the window's base).
__device__ __forceinline__ float rect_value(const Window& v, const Feature* f, int r, float wt)
{
    const int4 o = __ldg(&f->r[r]);
    const unsigned* s = (const unsigned*)v.p;
    return wt * (float)(int)(__ldg(&s[o.w]) - __ldg(&s[o.y]) - __ldg(&s[o.z]) + __ldg(&s[o.x]));
}

// Feature i's value at the window, rounded as OpenCV's CPU code rounds it.
__device__ __forceinline__ float feature_value(const Window& v, int i)
{
    const Feature* f = (const Feature*)v.f + i;
    const float4 wt = __ldg(&f->w);
    float val = rect_value(v, f, 0, wt.x) + rect_value(v, f, 1, wt.y);
    // A third rectangle (a fifth of OpenCV's features) behind a branch: as a loop bounded by
    // the data (which the compiler does not predicate, as it does an if), two-rectangle
    // features skip its instructions rather than issue them predicated off.
#pragma unroll 1
    for (int r = 2; r < float_bits(wt.w); ++r) val += rect_value(v, f, r, wt.z);
    return val;
}

// Stages [first, last) at the window; returns the failing stage's index, or -1 when all pass.
template <bool K> __device__ int stages_at(const Cascade& C, const Window& v, int first, int last)
{
    for (int si = first; si < last; ++si) {
        const Stage st = stage_at<K>(C, si);
        double acc = 0.0;  // OpenCV sums a stage's leaves in double
        for (int root = st.first; root < st.end;) {
            for (int n = root;;) {
                const Node nd = node_at<K>(C, n);
                const bool left = feature_value(v, nd.meta >> NODE_FEATURE_BIT) * v.inv < nd.thr;
                const int child = left ? nd.left : nd.right;
                if (!(nd.meta & (left ? 1 << NODE_LEFT_BIT : 1 << NODE_RIGHT_BIT))) {
                    acc += bits_float(child);
                    root += (nd.meta >> NODE_SIZE_BIT) & ((1 << (NODE_FEATURE_BIT - NODE_SIZE_BIT)) - 1);
                    break;
                }
                n = root + child;
            }
        }
        if (acc < st.thr) return si;
    }
    return -1;
}

__device__ __forceinline__ Window window_at(const Cascade& C, const Level* levels, int n_levels, int w,
                                            const unsigned* sum, const unsigned* sq)
{
    const int level = level_at<&Level::win_off>(levels, n_levels, w);
    const Level L = levels[level];
    const int k = w - L.win_off;
    const int W = L.width + 1;
    const int x = (k % L.gx) * L.step, y = (k / L.gx) * L.step;
    Window win;
    win.p = (unsigned long long)sum + sizeof(unsigned) * (unsigned long long)(long long)(L.int_off + y * W + x);
    win.f = (unsigned long long)C.feats + sizeof(Feature) * (unsigned long long)(long long)LOAD(&C.level_feats[level]);
    win.inv = norm_factor(sum + L.int_off, sq + L.int_off, W, x, y, C.win_w, C.win_h);
    return win;
}

template <bool K> __device__ __forceinline__ void first_stage_of(const Cascade& C, const Level* levels, int n_levels,
                                                                 int n_windows, const unsigned* sum,
                                                                 const unsigned* sq, signed char* codes)
{
    int w = blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= n_windows) return;
    const Window v = window_at(C, levels, n_levels, w, sum, sq);
    if (v.inv == 0.0f) { codes[w] = -1; return; }
    codes[w] = (stages_at<K>(C, v, 0, 1) < 0) ? 1 : 0;
}

// Every window: code -1 (flat), 0 (failed stage 0), 1 (passed); the cascade in constant memory.
extern "C" __global__ void first_stage(CASCADE_PARAMS, const Level* __restrict__ levels, int n_levels, int n_windows,
                                       const unsigned* __restrict__ sum, const unsigned* __restrict__ sq,
                                       signed char* __restrict__ codes)
{
    first_stage_of<true>(CASCADE, levels, n_levels, n_windows, sum, sq, codes);
}

// first_stage for a cascade read from global memory.
extern "C" __global__ void first_stage_global(CASCADE_PARAMS, const Level* __restrict__ levels, int n_levels,
                                              int n_windows, const unsigned* __restrict__ sum,
                                              const unsigned* __restrict__ sq, signed char* __restrict__ codes)
{
    first_stage_of<false>(CASCADE, levels, n_levels, n_windows, sum, sq, codes);
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

// The threads of a block (a whole number of warps, at most APPEND_THREADS) append n items each to
// a list whose length is *count (on the device): returns where this thread's first item goes.
// Every thread of the block calls it: a prefix sum of the counts within each warp (shuffles),
// the warps' totals summed by one thread, which also takes the block's place with one atomicAdd.
#define APPEND_THREADS 256
__device__ __forceinline__ int block_append(int n, int* count)
{
    __shared__ int warp_first[APPEND_THREADS / 32];
    __shared__ int base;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int upto = n;  // this lane's inclusive prefix sum within its warp
    for (int d = 1; d < 32; d *= 2) {
        const int v = __shfl_up_sync(0xffffffffu, upto, d);
        if (lane >= d) upto += v;
    }
    if (lane == 31) warp_first[warp] = upto;
    __syncthreads();
    if (threadIdx.x == 0) {
        int total = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) {
            const int v = warp_first[w];
            warp_first[w] = total;
            total += v;
        }
        base = atomicAdd(count, total);
    }
    __syncthreads();
    return base + warp_first[warp] + upto - n;
}

// Each grid row's survivors of the first stage, appended to out (its length *count, zero before).
extern "C" __global__ void __launch_bounds__(APPEND_THREADS) first_survivors(
    const Level* __restrict__ levels, const int2* __restrict__ grid_rows, int n_rows,
    const signed char* __restrict__ codes, int* __restrict__ out, int* __restrict__ count)
{
    if ((int)(blockIdx.x * blockDim.x) >= n_rows) return;  // (the whole block)
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = i < n_rows ? row_survivors(levels, grid_rows, i, codes, 0) : 0;
    const int at = block_append(n, count);
    if (n) row_survivors(levels, grid_rows, i, codes, out + at);
}

// Stages [first, last) for each of the *n_in windows of in; those that pass them all appended to
// out (its length *n_out, zero before). The grid is what the device holds at once, whatever *n_in
// is (the host does not know it): each block takes APPEND_THREADS windows at a time, a grid's
// width apart.
template <bool K> __device__ __forceinline__ void run_stages_of(const Cascade& C, const Level* levels, int n_levels,
                                                                const unsigned* sum, const unsigned* sq,
                                                                const int* in, const int* n_in, int first, int last,
                                                                int* out, int* n_out)
{
    const int n = LOAD(n_in);
    for (int base = blockIdx.x * blockDim.x; base < n; base += gridDim.x * blockDim.x) {
        const int i = base + threadIdx.x;
        int w = 0, pass = 0;
        if (i < n) {
            w = LOAD(&in[i]);
            const Window v = window_at(C, levels, n_levels, w, sum, sq);
            pass = stages_at<K>(C, v, first, last) < 0;
        }
        const int at = block_append(pass, n_out);
        if (pass) out[at] = w;
    }
}

// Stages [first, last) for each listed window, the passing ones listed; the cascade in constant memory.
extern "C" __global__ void __launch_bounds__(APPEND_THREADS) run_stages(
    CASCADE_PARAMS, const Level* __restrict__ levels, int n_levels, const unsigned* __restrict__ sum,
    const unsigned* __restrict__ sq, const int* __restrict__ in, const int* __restrict__ n_in, int first, int last,
    int* __restrict__ out, int* __restrict__ n_out)
{
    run_stages_of<true>(CASCADE, levels, n_levels, sum, sq, in, n_in, first, last, out, n_out);
}

// run_stages for a cascade read from global memory.
extern "C" __global__ void __launch_bounds__(APPEND_THREADS) run_stages_global(
    CASCADE_PARAMS, const Level* __restrict__ levels, int n_levels, const unsigned* __restrict__ sum,
    const unsigned* __restrict__ sq, const int* __restrict__ in, const int* __restrict__ n_in, int first, int last,
    int* __restrict__ out, int* __restrict__ n_out)
{
    run_stages_of<false>(CASCADE, levels, n_levels, sum, sq, in, n_in, first, last, out, n_out);
}
