// gpumr's CPU backprojector of a slab (gpumr/ct/backproject.py, backproject): the loops of its numba kernel
// in C, built by the system compiler into gpumr's kernel cache (gpumr/ct/native.py) and loaded with ctypes, so
// that a task process neither imports nor compiles numba.
//
// One row of voxels (fixed y) at a time per thread, threads taking rows in turn. Per angle, what depends on x
// alone (the division, the column, the weight) is computed once for every slice of the slab; per slice, three
// loops over the row: the detector rows and flat indices (vectorised by the compiler), the four-pixel gathers
// and horizontal interpolations (scalar loads), the vertical interpolation and the accumulation (vectorised).
// `flat` holds padded rows [row0, row0 + height) of each projection (one zero pixel around the detector); the
// clamps keep every read inside it.

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const float* flat;
    int na, width, height, row0;
    const float *cosb, *sinb, *zs, *ys, *xs;
    int nzs, ny, nx;
    float dso, dsd, cu, cv, inv_du, inv_dv;
    int nv, nu;
    float* out;
    int next;    // the next row of voxels to take (atomic)
} Job;

static inline float clampf(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }
static inline int mini(int a, int b) { return a < b ? a : b; }
static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// The four pixels at each index and their horizontal interpolations: scalar loads (the compiler's gather
// instructions are slower than scalar loads on the processors measured, so this loop is not vectorised).
#if defined(__clang__)
#define SCALAR_LOOP _Pragma("clang loop vectorize(disable)")
#define SCALAR_FUNCTION
#else
#define SCALAR_LOOP
#define SCALAR_FUNCTION __attribute__((optimize("no-tree-vectorize")))
#endif
static SCALAR_FUNCTION void gather(const float* restrict p, const int* restrict at, const float* restrict fc,
                                   int width, int nx, float* restrict top, float* restrict bot)
{
    SCALAR_LOOP
    for (int ix = 0; ix < nx; ++ix) {
        const int k = at[ix];
        const float f = fc[ix];
        const float p00 = p[k], p01 = p[k + 1], p10 = p[k + width], p11 = p[k + width + 1];
        top[ix] = p00 + f * (p01 - p00);
        bot[ix] = p10 + f * (p11 - p10);
    }
}

static void row(const Job* j, int iy, float* restrict scratch)
{
    const int nx = j->nx, nzs = j->nzs, width = j->width, nu = j->nu, nv = j->nv, row0 = j->row0;
    float* restrict acc = scratch;                 // [nzs][nx]
    int* restrict base = (int*)(acc + (size_t)nzs * nx);
    float* restrict fc = (float*)(base + nx);
    float* restrict w2 = fc + nx;
    float* restrict rmag = w2 + nx;
    int* restrict at = (int*)(rmag + nx);
    float* restrict fr = (float*)(at + nx);
    float* restrict top = fr + nx;
    float* restrict bot = top + nx;
    const float y = j->ys[iy], one = 1.0f, zero = 0.0f;
    const float col_max = (float)(nu + 1), row_max = (float)(nv + 1);
    const float dso = j->dso, dsd = j->dsd, inv_du = j->inv_du, inv_dv = j->inv_dv;
    const float cu1 = j->cu + one, cv1 = j->cv + one;  // as numba's fastmath kernel folds the constants
    const int last = j->height - 2;
    memset(acc, 0, sizeof(float) * (size_t)nzs * nx);
    for (int a = 0; a < j->na; ++a) {
        const float c = j->cosb[a], s = j->sinb[a];
        const float* restrict p = j->flat + (size_t)a * width * j->height;
        for (int ix = 0; ix < nx; ++ix) {
            const float x = j->xs[ix];
            const float inv = one / (dso - (x * c + y * s));
            const float mag = dsd * inv;
            const float col = clampf((-x * s + y * c) * mag * inv_du + cu1, zero, col_max);
            const int i = mini((int)col, nu);
            base[ix] = i;
            fc[ix] = col - (float)i;
            const float w = dso * inv;
            w2[ix] = w * w;
            rmag[ix] = mag * inv_dv;
        }
        for (int iz = 0; iz < nzs; ++iz) {
            const float z = j->zs[iz];
            for (int ix = 0; ix < nx; ++ix) {
                const float r = clampf(z * rmag[ix] + cv1, zero, row_max);
                const int ir = mini((int)r, nv);
                fr[ix] = r - (float)ir;
                at[ix] = clampi(ir - row0, 0, last) * width + base[ix];
            }
            gather(p, at, fc, width, nx, top, bot);
            float* restrict out_row = acc + (size_t)iz * nx;
            for (int ix = 0; ix < nx; ++ix) {
                const float t = top[ix];
                out_row[ix] += w2[ix] * (t + fr[ix] * (bot[ix] - t));
            }
        }
    }
    for (int iz = 0; iz < nzs; ++iz)
        memcpy(j->out + ((size_t)iz * j->ny + iy) * nx, acc + (size_t)iz * nx, sizeof(float) * nx);
}

static void* worker(void* arg)
{
    Job* j = (Job*)arg;
    float* scratch = malloc(sizeof(float) * ((size_t)j->nzs * j->nx + 8 * (size_t)j->nx));
    if (!scratch) return NULL;  // (the rows are left to the threads that have memory)
    for (;;) {
        const int iy = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (iy >= j->ny) break;
        row(j, iy, scratch);
    }
    free(scratch);
    return NULL;
}

// The slab out [nzs][ny][nx] from padded projections flat [na][height][width]; 0 when done, 1 when no thread
// had memory for its scratch. `threads` threads (this one and threads - 1 more).
int gpumr_backproject(const float* flat, int na, int width, int height, int row0, const float* cosb,
                      const float* sinb, const float* zs, int nzs, const float* ys, int ny, const float* xs, int nx,
                      float dso, float dsd, float cu, float cv, float inv_du, float inv_dv, int nv, int nu,
                      float* out, int threads)
{
    Job j = {flat, na, width, height, row0, cosb, sinb, zs, ys, xs, nzs, ny, nx,
             dso, dsd, cu, cv, inv_du, inv_dv, nv, nu, out, 0};
    if (threads > ny) threads = ny;
    if (threads < 1) threads = 1;
    pthread_t* more = threads > 1 ? malloc(sizeof(pthread_t) * (size_t)(threads - 1)) : NULL;
    int started = 0;
    for (int t = 0; more && t < threads - 1; ++t) {
        if (pthread_create(&more[t], NULL, worker, &j) != 0) break;  // fewer threads: the rest share the rows
        ++started;
    }
    worker(&j);
    for (int t = 0; t < started; ++t) pthread_join(more[t], NULL);
    free(more);
    return j.next < ny ? 1 : 0;  // every row is taken once some thread had memory
}
