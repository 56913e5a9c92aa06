"""The RRLS Hopper uncertainty sets (`sweep --rrls`): the sets and mesh as RRLS defines them, the batched mesh equal to
RRLS's wrapper on gymnasium, the floor-friction fact the sets run into, and the per-run record, refused or stale
where it should be."""
import numpy as np, pytest
from ppo_trt.core.files import BadInputError, load_json
from ppo_trt.core.records import remove_derived
from ppo_trt.envs.gym import RRLS_ENV_ID, RRLS_HOPPER_DEFAULTS, RRLS_HOPPER_SETS, RRLSParams, make_env, rrls_grid
from ppo_trt.export.onnx import export
from ppo_trt.studies.rrls import BatchPID, rrls_env, rrls_evaluate, rrls_fresh, rrls_returns, rrls_summary
from ppo_trt.studies.sweep import RUN_SETTINGS, check_same_settings, run_finished, sweep_settings
from ppo_trt.train.fast_ppo import fast_train


def test_sets_and_mesh_are_rrls():
    "rrls/envs/hopper.py HopperParamsBound and rrls/evaluate.py generate_evaluation_set (10 cuts, high end out)."
    assert RRLS_HOPPER_SETS['3d'] == dict(worldfriction=[0.1, 3.0], torsomass=[0.1, 3.0], thighmass=[0.1, 4.0])
    assert [len(rrls_grid(s)) for s in ('1d', '2d', '3d')] == [10, 100, 1000]
    for s, bounds in RRLS_HOPPER_SETS.items():
        for k, (lo, hi) in bounds.items():
            values = sorted({p[k] for p in rrls_grid(s)})
            assert values[0] == lo and max(values) < hi and len(values) == 10
    with pytest.raises(BadInputError, match='no parameter'): RRLSParams(make_env(RRLS_ENV_ID), torso=1.0)


def test_the_batched_mesh_is_rrls_on_gymnasium():
    env, grid = rrls_env('2d', seed=11)
    rows = [0, 37, 99]
    singles = [RRLSParams(make_env(RRLS_ENV_ID), **grid[i]) for i in rows]
    obs = env.reset_float64()
    for e, i in zip(singles, rows): np.testing.assert_array_equal(e.reset(seed=11 + i)[0], obs[i])
    rng, alive = np.random.default_rng(1), [True] * len(rows)
    for _ in range(150):
        a = rng.uniform(-1, 1, (100, 3)) * 0.4
        _, reward, term, _, final = env.step_float64(a)
        for j, (e, i) in enumerate(zip(singles, rows)):
            if not alive[j]: continue
            o, r, te, tr, _ = e.step(a[i])
            np.testing.assert_array_equal(o, final[i]); assert r == reward[i] and te == term[i]
            alive[j] = not (te or tr)
    m = singles[1].unwrapped.model
    assert (m.geom_friction[0, 0], m.body_mass[1], m.body_mass[2]) == (grid[37]['worldfriction'],
                                                                       grid[37]['torsomass'],
                                                                       RRLS_HOPPER_DEFAULTS['thighmass'])


def test_floor_friction_below_the_foots_changes_nothing():
    "MuJoCo takes the larger friction of a contact's geoms; the foot's is 2.0: lower floors give the same episode."
    pid = BatchPID(RRLS_ENV_ID, 10)
    returns = rrls_returns(pid, '1d', seed=3)
    again = rrls_returns(BatchPID(RRLS_ENV_ID, 10), '1d', seed=3)
    np.testing.assert_array_equal(returns, again)  # deterministic
    frictions = [p['worldfriction'] for p in rrls_grid('1d')]
    low = [i for i, f in enumerate(frictions) if f < 2.0]
    single = RRLSParams(make_env(RRLS_ENV_ID), worldfriction=frictions[low[0]])
    other = RRLSParams(make_env(RRLS_ENV_ID), worldfriction=frictions[low[-1]])
    a, b = single.reset(seed=5)[0], other.reset(seed=5)[0]
    for _ in range(200):
        act = np.clip(-5 * a[2:5] - 0.5 * a[8:11], -1, 1)
        a, *_ = single.step(act); b, *_ = other.step(act)
        np.testing.assert_array_equal(a, b)
    s = rrls_summary(returns, '1d')
    assert s['worlds'] == 10 and s['worst'] <= s['mean'] and set(s['worst_world']) == {'worldfriction'}


@pytest.fixture(scope='module')
def scored(tmp_path_factory):
    d = tmp_path_factory.mktemp('rrls')/'run'
    fast_train(d, env_id='Hopper-v4', timesteps=4096, history=2, progress=False, final_eval_episodes=1)
    export(d)
    return d, rrls_evaluate(d, sets=('1d', '2d'))


def test_run_record_says_what_ran_on_what(scored):
    d, rec = scored
    assert rec['backend'] == 'ort' and rec['env_id'] == 'Hopper-v5' and rec['trained_on'] == 'Hopper-v4'
    assert load_json(d/'rrls.json') == rec and len(rec['sets']['2d']['returns']) == 100
    assert rec['sets']['1d']['worst'] == min(rec['sets']['1d']['returns'])
    assert rrls_fresh(d, ('1d', '2d')) and not rrls_fresh(d, ('1d', '2d', '3d'))


def test_a_new_policy_makes_the_record_stale(scored, tmp_path):
    d, _ = scored
    import shutil
    c = tmp_path/'copy'
    shutil.copytree(d, c)
    (c/'policy.onnx').write_bytes((c/'policy.onnx').read_bytes() + b'\0')  # another file than the one scored
    assert rrls_fresh(c, ('1d',)) is None
    remove_derived(c)
    assert not (c/'rrls.json').exists()  # retraining removes it with everything made from the old policy


def test_refusals(tmp_path):
    fast_train(tmp_path/'pend', env_id='Pendulum-v1', timesteps=1024, progress=False, final_eval_episodes=1)
    with pytest.raises(BadInputError, match="RRLS sets here are Hopper's"): rrls_evaluate(tmp_path/'pend')
    with pytest.raises(BadInputError, match='drop --rrls'):
        sweep_settings('InvertedPendulum-v4', seeds=1, variants='nominal', fast=True, rrls=True)


def test_sweep_settings_keep_older_sweeps_resumable():
    "rrls is a run setting; a sweep without it records None, as sweeps made before it (no key) read back."
    assert 'rrls' in RUN_SETTINGS
    new = sweep_settings('Hopper-v4', seeds=1, variants='nominal', fast=True, timesteps=4096)
    old = {k: v for k, v in new.items() if k != 'rrls'}
    check_same_settings(old, new)
    with pytest.raises(BadInputError, match='rrls'):
        check_same_settings(old, sweep_settings('Hopper-v4', seeds=1, variants='nominal', fast=True, timesteps=4096,
                                                rrls=True))
