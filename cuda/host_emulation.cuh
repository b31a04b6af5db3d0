// CUDA's execution model restated in C++, so that gpumr's kernels (cuda/*.cu)
// compile with the system C++ compiler and run on the host (gpumr/gpu/emulate.py).
//
// A launch runs its blocks on a pool of host threads, in any order and
// concurrently, and the threads of one block one after another in the order
// of their linear index (x fastest), each to its end. Restated here: the
// built-in indices (thread-local), CUDA's vector types with CUDA's alignment,
// the qualifiers, __ldg, the atomics (real ones: blocks run concurrently),
// __threadfence, and the integer and float min/max. The kernels' other maths
// (sqrt, fminf, fmaxf, float arithmetic) is the C library's and the
// compiler's, built without floating-point contraction, as the kernels are
// built with -fmad=false; the CUDA math library's own rounding of functions
// that are not correctly rounded (expf, sinf, ...) is not reproduced.
//
// A source that uses block barriers, shared memory or warp shuffles is built
// with -DGPUMR_FIBERS: its block's threads then run as fibers that meet at
// each barrier and shuffle (below). What cannot be run this way is poisoned
// below (and refused by name before compiling, by gpumr.gpu.emulate.scan):
// dynamic shared memory, the counting barriers, warp votes and matches,
// textures and surfaces, launches from kernels.

#ifndef GPUMR_HOST_EMULATION_CUH
#define GPUMR_HOST_EMULATION_CUH

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#ifdef GPUMR_FIBERS
#include <ucontext.h>
#endif

// -- qualifiers --------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// __restrict__ is the compiler's own.

// -- indices -----------------------------------------------------------------
struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};
static thread_local uint3 threadIdx;
static thread_local uint3 blockIdx;
static thread_local dim3 blockDim;
static thread_local dim3 gridDim;

// -- vector types, aligned as CUDA aligns them -------------------------------
#define GPUMR_VEC2(T, N, A) struct __attribute__((aligned(A))) N##2 { T x, y; }; \
    static __forceinline__ N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define GPUMR_VEC3(T, N) struct N##3 { T x, y, z; }; \
    static __forceinline__ N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define GPUMR_VEC4(T, N, A) struct __attribute__((aligned(A))) N##4 { T x, y, z, w; }; \
    static __forceinline__ N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
GPUMR_VEC2(signed char, char, 2) GPUMR_VEC4(signed char, char, 4)
GPUMR_VEC2(unsigned char, uchar, 2) GPUMR_VEC4(unsigned char, uchar, 4)
GPUMR_VEC2(short, short, 4) GPUMR_VEC4(short, short, 8)
GPUMR_VEC2(unsigned short, ushort, 4) GPUMR_VEC4(unsigned short, ushort, 8)
GPUMR_VEC2(int, int, 8) GPUMR_VEC3(int, int) GPUMR_VEC4(int, int, 16)
GPUMR_VEC2(unsigned int, uint, 8) GPUMR_VEC4(unsigned int, uint, 16)
GPUMR_VEC2(float, float, 8) GPUMR_VEC3(float, float) GPUMR_VEC4(float, float, 16)
GPUMR_VEC2(double, double, 16)
GPUMR_VEC2(long long, longlong, 16)
static_assert(alignof(int2) == 8 && alignof(int4) == 16 && alignof(float2) == 8 && sizeof(int3) == 12,
              "CUDA's vector type layout");

// -- memory access -----------------------------------------------------------
template <class T> static __forceinline__ T __ldg(const T* p) { return *p; }

// -- opt-in instrumentation (-DGPUMR_TRACE: bench/gpu_model.py's build only) --
// Every __ldg is recorded with its warp, lane, source line ("site"), the n-th
// time this thread reached that line, and its address. When a block ends, its
// records become warp requests (the n-th execution of one line by the lanes of
// one warp is one request, as on a GPU whose warp runs that line together):
// per site, the requests, the lanes they served, the 32-byte sectors they
// touched, and how many of those sectors an L1 of the block's share of the
// SM's L1 (LRU over sectors, the warps' requests interleaved by program
// order) already held. Not built into gpumr's kernels: a measurement aid.
#ifdef GPUMR_TRACE
#include <algorithm>
#include <list>
#include <unordered_map>
namespace gpumr_trace {
enum { SITES = 4096, FIELDS = 6 };  // per site: requests, lanes, sectors, sector hits, warps, most by one thread
struct Record { unsigned long long addr; unsigned warp, lane, site, occ, seq, size; };
static std::mutex lock;
static unsigned long long totals[SITES][FIELDS];
static unsigned long long l1_sectors = 2048;  // the block's share of L1, in 32-byte sectors
static thread_local std::vector<Record> mine;
static thread_local unsigned occ[SITES];
static thread_local unsigned seq;
static thread_local unsigned thread_linear;
#ifdef GPUMR_FIBERS
// A block's threads interleave as fibers: each one's counts are kept by its index until the block ends.
static thread_local std::unordered_map<unsigned long long, unsigned> occ_of;
static thread_local std::unordered_map<unsigned, unsigned> seq_of;
#endif
static void begin_thread(unsigned thread)
{
    thread_linear = thread;
    seq = 0;
    std::memset(occ, 0, sizeof occ);
}
struct Request { unsigned seq, warp, site; std::vector<unsigned long long> sectors; };
static void end_block()
{
#ifdef GPUMR_FIBERS
    occ_of.clear();
    seq_of.clear();
#endif
    std::vector<Record>& r = mine;
    std::sort(r.begin(), r.end(), [](const Record& a, const Record& b) {
        return std::tie(a.warp, a.site, a.occ) < std::tie(b.warp, b.site, b.occ); });
    std::vector<Request> reqs;
    unsigned long long local[SITES][FIELDS] = {};
    std::vector<std::pair<unsigned, unsigned>> warp_site;
    for (std::size_t i = 0; i < r.size();) {
        std::size_t j = i;
        Request q{r[i].seq, r[i].warp, r[i].site, {}};
        for (; j < r.size() && r[j].warp == r[i].warp && r[j].site == r[i].site && r[j].occ == r[i].occ; ++j) {
            q.seq = std::min(q.seq, r[j].seq);
            for (unsigned long long s = r[j].addr >> 5; s <= (r[j].addr + r[j].size - 1) >> 5; ++s) q.sectors.push_back(s);
        }
        std::sort(q.sectors.begin(), q.sectors.end());
        q.sectors.erase(std::unique(q.sectors.begin(), q.sectors.end()), q.sectors.end());
        local[q.site][0] += 1;
        local[q.site][5] = std::max<unsigned long long>(local[q.site][5], r[i].occ + 1);
        local[q.site][1] += j - i;
        local[q.site][2] += q.sectors.size();
        if (warp_site.empty() || warp_site.back() != std::make_pair(q.warp, q.site)) {
            warp_site.emplace_back(q.warp, q.site);
            local[q.site][4] += 1;
        }
        reqs.push_back(std::move(q));
        i = j;
    }
    std::stable_sort(reqs.begin(), reqs.end(), [](const Request& a, const Request& b) {
        return std::tie(a.seq, a.warp) < std::tie(b.seq, b.warp); });
    std::list<unsigned long long> lru;
    std::unordered_map<unsigned long long, std::list<unsigned long long>::iterator> where;
    for (const Request& q : reqs)
        for (unsigned long long s : q.sectors) {
            auto it = where.find(s);
            if (it != where.end()) {
                ++local[q.site][3];
                lru.erase(it->second);
            } else if (lru.size() >= l1_sectors) {
                where.erase(lru.back());
                lru.pop_back();
            }
            lru.push_front(s);
            where[s] = lru.begin();
        }
    r.clear();
    std::lock_guard<std::mutex> hold(lock);
    for (unsigned s = 0; s < SITES; ++s)
    {
        for (unsigned f = 0; f < 5; ++f) totals[s][f] += local[s][f];
        totals[s][5] = std::max(totals[s][5], local[s][5]);
    }
}
}  // namespace gpumr_trace
template <class T> static __forceinline__ T gpumr_traced_ldg(const T* p, unsigned line)
{
    using namespace gpumr_trace;
    const unsigned site = line % SITES;
#ifdef GPUMR_FIBERS
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    mine.push_back(Record{(unsigned long long)p, t / 32, t % 32, site, occ_of[(unsigned long long)t << 12 | site]++,
                          seq_of[t]++, (unsigned)sizeof(T)});
#else
    mine.push_back(Record{(unsigned long long)p, thread_linear / 32, thread_linear % 32, site, occ[site]++, seq++,
                          (unsigned)sizeof(T)});
#endif
    return *p;
}
#define __ldg(p) gpumr_traced_ldg((p), __LINE__)
#define LOAD(p) gpumr_traced_ldg((p), __LINE__)  // the kernels' plain loads (haar.cu)
extern "C" void gpumr_trace_config(unsigned long long l1_sectors)
{ gpumr_trace::l1_sectors = l1_sectors ? l1_sectors : 1; }
// Copies the per-site totals (SITES x FIELDS unsigned long long; the last field a maximum) out and starts them again.
extern "C" void gpumr_trace_take(unsigned long long* out)
{
    std::memcpy(out, gpumr_trace::totals, sizeof gpumr_trace::totals);
    std::memset(gpumr_trace::totals, 0, sizeof gpumr_trace::totals);
}
#endif
static __forceinline__ void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// -- atomics (device-wide, relaxed: what CUDA's atomicX promise) --------------
#define GPUMR_ATOMIC_INT(T) \
    static __forceinline__ T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); } \
    static __forceinline__ T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); } \
    static __forceinline__ T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); } \
    static __forceinline__ T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); } \
    static __forceinline__ T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); } \
    static __forceinline__ T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); } \
    static __forceinline__ T atomicCAS(T* p, T expected, T v) { \
        __atomic_compare_exchange_n(p, &expected, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); return expected; } \
    static __forceinline__ T atomicMin(T* p, T v) { \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED); \
        while (v < old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} \
        return old; } \
    static __forceinline__ T atomicMax(T* p, T v) { \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED); \
        while (v > old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} \
        return old; }
GPUMR_ATOMIC_INT(int)
GPUMR_ATOMIC_INT(unsigned int)
GPUMR_ATOMIC_INT(unsigned long long)

template <class F, class B>
static __forceinline__ F gpumr_atomic_add_float(F* p, F v)
{
    B* bits = reinterpret_cast<B*>(p);
    B old = __atomic_load_n(bits, __ATOMIC_RELAXED), want;
    F was;
    do {
        std::memcpy(&was, &old, sizeof was);
        const F sum = was + v;
        std::memcpy(&want, &sum, sizeof want);
    } while (!__atomic_compare_exchange_n(bits, &old, want, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return was;
}
static __forceinline__ float atomicAdd(float* p, float v)
{ return gpumr_atomic_add_float<float, std::uint32_t>(p, v); }
static __forceinline__ double atomicAdd(double* p, double v)
{ return gpumr_atomic_add_float<double, std::uint64_t>(p, v); }

// -- min and max as CUDA overloads them (float ones are fminf/fmaxf) --------
#define GPUMR_MINMAX(T) \
    static __forceinline__ T min(T a, T b) { return b < a ? b : a; } \
    static __forceinline__ T max(T a, T b) { return a < b ? b : a; }
GPUMR_MINMAX(int)
GPUMR_MINMAX(unsigned int)
GPUMR_MINMAX(long long)
GPUMR_MINMAX(unsigned long long)
static __forceinline__ float min(float a, float b) { return fminf(a, b); }
static __forceinline__ float max(float a, float b) { return fmaxf(a, b); }
static __forceinline__ double min(double a, double b) { return fmin(a, b); }
static __forceinline__ double max(double a, double b) { return fmax(a, b); }

// -- block barriers, shared memory, warp shuffles (-DGPUMR_FIBERS) ------------
// Built in only for a source that uses them (gpumr.gpu.emulate.host_flags). A
// block's threads then run as fibers on one host thread, in linear order, each
// until it reaches a barrier or a shuffle: when every live thread waits at
// __syncthreads the block goes on (an exited thread no longer counts, as on
// Volta and later); the lanes of a warp that reach a shuffle exchange values
// and go on. Threads waiting at different __syncthreads lines, a shuffle whose
// lanes stand at different lines, or one that reads a lane that is not taking
// part, fail the launch with a message (gpumr_launch_error). __shared__ is
// one copy per host thread, which runs one block at a time.
static std::mutex gpumr_emu_error_lock;
static std::string gpumr_emu_error;
extern "C" const char* gpumr_launch_error() { return gpumr_emu_error.c_str(); }
#ifdef GPUMR_FIBERS
#define __shared__ static thread_local
static constexpr int warpSize = 32;
namespace gpumr_fibers {
enum State { READY, BARRIER, WARP, DONE };
// A fiber is started once on a stack of its own (makecontext) and then runs one block's thread after another on
// it, parked between blocks. Switching saves no signal mask: __builtin_setjmp/__builtin_longjmp keep the
// registers the compiler needs, where swapcontext makes two system calls per switch (most of an emulated
// launch's time, measured). AddressSanitizer builds switch with swapcontext, which it follows between stacks.
struct Fiber {
    ucontext_t start;                 // where it starts (used once)
    void* env[5];                     // where it stopped (__builtin_setjmp)
    std::unique_ptr<char[]> stack;    // (not zeroed: pages are taken as the fiber touches them)
    bool started = false;
    State state = DONE;
    unsigned line = 0;
    int src = 0;
    unsigned long long value = 0, result = 0;
};
static const std::size_t STACK = 256 * 1024;
static thread_local std::vector<std::unique_ptr<Fiber>> pool;
static thread_local unsigned current;
static thread_local const std::function<void()>* body;
#if defined(__SANITIZE_ADDRESS__)
#define GPUMR_SWAPCONTEXT 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPUMR_SWAPCONTEXT 1
#endif
#endif
#ifdef GPUMR_SWAPCONTEXT
static thread_local ucontext_t scheduler;
static void to_scheduler(Fiber& f) { swapcontext(&f.start, &scheduler); }
static void resume(Fiber& f) { f.started = true; swapcontext(&scheduler, &f.start); }
#else
static thread_local void* scheduler[5];
__attribute__((noinline)) static void jump(void** env) { __builtin_longjmp(env, 1); }
__attribute__((noinline)) static void to_scheduler(Fiber& f)
{
    if (__builtin_setjmp(f.env) == 0) jump(scheduler);
}
__attribute__((noinline)) static void resume(Fiber& f)
{
    if (__builtin_setjmp(scheduler) == 0) {
        if (!f.started) {
            f.started = true;
            setcontext(&f.start);  // onto its own stack, into entry()
        }
        jump(f.env);
    }
}
#endif
static void entry()
{
    for (;;) {
        (*body)();
        pool[current]->state = DONE;
        to_scheduler(*pool[current]);  // parked until the next block's thread of its index
    }
}
static void yield(State state, unsigned line)
{
    Fiber& f = *pool[current];
    f.state = state;
    f.line = line;
    to_scheduler(f);
}
static unsigned linear() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
static void barrier(unsigned line) { yield(BARRIER, line); }
static void syncwarp(unsigned line) { pool[current]->src = (int)(linear() % 32); yield(WARP, line); }
template <class T> static T exchange(T v, int src_lane, unsigned line)
{
    static_assert(sizeof(T) <= 8, "a shuffled value is at most 8 bytes");
    Fiber& f = *pool[current];
    f.value = 0;
    std::memcpy(&f.value, &v, sizeof(T));
    f.src = src_lane;
    yield(WARP, line);
    T out;
    std::memcpy(&out, &f.result, sizeof(T));
    return out;
}
template <class T> static T shfl_idx(unsigned line, T v, int src, int width = 32)
{ const int lane = (int)(linear() % 32); return exchange(v, lane / width * width + (src % width + width) % width, line); }
template <class T> static T shfl_up(unsigned line, T v, unsigned delta, int width = 32)
{ const int lane = (int)(linear() % 32); return exchange(v, lane % width >= (int)delta ? lane - (int)delta : lane, line); }
template <class T> static T shfl_down(unsigned line, T v, unsigned delta, int width = 32)
{ const int lane = (int)(linear() % 32); return exchange(v, lane % width + (int)delta < width ? lane + (int)delta : lane, line); }
template <class T> static T shfl_xor(unsigned line, T v, int mask, int width = 32)
{
    const int lane = (int)(linear() % 32), other = lane ^ mask;
    return exchange(v, other / width == lane / width ? other : lane, line);
}
// Run one block's `n` threads to their ends; "" or what went wrong.
static std::string run_block(unsigned n, const dim3 dims, const std::function<void()>& fn)
{
    while (pool.size() < n) pool.emplace_back(new Fiber);
    body = &fn;
    for (unsigned t = 0; t < n; ++t) {
        Fiber& f = *pool[t];
        if (f.started && f.state != DONE) f.started = false;  // left mid-block by a failed launch: start afresh
        if (!f.started) {
            if (!f.stack) f.stack.reset(new char[STACK]);
            getcontext(&f.start);
            f.start.uc_stack.ss_sp = f.stack.get();
            f.start.uc_stack.ss_size = STACK;
            f.start.uc_link = nullptr;  // (entry never returns)
            makecontext(&f.start, entry, 0);
        }
        f.state = READY;
    }
    for (;;) {
        for (unsigned t = 0; t < n; ++t) {
            if (pool[t]->state != READY) continue;
            current = t;
            threadIdx.x = t % dims.x;
            threadIdx.y = t / dims.x % dims.y;
            threadIdx.z = t / dims.x / dims.y;
            resume(*pool[t]);
        }
        bool shuffled = false;
        for (unsigned t = 0; t < n; ++t) {
            Fiber& f = *pool[t];
            if (f.state != WARP) continue;
            shuffled = true;
            const unsigned base = t / 32 * 32;
            const unsigned src = base + (unsigned)f.src;
            if (pool[base]->state == WARP && f.line != pool[base]->line)
                return "warp lanes at different shuffles (lines " + std::to_string(f.line) + " and " +
                       std::to_string(pool[base]->line) + ")";
            if (src >= n || pool[src]->state != WARP || pool[src]->line != f.line)
                return "a shuffle at line " + std::to_string(f.line) + " reads lane " + std::to_string(src % 32) +
                       ", which is not taking part";
            f.result = pool[src]->value;
        }
        if (shuffled) {
            for (unsigned t = 0; t < n; ++t)
                if (pool[t]->state == WARP) pool[t]->state = READY;
            continue;
        }
        unsigned waiting = 0, line = 0;
        for (unsigned t = 0; t < n; ++t) {
            if (pool[t]->state != BARRIER) continue;
            if (waiting++ && pool[t]->line != line)
                return "threads wait at different __syncthreads (lines " + std::to_string(line) + " and " +
                       std::to_string(pool[t]->line) + ")";
            line = pool[t]->line;
        }
        if (!waiting) return "";
        for (unsigned t = 0; t < n; ++t)
            if (pool[t]->state == BARRIER) pool[t]->state = READY;
    }
}
}  // namespace gpumr_fibers
#define __syncthreads() gpumr_fibers::barrier(__LINE__)
#define __syncwarp(...) gpumr_fibers::syncwarp(__LINE__)
#define __shfl_sync(mask, ...) gpumr_fibers::shfl_idx(__LINE__, __VA_ARGS__)
#define __shfl_up_sync(mask, ...) gpumr_fibers::shfl_up(__LINE__, __VA_ARGS__)
#define __shfl_down_sync(mask, ...) gpumr_fibers::shfl_down(__LINE__, __VA_ARGS__)
#define __shfl_xor_sync(mask, ...) gpumr_fibers::shfl_xor(__LINE__, __VA_ARGS__)
#endif

// -- launching (used by the wrapper gpumr.gpu.emulate generates per kernel) --
namespace gpumr_emu {

template <class T> using bare = typename std::remove_cv<T>::type;

// One parameter's type as "[p]KIND SIZE": p for a pointer (then the pointee's kind and
// size), kind i (signed integer), u (unsigned), f (floating), s (anything else).
template <class T> std::string kind()
{
    using U = bare<T>;
    if (std::is_void<U>::value) return "v0";
    const char k = std::is_floating_point<U>::value ? 'f'
                 : std::is_integral<U>::value ? (std::is_signed<U>::value ? 'i' : 'u') : 's';
    return k + std::to_string(sizeof(typename std::conditional<std::is_void<U>::value, char, U>::type));
}
template <class T> std::string param()
{
    using U = bare<T>;
    if (std::is_pointer<U>::value) return "p" + kind<typename std::remove_pointer<U>::type>();
    return kind<U>();
}
template <class... A> const char* params(void (*)(A...))
{
    static const std::string text = [] {
        std::string s;
        for (const std::string& p : {std::string(), param<A>()...}) if (!p.empty()) s += (s.empty() ? "" : ",") + p;
        return s;
    }();
    return text.c_str();
}

// Run the grid: blocks taken in turn by `threads` host threads, a block's threads in order.
template <class... A, std::size_t... I>
int launch(void (*fn)(A...), void** args, const unsigned* grid, const unsigned* block, int threads,
           std::index_sequence<I...>)
{
    const std::tuple<bare<A>...> values(*static_cast<bare<A>*>(args[I])...);
    const unsigned long long blocks = (unsigned long long)grid[0] * grid[1] * grid[2];
    std::atomic<unsigned long long> next(0);
    std::atomic<bool> failed(false);
    auto work = [&] {
        gridDim = dim3(grid[0], grid[1], grid[2]);
        blockDim = dim3(block[0], block[1], block[2]);
        for (unsigned long long b; !failed && (b = next.fetch_add(1)) < blocks;) {
            blockIdx.x = (unsigned)(b % grid[0]);
            blockIdx.y = (unsigned)(b / grid[0] % grid[1]);
            blockIdx.z = (unsigned)(b / grid[0] / grid[1]);
#ifdef GPUMR_FIBERS
            const std::function<void()> thread = [&] { fn(std::get<I>(values)...); };
            const std::string why = gpumr_fibers::run_block(block[0] * block[1] * block[2], blockDim, thread);
            if (!why.empty()) {
                std::lock_guard<std::mutex> hold(gpumr_emu_error_lock);
                if (!failed.exchange(true))
                    gpumr_emu_error = "block (" + std::to_string(blockIdx.x) + ", " + std::to_string(blockIdx.y) +
                                      ", " + std::to_string(blockIdx.z) + "): " + why;
            }
#ifdef GPUMR_TRACE
            gpumr_trace::end_block();
#endif
            continue;
#endif
            for (unsigned z = 0; z < block[2]; ++z)
                for (unsigned y = 0; y < block[1]; ++y)
                    for (unsigned x = 0; x < block[0]; ++x) {
                        threadIdx.x = x;
                        threadIdx.y = y;
                        threadIdx.z = z;
#ifdef GPUMR_TRACE
                        gpumr_trace::begin_thread(x + block[0] * (y + block[1] * z));
#endif
                        fn(std::get<I>(values)...);
                    }
#ifdef GPUMR_TRACE
            gpumr_trace::end_block();
#endif
        }
    };
    std::vector<std::thread> pool;
    try {
        for (int t = 1; t < threads && (unsigned long long)t < blocks; ++t) pool.emplace_back(work);
    } catch (const std::system_error&) {
        // fewer host threads than asked: the ones started and this one share the blocks
    }
    work();
    for (std::thread& t : pool) t.join();
    return failed ? 1 : 0;
}
template <class... A>
int launch(void (*fn)(A...), void** args, const unsigned* grid, const unsigned* block, int threads)
{
    return launch(fn, args, grid, block, threads, std::index_sequence_for<A...>());
}

}  // namespace gpumr_emu

#define GPUMR_KERNEL(name) \
    extern "C" const char* gpumr_params_##name() { return gpumr_emu::params(&name); } \
    extern "C" int gpumr_launch_##name(void** args, const unsigned* grid, const unsigned* block, int threads) \
    { return gpumr_emu::launch(&name, args, grid, block, threads); }
#define GPUMR_CONSTANT(name) \
    extern "C" void* gpumr_constant_##name(unsigned long long* size) { *size = sizeof(name); return (void*)&name; }

// -- what the emulation does not restate -------------------------------------
#ifndef GPUMR_FIBERS
#pragma GCC poison __shared__ __syncthreads __syncwarp __shfl_sync __shfl_up_sync __shfl_down_sync __shfl_xor_sync
#pragma GCC poison warpSize
#endif
#pragma GCC poison __syncthreads_count __syncthreads_and __syncthreads_or __shfl __shfl_up __shfl_down __shfl_xor
#pragma GCC poison __ballot __ballot_sync __any __all __any_sync __all_sync __activemask
#pragma GCC poison __match_any_sync __match_all_sync __reduce_add_sync __reduce_min_sync __reduce_max_sync
#pragma GCC poison tex1D tex2D tex3D tex1Dfetch tex1DLayered tex2DLayered texCubemap tex2Dgather
#pragma GCC poison surf1Dread surf1Dwrite surf2Dread surf2Dwrite surf3Dread surf3Dwrite
#pragma GCC poison cudaTextureObject_t cudaSurfaceObject_t __nanosleep __threadfence_block clock64

#endif
