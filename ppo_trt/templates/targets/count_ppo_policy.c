/* count_ppo_policy.c: instructions per action under emulation (ppo-trt export-c --target).
 * ppo_policy_act on the first PPO_COUNT_ROWS test observations, each call between two calls of ppo_count_mark: in
 * QEMU's trace of every instruction, the entries into ppo_count_mark delimit each call. With PPO_COUNT_SYSTICK (a
 * Cortex-M) each call is also timed by the SysTick counter, which QEMU's -icount drives from the instruction count,
 * and the ticks are printed by semihosting. Exit status 0 when every call returned PPO_POLICY_OK. */
#include <stdint.h>
#include <stdio.h>
#include "ppo_policy.h"
#include "ppo_policy_vectors.h"
#ifndef PPO_COUNT_ROWS
#define PPO_COUNT_ROWS PPO_TEST_ROWS
#endif
#ifdef PPO_COUNT_SYSTICK
#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define NOW() SYST_CVR
#else
#define NOW() 0u
#endif

void ppo_count_mark(int where);
__attribute__((noinline)) void ppo_count_mark(int where) { __asm__ volatile("" : : "r"(where) : "memory"); }

int main(void) {
    float act[PPO_POLICY_ACT_DIM];
    uint32_t t0, t1, ticks, fewest = 0xFFFFFFu, most = 0;
    unsigned long total = 0;
    int r, failed = 0;
#ifdef PPO_COUNT_SYSTICK
    SYST_RVR = 0xFFFFFFu; SYST_CVR = 0u; SYST_CSR = 5u;  /* counting the processor's clock, no interrupt */
#endif
    for (r = 0; r < PPO_COUNT_ROWS; r++) {
        ppo_count_mark(2 * r);
        t0 = NOW();
        failed += ppo_policy_act(ppo_test_obs[r], act) != PPO_POLICY_OK;
        t1 = NOW();
        ppo_count_mark(2 * r + 1);
        ticks = (t0 - t1) & 0xFFFFFFu;  /* SysTick counts down, in 24 bits */
        total += ticks;
        if (ticks < fewest) fewest = ticks;
        if (ticks > most) most = ticks;
    }
#ifdef PPO_COUNT_SYSTICK
    printf("systick: %d calls, ticks per call: fewest %lu, most %lu, total %lu; %d failed calls\n", PPO_COUNT_ROWS,
           (unsigned long)fewest, (unsigned long)most, total, failed);
#else
    (void)total; (void)fewest; (void)most;
#endif
    return failed != 0;
}
