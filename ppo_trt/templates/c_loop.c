/* c_loop.c: gymnasium's Hopper-v4 stepped by MuJoCo's C API and driven by the C policy library (ppo_policy.h),
 * with no Python in the loop. A template of ppo_trt (measure.c_loop, `ppo-trt c-loop`); the env's constants come
 * from c_loop_env.h, which ppo_trt writes from gymnasium's own Hopper-v4 object.
 *
 *   c_loop [--model HOPPER_XML] [--seed S] [--episodes K] [--steps N] [--trace FILE] [--inject-nan STEP]
 *
 * Episode i starts from gymnasium's `reset(seed=S+i)` bit for bit: numpy's SeedSequence and PCG64, and the
 * uniform reset noise, are computed here as numpy computes them. The loop runs until K episodes have ended and N
 * control steps have run, then prints one JSON object: the episode returns, steps/s, the policy call's time and the
 * loop period (start of a step to the start of the next, over steps within an episode), timed with
 * clock_gettime(CLOCK_MONOTONIC). A status other than PPO_POLICY_OK from the policy engages the fallback: the last
 * action is held (zeros at an episode's first step), and it is counted. --inject-nan STEP hands the policy a NaN
 * observation once, at control step STEP (counted from 0 over the whole run). --trace FILE writes one row of
 * TRACE_COLS doubles per reset and per step: episode, t, status, terminated, truncated, reward, action, observation.
 * A policy that reads its last actions (PPO_POLICY_HISTORY_ACTIONS > 0) is driven through its ppo_policy_memory:
 * reset at every episode start, and the held action committed whenever the fallback acts.
 */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <mujoco/mujoco.h>
#include "ppo_policy.h"
#include "c_loop_env.h"

#define NQ 6
#define NV 6
#define NU 3
#define TRACE_COLS (6 + NU + NQ - 1 + NV)
#if PPO_POLICY_HISTORY_ACTIONS > 0  /* the env's observation, the library's memory for the rest of the input */
#define OBS_DIM PPO_POLICY_ENV_OBS_DIM
static ppo_policy_memory memory;
#define POLICY_ACT(obs, act) ppo_policy_step(&memory, obs, act)
#define POLICY_RESET() ppo_policy_reset(&memory)
#define POLICY_COMMIT(act) ppo_policy_commit(&memory, act)
#else
#define OBS_DIM PPO_POLICY_OBS_DIM
#define POLICY_ACT(obs, act) ppo_policy_act(obs, act)
#define POLICY_RESET() ((void)0)
#define POLICY_COMMIT(act) PPO_POLICY_OK
#endif
#if OBS_DIM != NQ - 1 + NV || PPO_POLICY_ACT_DIM != NU
#error "c_loop drives Hopper-v4: the policy must map 11 observations to 3 actions"
#endif

/* ---- numpy's SeedSequence and PCG64 (numpy/random/bit_generator.pyx, pcg64.h), as gymnasium seeds them ---- */
__extension__ typedef unsigned __int128 u128;
typedef struct { u128 state, inc; } pcg64;

static uint32_t hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= 0x931e8875u;
    value *= *hash_const;
    return value ^ (value >> 16);
}

static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t r = 0xca01f9ddu * x - 0x4973f715u * y;
    return r ^ (r >> 16);
}

static uint64_t pcg64_next(pcg64 *g) {
    const u128 mult = ((u128)0x2360ed051fc65da4ull << 64) | 0x4385df649fccf645ull;
    uint64_t x;
    unsigned rot;
    g->state = g->state * mult + g->inc;
    x = (uint64_t)(g->state >> 64) ^ (uint64_t)g->state;
    rot = (unsigned)(g->state >> 122);
    return (x >> rot) | (x << ((64u - rot) & 63u));
}

/* np.random.PCG64(np.random.SeedSequence(seed)): the generator gymnasium's reset(seed=seed) makes */
static void pcg64_seed(pcg64 *g, uint64_t seed) {
    uint32_t entropy[2], pool[4], words[8], h = 0x43b0d7e5u;
    uint64_t s[4];
    int n = 0, i, j;
    entropy[n++] = (uint32_t)seed;
    if (seed >> 32) entropy[n++] = (uint32_t)(seed >> 32);
    for (i = 0; i < 4; i++) pool[i] = hashmix(i < n ? entropy[i] : 0u, &h);
    for (i = 0; i < 4; i++)
        for (j = 0; j < 4; j++)
            if (i != j) pool[j] = mix(pool[j], hashmix(pool[i], &h));
    h = 0x8b51f9ddu;  /* generate_state(4, uint64) */
    for (i = 0; i < 8; i++) {
        uint32_t v = pool[i % 4] ^ h;
        h *= 0x58f38dedu;
        v *= h;
        words[i] = v ^ (v >> 16);
    }
    for (i = 0; i < 4; i++) s[i] = (uint64_t)words[2 * i] | ((uint64_t)words[2 * i + 1] << 32);
    g->state = 0;
    g->inc = (((((u128)s[2]) << 64) | s[3]) << 1) | 1u;
    pcg64_next(g);
    g->state += (((u128)s[0]) << 64) | s[1];
    pcg64_next(g);
}

static double uniform(pcg64 *g, double low, double high) {  /* Generator.uniform: low + (high - low) * [0, 1) */
    return low + (high - low) * ((double)(pcg64_next(g) >> 11) * (1.0 / 9007199254740992.0));
}

/* ---- Hopper-v4 as gymnasium computes it (hopper_v4.py, mujoco_env.py) ---- */
static void reset(const mjModel *m, mjData *d, uint64_t seed) {
    pcg64 g;
    int i;
    pcg64_seed(&g, seed);
    mj_resetData(m, d);
    for (i = 0; i < NQ; i++) d->qpos[i] = m->qpos0[i] + uniform(&g, -RESET_NOISE_SCALE, RESET_NOISE_SCALE);
    for (i = 0; i < NV; i++) d->qvel[i] = 0.0 + uniform(&g, -RESET_NOISE_SCALE, RESET_NOISE_SCALE);
    mj_forward(m, d);
}

static void observe(const mjData *d, double obs[OBS_DIM]) {  /* qpos[1:], clip(qvel, -10, 10) */
    int i;
    for (i = 1; i < NQ; i++) obs[i - 1] = d->qpos[i];
    for (i = 0; i < NV; i++) {
        double v = d->qvel[i];
        obs[NQ - 1 + i] = v < -QVEL_CLIP ? -QVEL_CLIP : v > QVEL_CLIP ? QVEL_CLIP : v;
    }
}

static int healthy(const mjData *d) {
    double z = d->qpos[1], angle = d->qpos[2];
    int i, ok = HEALTHY_Z_LOW < z && z < HEALTHY_Z_HIGH && HEALTHY_ANGLE_LOW < angle && angle < HEALTHY_ANGLE_HIGH;
    for (i = 2; i < NQ + NV; i++) {  /* state_vector()[2:] */
        double s = i < NQ ? d->qpos[i] : d->qvel[i - NQ];
        ok &= HEALTHY_STATE_LOW < s && s < HEALTHY_STATE_HIGH;
    }
    return ok;
}

/* One env step with `act`: its reward, as gymnasium's float64 / float32 arithmetic gives it */
static double env_step(const mjModel *m, mjData *d, const float act[NU], double dt) {
    double x_before = d->qpos[0], x_velocity;
    float sq[NU], ctrl_cost;
    int i;
    for (i = 0; i < NU; i++) { d->ctrl[i] = act[i]; sq[i] = act[i] * act[i]; }
    for (i = 0; i < FRAME_SKIP; i++) mj_step(m, d);
    mj_rnePostConstraint(m, d);
    x_velocity = (d->qpos[0] - x_before) / dt;
    ctrl_cost = (float)CTRL_COST_WEIGHT * ((sq[0] + sq[1]) + sq[2]);  /* numpy's float32 np.sum(np.square(a)) */
    return (FORWARD_REWARD_WEIGHT * x_velocity + HEALTHY_REWARD) - (double)ctrl_cost;
}

/* ---- timing ---- */
static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void print_double(double x) {  /* as Python's json reads it, NaN and infinities included */
    if (isfinite(x)) printf("%.17g", x);
    else printf("%s", isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity");
}

static int by_value(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void print_stats(const char *name, int64_t *ns, size_t n) {  /* sorts `ns`; nearest-rank percentiles */
    static const double qs[3] = {0.5, 0.99, 0.999};
    int64_t at[3];
    double sum = 0, mean, var = 0;
    size_t i;
    if (!n) { printf("\"%s\": null", name); return; }
    for (i = 0; i < n; i++) sum += (double)ns[i];
    mean = sum / (double)n;
    for (i = 0; i < n; i++) var += ((double)ns[i] - mean) * ((double)ns[i] - mean);
    qsort(ns, n, sizeof *ns, by_value);
    for (i = 0; i < 3; i++) {
        size_t k = (size_t)ceil(qs[i] * (double)n);
        at[i] = ns[k ? k - 1 : 0];
    }
    printf("\"%s\": {\"n\": %lu, \"mean_ns\": %.1f, \"std_ns\": %.1f, \"p50_ns\": %lld, \"p99_ns\": %lld, "
           "\"p999_ns\": %lld, \"max_ns\": %lld}", name, (unsigned long)n, mean, sqrt(var / (double)n),
           (long long)at[0], (long long)at[1], (long long)at[2], (long long)ns[n - 1]);
}

static int64_t timer_cost_ns(void) {  /* median cost of one clock_gettime, which every timing includes */
    int64_t d[1001];
    int i;
    for (i = 0; i < 1001; i++) { int64_t t0 = now_ns(); d[i] = now_ns() - t0; }
    qsort(d, 1001, sizeof *d, by_value);
    return d[500];
}

/* ---- the loop ---- */
typedef struct { uint64_t seed; double ret; long steps; int terminated; } episode;

static int parse_count(const char *flag, const char *s, long long *out) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0) {
        fprintf(stderr, "c_loop: %s wants a whole number >= 0, got '%s'\n", flag, s);
        return 0;
    }
    *out = v;
    return 1;
}

int main(int argc, char **argv) {
    const char *model_path = HOPPER_XML, *trace_path = NULL;
    long long seed = 0, n_episodes = 1, n_steps = 0, inject = -1, v;
    char err[1000] = "";
    mjModel *m;
    mjData *d;
    FILE *trace = NULL;
    episode *eps;
    int64_t *policy_ns, *period_ns, t_first, t_prev = 0, t_end, timer_ns;
    size_t cap, n_period = 0, n_eps = 0, i;
    long long step = 0, fallbacks = 0, bad_obs = 0, bad_action = 0;
    long t = 0;
    double obs[OBS_DIM], ep_return = 0, dt, row[TRACE_COLS];
    float obs32[OBS_DIM], act[NU] = {0}, proposed[NU];
    int a, contiguous = 0;

    for (a = 1; a < argc; a++) {
        const char *f = argv[a];
        if (a + 1 >= argc) { fprintf(stderr, "c_loop: %s wants a value\n", f); return 2; }
        if (!strcmp(f, "--model")) model_path = argv[++a];
        else if (!strcmp(f, "--trace")) trace_path = argv[++a];
        else if (!strcmp(f, "--seed")) { if (!parse_count(f, argv[++a], &seed)) return 2; }
        else if (!strcmp(f, "--episodes")) { if (!parse_count(f, argv[++a], &n_episodes)) return 2; }
        else if (!strcmp(f, "--steps")) { if (!parse_count(f, argv[++a], &n_steps)) return 2; }
        else if (!strcmp(f, "--inject-nan")) { if (!parse_count(f, argv[++a], &v)) return 2; inject = v; }
        else { fprintf(stderr, "c_loop: unknown option %s\n", f); return 2; }
    }
    m = mj_loadXML(model_path, NULL, err, sizeof err);
    if (!m) { fprintf(stderr, "c_loop: cannot load %s: %s\n", model_path, err); return 2; }
    if (m->nq != NQ || m->nv != NV || m->nu != NU || m->na != 0) {
        fprintf(stderr, "c_loop: %s is not Hopper's model (nq %ld, nv %ld, nu %ld, na %ld)\n", model_path,
                (long)m->nq, (long)m->nv, (long)m->nu, (long)m->na);
        return 2;
    }
    d = mj_makeData(m);
    if (trace_path && !(trace = fopen(trace_path, "wb"))) {
        fprintf(stderr, "c_loop: cannot write %s\n", trace_path);
        return 2;
    }
    cap = (size_t)(n_steps > n_episodes * MAX_EPISODE_STEPS ? n_steps : n_episodes * MAX_EPISODE_STEPS) + 1;
    policy_ns = malloc(cap * sizeof *policy_ns);
    period_ns = malloc(cap * sizeof *period_ns);
    eps = malloc(cap * sizeof *eps);
    if (!policy_ns || !period_ns || !eps || !d) { fprintf(stderr, "c_loop: out of memory\n"); return 2; }
    dt = m->opt.timestep * FRAME_SKIP;
    timer_ns = timer_cost_ns();

    reset(m, d, (uint64_t)seed);
    observe(d, obs);
    POLICY_RESET();
    if (trace) {
        memset(row, 0, sizeof row);
        row[2] = -1;
        memcpy(row + 6 + NU, obs, sizeof obs);
        fwrite(row, sizeof row, 1, trace);
    }
    t_first = now_ns();
    while ((long long)n_eps < n_episodes || step < n_steps) {
        int64_t t_start = now_ns(), t0, t1;
        int status, terminated, truncated;
        double reward;
        if (contiguous) period_ns[n_period++] = t_start - t_prev;
        t_prev = t_start;
        contiguous = 1;
        for (i = 0; i < OBS_DIM; i++) obs32[i] = (float)obs[i];
        if (step == inject) obs32[0] = NAN;
        t0 = now_ns();
        status = POLICY_ACT(obs32, proposed);
        t1 = now_ns();
        policy_ns[step] = t1 - t0;
        if (status == PPO_POLICY_OK) memcpy(act, proposed, sizeof act);
        else {  /* fallback: hold the last action (and a memory records it as the action applied) */
            fallbacks++;
            if (POLICY_COMMIT(act) != PPO_POLICY_OK) return 3;
            bad_obs += status == PPO_POLICY_NONFINITE_OBS;
            bad_action += status == PPO_POLICY_NONFINITE_ACTION;
        }
        reward = env_step(m, d, act, dt);
        observe(d, obs);
        terminated = !healthy(d);
        truncated = ++t >= MAX_EPISODE_STEPS;
        ep_return += reward;
        step++;
        if (trace) {
            row[0] = (double)n_eps; row[1] = (double)t; row[2] = status; row[3] = terminated; row[4] = truncated;
            row[5] = reward;
            for (i = 0; i < NU; i++) row[6 + i] = act[i];
            memcpy(row + 6 + NU, obs, sizeof obs);
            fwrite(row, sizeof row, 1, trace);
        }
        if (terminated || truncated) {
            eps[n_eps].seed = (uint64_t)(seed + (long long)n_eps);
            eps[n_eps].ret = ep_return; eps[n_eps].steps = t; eps[n_eps].terminated = terminated;
            n_eps++;
            if ((long long)n_eps >= n_episodes && step >= n_steps) break;
            reset(m, d, (uint64_t)(seed + (long long)n_eps));
            observe(d, obs);
            POLICY_RESET();
            memset(act, 0, sizeof act);
            t = 0; ep_return = 0; contiguous = 0;
            if (trace) {
                memset(row, 0, sizeof row);
                row[0] = (double)n_eps; row[2] = -1;
                memcpy(row + 6 + NU, obs, sizeof obs);
                fwrite(row, sizeof row, 1, trace);
            }
        }
    }
    t_end = now_ns();
    if (trace && fclose(trace)) { fprintf(stderr, "c_loop: cannot write %s\n", trace_path); return 2; }

    printf("{\"env_id\": \"%s\", \"mujoco\": \"%s\", \"policy_env_id\": \"%s\", \"steps\": %lld, \"wall_s\": %.6f, "
           "\"steps_per_s\": %.1f, \"timer_ns\": %lld, \"fallbacks\": %lld, \"nonfinite_obs\": %lld, "
           "\"nonfinite_action\": %lld, \"injected_nan_step\": %lld, ", ENV_ID, mj_versionString(), PPO_POLICY_ENV_ID,
           step, (double)(t_end - t_first) * 1e-9, step ? (double)step / ((double)(t_end - t_first) * 1e-9) : 0.0,
           (long long)timer_ns, fallbacks, bad_obs, bad_action, inject < step ? inject : -1);
    print_stats("policy", policy_ns, (size_t)step);
    printf(", ");
    print_stats("period", period_ns, n_period);
    printf(", \"episodes\": [");
    for (i = 0; i < n_eps; i++) {
        printf("%s{\"seed\": %llu, \"return\": ", i ? ", " : "", (unsigned long long)eps[i].seed);
        print_double(eps[i].ret);
        printf(", \"steps\": %ld, \"terminated\": %s}", eps[i].steps, eps[i].terminated ? "true" : "false");
    }
    printf("]}\n");
    free(policy_ns); free(period_ns); free(eps);
    mj_deleteData(d);
    mj_deleteModel(m);
    return 0;
}
