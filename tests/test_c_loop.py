"""The C control loop (measure.c_loop, `ppo-trt c-loop`): Hopper on MuJoCo's C API with the C policy library,
matching gymnasium step by step and the Python evaluate's returns, and its fallback on a NaN observation."""
import json
import numpy as np
import pytest
from conftest import ppo_trt
from ppo_trt.core.records import read_record
from ppo_trt.measure.c_loop import (c_loop_missing, build_c_loop, run_c_loop, read_trace, check_against_gymnasium,
                                    fallback_check, python_returns)

pytestmark = pytest.mark.skipif(bool(c_loop_missing()), reason=c_loop_missing() or 'the C loop builds here')

@pytest.fixture(scope='module')
def built(run_dir, tmp_path_factory):
    "The C loop of the session run's policy, built outside the run folder."
    return build_c_loop(run_dir, tmp_path_factory.mktemp('c_loop')/'loop')

def test_builds_warning_free(built):
    assert built['warnings'] == [], built['warnings']
    assert json.loads(open(f"{built['path']}/manifest.json").read())['onnx_sha256'] == built['onnx_sha256']

def test_episodes_match_gymnasium_step_by_step(built, tmp_path):
    out = run_c_loop(built['exe'], seed=0, episodes=4, trace=tmp_path/'trace.bin')
    assert [e['seed'] for e in out['episodes']] == [0, 1, 2, 3] and out['fallbacks'] == 0
    trace = read_trace(tmp_path/'trace.bin')
    check = check_against_gymnasium(trace, seed=0)
    assert check == dict(episodes=4, steps=out['steps'], reset_max_abs=0.0, obs_max_abs=0.0, reward_max_abs=0.0,
                         termination_mismatches=0, passed=True)
    ends = trace['terminated'] | trace['truncated']
    assert ends.sum() == 4 and np.isclose(trace['reward'][trace['episode'] == 0].sum(), out['episodes'][0]['return'])

def test_reset_from_a_seed_past_32_bits(built, tmp_path):
    "SeedSequence takes a seed >= 2**32 as two words: the C reset still starts where gymnasium's does."
    run_c_loop(built['exe'], seed=2**32 + 7, episodes=1, trace=tmp_path/'trace.bin')
    assert check_against_gymnasium(read_trace(tmp_path/'trace.bin'), seed=2**32 + 7)['passed']

def test_the_check_sees_a_changed_step(built, tmp_path):
    run_c_loop(built['exe'], seed=0, episodes=1, trace=tmp_path/'trace.bin')
    trace = read_trace(tmp_path/'trace.bin')
    trace['reward'][1] += 1e-6
    bad = check_against_gymnasium(trace)
    assert not bad['passed'] and 0.9e-6 < bad['reward_max_abs'] < 1.1e-6

def test_returns_equal_the_python_evaluates(built, run_dir):
    c = [e['return'] for e in run_c_loop(built['exe'], seed=5, episodes=3)['episodes']]
    py = python_returns(run_dir, [5, 6, 7], ('native-c',))
    assert py['ppo:native-c'] == c  # the same kernel and the same MuJoCo: the same episodes, to the last bit

@pytest.mark.parametrize('step', [0, 3])
def test_a_nan_observation_engages_the_fallback_once(built, step):
    fb = fallback_check(built['exe'], seed=0, inject_step=step)
    assert fb == dict(injected_step=step, status=2, fallbacks=1, nonfinite_obs=1, action_held=True,
                      check_passed=True, passed=True)

@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_cli_writes_the_record(run_copy):
    r = ppo_trt('c-loop', '--run-dir', run_copy, '--steps', 3000, '--episodes', 2)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert 'Traceback' not in r.stderr and 'PASS' in r.stdout and 'FAIL' not in r.stdout
    rec = read_record(run_copy/'c_loop.json')
    assert rec.steps == 3000 and rec.check.passed and rec.fallback.fallbacks == 1
    assert rec.policy.n == 3000 and rec.period.p999_ns >= rec.period.p50_ns > 0
    assert len(rec.returns) == 2 and rec.python_returns['ppo:native-c'] == rec.returns

def test_cli_refuses_a_folder_it_did_not_make(run_copy):
    mine = run_copy/'c_loop'
    mine.mkdir(); (mine/'controller.c').write_text('int main(void) { return 0; }')
    r = ppo_trt('c-loop', '--run-dir', run_copy, '--steps', 10, '--episodes', 1)
    assert r.returncode == 2 and r.stderr.count('\n') == 1 and 'Traceback' not in r.stderr, r.stderr
    assert 'was not made by `ppo-trt c-loop`' in r.stderr
    assert [p.name for p in mine.iterdir()] == ['controller.c'] and not (run_copy/'c_loop.json').exists()

def test_refuses_a_policy_for_another_env():
    "A policy that is not Hopper-v4's: one line naming the problem, nothing written."
    from ppo_trt.measure.c_loop import hopper_constants
    from ppo_trt.core.files import BadInputError
    with pytest.raises(BadInputError, match='the C loop steps Hopper-v4 only'): hopper_constants('Pendulum-v1')
