/* test_ppo_policy.c: the library against ONNX Runtime's actions, row by row, singly and batched,
 * and the refusal of a NaN observation. Exit status 0 when everything holds. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "ppo_policy.h"
#include "ppo_policy_vectors.h"

static float batch[PPO_TEST_ROWS][PPO_POLICY_ACT_DIM];

static double worse(const float *got, const float *want, int n, double worst) {
    /* the larger of `worst` and the largest |got - want| of n values; a NaN error counts as the worst */
    int j;
    for (j = 0; j < n; j++) {
        double e = fabs((double)got[j] - (double)want[j]);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

static double worst_error(const float got[][PPO_POLICY_ACT_DIM]) {
    double worst = 0;
    int r;
    for (r = 0; r < PPO_TEST_ROWS; r++) worst = worse(got[r], ppo_test_act[r], PPO_POLICY_ACT_DIM, worst);
    return worst;
}

#if PPO_POLICY_HISTORY_ACTIONS > 0
static double sequence_error(int *failed_calls) {
    /* the rows as one sequence through the memory: reset, step, and the fallback's action committed */
    static ppo_policy_memory memory;
    float act[PPO_POLICY_ACT_DIM];
    double worst = 0;
    int r;
    for (r = 0; r < PPO_TEST_ROWS; r++) {
        if (r % PPO_TEST_EPISODE == 0) ppo_policy_reset(&memory);
        *failed_calls += ppo_policy_step(&memory, ppo_test_obs[r], act) != PPO_POLICY_OK;
        worst = worse(act, ppo_test_seq_act[r], PPO_POLICY_ACT_DIM, worst);
        if (r % PPO_TEST_FALLBACK_EVERY == PPO_TEST_FALLBACK_EVERY - 1)
            *failed_calls += ppo_policy_commit(&memory, ppo_test_seq_fallback[r]) != PPO_POLICY_OK;
    }
    return worst;
}
#endif

#ifdef PPO_POLICY_STATE_DIM
static double state_error(int *failed_calls) {
    /* the rows as the sequence they are: the env's observations through ppo_policy_step_state, which must carry the
       state from row to row as ONNX Runtime did (a reset every PPO_TEST_STATE_EPISODE rows) */
    static ppo_policy_state state;
    float act[PPO_POLICY_ENV_ACT_DIM];
    double worst = 0;
    int r;
    for (r = 0; r < PPO_TEST_ROWS; r++) {
        if (r % PPO_TEST_STATE_EPISODE == 0) ppo_policy_state_reset(&state);
        *failed_calls += ppo_policy_step_state(&state, ppo_test_obs[r] + PPO_POLICY_ENV_OBS_AT, act) != PPO_POLICY_OK;
        worst = worse(act, ppo_test_act[r] + PPO_POLICY_ENV_ACT_AT, PPO_POLICY_ENV_ACT_DIM, worst);
    }
    return worst;
}
#endif

int main(void) {
    static float single[PPO_TEST_ROWS][PPO_POLICY_ACT_DIM];
    float obs[PPO_POLICY_OBS_DIM], act[PPO_POLICY_ACT_DIM];
    int r, j, failed_calls = 0, nan_status, untouched = 1, batch_nan_status;
    double e_single, e_batch, e_sequence = 0;
    for (r = 0; r < PPO_TEST_ROWS; r++) failed_calls += ppo_policy_act(ppo_test_obs[r], single[r]) != PPO_POLICY_OK;
    failed_calls += ppo_policy_act_batch(&ppo_test_obs[0][0], &batch[0][0], PPO_TEST_ROWS) != PPO_POLICY_OK;
    e_single = worst_error((const float (*)[PPO_POLICY_ACT_DIM])single);
    e_batch = worst_error((const float (*)[PPO_POLICY_ACT_DIM])batch);
    memcpy(obs, ppo_test_obs[0], sizeof obs);
    obs[PPO_POLICY_OBS_DIM - 1] = NAN;
    for (j = 0; j < PPO_POLICY_ACT_DIM; j++) act[j] = 12345.0f;
    nan_status = ppo_policy_act(obs, act);
    for (j = 0; j < PPO_POLICY_ACT_DIM; j++) untouched &= act[j] == 12345.0f;
    batch_nan_status = ppo_policy_act_batch(obs, &batch[0][0], 1);
#ifdef PPO_POLICY_STATE_DIM
    e_sequence = state_error(&failed_calls);
    printf("recurrent state of %d floats: the rows as one sequence (a reset every %d), max abs err %.2e\n",
           PPO_POLICY_STATE_DIM, PPO_TEST_STATE_EPISODE, e_sequence);
#endif
#if PPO_POLICY_HISTORY_ACTIONS > 0
    e_sequence = sequence_error(&failed_calls);
    printf("memory of %d actions: the rows as one sequence (a reset every %d, a fallback committed every %d), "
           "max abs err %.2e\n", PPO_POLICY_HISTORY_ACTIONS, PPO_TEST_EPISODE, PPO_TEST_FALLBACK_EVERY, e_sequence);
#endif
    printf("ppo_policy %s (kernel %s): %d rows, max abs err vs ONNX Runtime %.2e one by one, %.2e batched "
           "(tolerance %.2e); %d failed calls; NaN obs: status %d (batched %d), action %s\n", PPO_POLICY_ENV_ID,
           ppo_policy_kernel(), PPO_TEST_ROWS, e_single, e_batch, PPO_TEST_TOL, failed_calls, nan_status,
           batch_nan_status, untouched ? "untouched" : "WRITTEN");
    return !(failed_calls == 0 && e_single <= PPO_TEST_TOL && e_batch <= PPO_TEST_TOL && e_sequence <= PPO_TEST_TOL
             && untouched
             && nan_status == PPO_POLICY_NONFINITE_OBS && batch_nan_status == PPO_POLICY_NONFINITE_OBS);
}
