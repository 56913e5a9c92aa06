/* bench_ppo_policy.c: the latency of one checked call, ppo_policy_act, on one pinned core.
 * ./bench_ppo_policy [calls (default 2000000)] [target p50 ns (optional)]
 * Every call gets the next observation of a ring of the export observations (ppo_policy_vectors.h), its status is
 * counted and its action summed, so no call can be optimised away. Per call: rdtsc fenced by lfence on x86-64
 * (calibrated against CLOCK_MONOTONIC over the whole run), clock_gettime(CLOCK_MONOTONIC) elsewhere; the timer's own
 * cost (its p50 around an empty region) is printed and subtracted. Per block: clock_gettime around 1000 calls. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sched.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define TICKS() (_mm_lfence(), __rdtsc())
#define TIMER "rdtsc + lfence"
#else
#define TICKS() now_ns()
#define TIMER "clock_gettime(CLOCK_MONOTONIC)"
#endif
#include "ppo_policy.h"
#include "ppo_policy_vectors.h"

#if defined(__AVX512F__)  /* the FMA limit is measured with the widest vectors this build may use */
#include <immintrin.h>
#define PROBE "avx512 fused multiply-add"
#define LANES 16
typedef __m512 vec;
#define SET1(x) _mm512_set1_ps(x)
#define MADD(a, m, c) _mm512_fmadd_ps(a, m, c)
#define ADD(a, b) _mm512_add_ps(a, b)
#define LOAD(p) _mm512_loadu_ps(p)
#define STORE(p, v) _mm512_storeu_ps(p, v)
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define PROBE "avx2 fused multiply-add"
#define LANES 8
typedef __m256 vec;
#define SET1(x) _mm256_set1_ps(x)
#define MADD(a, m, c) _mm256_fmadd_ps(a, m, c)
#define ADD(a, b) _mm256_add_ps(a, b)
#define LOAD(p) _mm256_loadu_ps(p)
#define STORE(p, v) _mm256_storeu_ps(p, v)
#elif defined(__SSE2__)
#include <emmintrin.h>
#define PROBE "sse2 multiply then add: no fused multiply-add in this build"
#define LANES 4
typedef __m128 vec;
#define SET1(x) _mm_set1_ps(x)
#define MADD(a, m, c) _mm_add_ps(_mm_mul_ps(a, m), c)
#define ADD(a, b) _mm_add_ps(a, b)
#define LOAD(p) _mm_loadu_ps(p)
#define STORE(p, v) _mm_storeu_ps(p, v)
#elif defined(__aarch64__)
#include <arm_neon.h>
#define PROBE "neon fused multiply-add"
#define LANES 4
typedef float32x4_t vec;
#define SET1(x) vdupq_n_f32(x)
#define MADD(a, m, c) vfmaq_f32(c, a, m)
#define ADD(a, b) vaddq_f32(a, b)
#define LOAD(p) vld1q_f32(p)
#define STORE(p, v) vst1q_f32(p, v)
#endif

#define WARMUP 200000L
#define BLOCK 1000L
#define EMPTY 100000L  /* empty timed regions: the timer's own cost */
#define RING (PPO_TEST_ROWS < 64 ? PPO_TEST_ROWS : 64)

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

#if defined(LANES) && defined(PPO_TEST_MULTIPLY_ADDS)
static double fma_per_ns(float *sum) {
    /* the machine's limit: 12 independent chains of multiply-adds in registers (enough to cover the latency of two
       pipes), the best of 3000 blocks of 12 000 vector operations */
    volatile float m0 = 0.999999f, c0 = 1e-7f;
    const vec m = SET1(m0), c = SET1(c0);
    vec a[12];
    double best = 1e30;
    float out[LANES];
    int i, k, b;
    for (k = 0; k < 12; k++) a[k] = SET1(c0 * (float)(k + 1));  /* distinct, so no two chains can be merged */
    for (b = 0; b < 3000; b++) {
        const uint64_t t0 = now_ns();
        for (i = 0; i < 1000; i++) {
            a[0] = MADD(a[0], m, c); a[1] = MADD(a[1], m, c); a[2] = MADD(a[2], m, c); a[3] = MADD(a[3], m, c);
            a[4] = MADD(a[4], m, c); a[5] = MADD(a[5], m, c); a[6] = MADD(a[6], m, c); a[7] = MADD(a[7], m, c);
            a[8] = MADD(a[8], m, c); a[9] = MADD(a[9], m, c); a[10] = MADD(a[10], m, c); a[11] = MADD(a[11], m, c);
        }
        const double t = (double)(now_ns() - t0);
        if (t < best) best = t;
    }
    for (k = 1; k < 12; k++) a[0] = ADD(a[0], a[k]);
    STORE(out, a[0]); *sum += out[0];
    return 12000.0 * LANES / best;
}

static double read_ns(float *sum) {
    /* the best time to read PPO_TEST_WEIGHT_BYTES from cache, a vector at a time: what any call that reads each
       weight once pays when they do not fit in L1 */
    const long n = (PPO_TEST_WEIGHT_BYTES / 4 + LANES * 4 - 1) / (LANES * 4) * (LANES * 4);
    float *w = calloc((size_t)n, sizeof(float)), out[LANES];
    double best = 1e30;
    long i, b;
    vec s0 = SET1(0.0f), s1 = s0, s2 = s0, s3 = s0;
    if (!w) return 0;
    for (i = 0; i < n; i++) w[i] = (float)(i % 7);  /* written: untouched pages would all be the one zero page */
    for (b = 0; b < 2000; b++) {
        const uint64_t t0 = now_ns();
        for (i = 0; i < n; i += 4 * LANES) {
            s0 = ADD(s0, LOAD(w + i)); s1 = ADD(s1, LOAD(w + i + LANES));
            s2 = ADD(s2, LOAD(w + i + 2 * LANES)); s3 = ADD(s3, LOAD(w + i + 3 * LANES));
        }
        const double t = (double)(now_ns() - t0);
        if (t < best) best = t;
    }
    STORE(out, ADD(ADD(s0, s1), ADD(s2, s3))); *sum += out[0];
    free(w);
    return best;
}
#endif

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *sorted, long n, double p) { return sorted[(long)(p / 100.0 * (double)(n - 1) + 0.5)]; }

static int pin(void) {
    /* the last core this process may run on (core 0 takes most interrupts); -1 where pinning is unavailable */
#ifdef __linux__
    cpu_set_t set;
    int core = -1, c;
    if (sched_getaffinity(0, sizeof set, &set)) return -1;
    for (c = 0; c < CPU_SETSIZE; c++) if (CPU_ISSET(c, &set)) core = c;
    CPU_ZERO(&set); CPU_SET(core, &set);
    return sched_setaffinity(0, sizeof set, &set) ? -1 : core;
#else
    return -1;
#endif
}

static double core_ghz(void) {
    /* the core's clock now: a chain of dependent one-cycle adds; 0 where it cannot be measured */
#if defined(__x86_64__)
    uint64_t x = 0, t0 = now_ns(), i;
    for (i = 0; i < 50000000u; i++)
        __asm__ __volatile__("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
    return (double)x / (double)(now_ns() - t0);
#else
    return 0;
#endif
}

int main(int argc, char **argv) {
    const long calls = argc > 1 ? atol(argv[1]) : 2000000L;
    const double target = argc > 2 ? atof(argv[2]) : 0;
    const long blocks = calls / BLOCK > 0 ? calls / BLOCK : 1;
    double *t = malloc(sizeof(double) * (size_t)(calls > blocks ? calls : blocks));
    double *empty = malloc(sizeof(double) * EMPTY);
    float act[PPO_POLICY_ACT_DIM], nan_obs[PPO_POLICY_OBS_DIM];
    double sum = 0, ns_per_tick, timer_p50, resolution = 1e30;
    long i, failed = 0, k = 0;
    int core, j, nan_status, nan_untouched = 1;
    uint64_t a, b, t0, n0, t1, n1;
    if (!t || !empty || calls < 1000) { fprintf(stderr, "bench_ppo_policy: calls must be >= 1000\n"); return 2; }
    core = pin();
    printf("bench_ppo_policy %s (kernel %s): ppo_policy_act, the checked call, %d inputs -> %d actions\n",
           PPO_POLICY_ENV_ID, ppo_policy_kernel(), PPO_POLICY_OBS_DIM, PPO_POLICY_ACT_DIM);
    for (i = 0; i < WARMUP; i++) {
        failed += ppo_policy_act(ppo_test_obs[i % RING], act) != PPO_POLICY_OK;
        sum += act[0];
    }
    printf("cpu: pinned to core %d; core clock %.2f GHz after the warm-up (a dependent add chain; 0: not measured)\n",
           core, core_ghz());
    /* the timer alone, then per call; ticks are converted with the rate measured across the whole timed run */
    t0 = TICKS(); n0 = now_ns();
    for (i = 0; i < EMPTY; i++) { a = TICKS(); b = TICKS(); empty[i] = (double)(b - a); }
    for (i = 0; i < calls; i++) {
        a = TICKS();
        failed += ppo_policy_act(ppo_test_obs[i % RING], act) != PPO_POLICY_OK;
        b = TICKS();
        t[i] = (double)(b - a);
        sum += act[0];
    }
    t1 = TICKS(); n1 = now_ns();
    ns_per_tick = (double)(n1 - n0) / (double)(t1 - t0);
    for (i = 0; i < EMPTY; i++) {
        empty[i] *= ns_per_tick;
        if (empty[i] > 0 && empty[i] < resolution) resolution = empty[i];
    }
    qsort(empty, EMPTY, sizeof *empty, by_value);
    timer_p50 = pct(empty, EMPTY, 50);
    for (i = 0; i < calls; i++) t[i] = t[i] * ns_per_tick - timer_p50;
    qsort(t, (size_t)calls, sizeof *t, by_value);
    printf("warm-up: %ld calls\n", WARMUP);
    printf("timer: %s, %.3f ns per tick, resolution %.1f ns, cost %.1f ns (p50 of an empty region, subtracted)\n",
           TIMER, ns_per_tick, resolution, timer_p50);
    printf("per call: %ld calls, p50 %.1f ns, p99 %.1f ns, p99.9 %.1f ns, max %.1f ns\n", calls, pct(t, calls, 50),
           pct(t, calls, 99), pct(t, calls, 99.9), t[calls - 1]);
    const double per_call_p50 = pct(t, calls, 50);
    /* blocks: no timer inside, so no timer cost and the clock's resolution divided by BLOCK */
    for (j = 0; j < (int)blocks; j++) {
        a = now_ns();
        for (i = 0; i < BLOCK; i++, k++) {
            failed += ppo_policy_act(ppo_test_obs[k % RING], act) != PPO_POLICY_OK;
            sum += act[0];
        }
        t[j] = (double)(now_ns() - a) / BLOCK;
    }
    qsort(t, (size_t)blocks, sizeof *t, by_value);
    printf("per block of %ld calls: %ld blocks, p50 %.1f ns/call, min %.1f ns/call\n", BLOCK, blocks,
           pct(t, blocks, 50), t[0]);
    memcpy(nan_obs, ppo_test_obs[0], sizeof nan_obs);
    nan_obs[0] = NAN;
    for (j = 0; j < PPO_POLICY_ACT_DIM; j++) act[j] = 12345.0f;
    nan_status = ppo_policy_act(nan_obs, act);
    for (j = 0; j < PPO_POLICY_ACT_DIM; j++) nan_untouched = nan_untouched && act[j] == 12345.0f;
    printf("checks: %ld failed calls; NaN obs: status %d, action %s; checksum %.6g\n", failed, nan_status,
           nan_untouched ? "untouched" : "WRITTEN", sum);
    if (target > 0)
        printf("target: p50 <= %.0f ns per call: %s (%.1f ns)\n", target, per_call_p50 <= target ? "met" : "NOT met",
               per_call_p50);
#if defined(LANES) && defined(PPO_TEST_MULTIPLY_ADDS)
    {   /* the arithmetic's own limits, measured now on this core: the FMA units, and reading the weights */
        static float rows[64][PPO_POLICY_OBS_DIM], acts[64][PPO_POLICY_ACT_DIM];
        float probe_sum = 0;
        const double per_ns = fma_per_ns(&probe_sum), limit = (double)PPO_TEST_MULTIPLY_ADDS / per_ns;
        const double weights = read_ns(&probe_sum);
        double best_batch = 1e30;
        for (i = 0; i < 64; i++) memcpy(rows[i], ppo_test_obs[i % PPO_TEST_ROWS], sizeof rows[i]);
        for (j = 0; j < 2000; j++) {
            a = now_ns();
            failed += ppo_policy_act_batch(&rows[0][0], &acts[0][0], 64) != PPO_POLICY_OK;
            b = now_ns();
            if ((double)(b - a) < best_batch) best_batch = (double)(b - a);
            sum += acts[j % 64][0];
        }
        printf("fma limit: %.1f multiply-adds per ns (%s, 12 chains, best of 3000 blocks); %ld multiply-adds a call "
               "take %.1f ns at that rate (probe %g)\n", per_ns, PROBE, (long)PPO_TEST_MULTIPLY_ADDS, limit,
               (double)probe_sum);
        printf("against it: p50 %.2fx, best block %.2fx; a batch of 64 (ppo_policy_act_batch) %.1f ns per action, "
               "%.2fx\n", per_call_p50 / limit, t[0] / limit, best_batch / 64, best_batch / 64 / limit);
        printf("reading the %ld bytes of weights from cache: best %.1f ns (%.2fx the fma limit)\n",
               (long)PPO_TEST_WEIGHT_BYTES, weights, weights / limit);
    }
#endif
    free(t); free(empty);
    return !(failed == 0 && nan_status == PPO_POLICY_NONFINITE_OBS && nan_untouched);
}
