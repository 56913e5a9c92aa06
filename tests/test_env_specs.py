"""One spec per env: every command takes every env with a spec (built-in, a plugin's, or generic from the spaces of an
env gymnasium has; or says in one line what the env lacks), and an id gymnasium does not know is one line naming the
known ids, before anything is made."""
import json
import pytest
from conftest import ppo_trt
from ppo_trt.envs.specs import SPECS, env_ids


def _one_line_error(r, needle):
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and needle in err[0] and 'Traceback' not in r.stderr, r.stderr[-2000:]
    return err[0]


@pytest.mark.parametrize('command', [['train'], ['train', '--fast'], ['run'], ['env-bench'], ['residual-study'],
                                     ['sweep']])
def test_unknown_env_is_one_line(tmp_path, command):
    where = ['--out' if command == ['sweep'] else '--run-dir', tmp_path/'r']
    err = _one_line_error(ppo_trt(*command, '--env-id', 'Swimmer-v99', *where), "unknown environment id 'Swimmer-v99'")
    assert all(env_id in err for env_id in SPECS)  # the known ids, so the fix is in the message
    assert not (tmp_path/'r').exists()


@pytest.mark.slow
def test_fast_walker2d_v5(tmp_path):
    "Walker2d-v5 (no PID preset, EnvPool has it) trains with fast PPO."
    r = ppo_trt('train', '--fast', '--env-id', 'Walker2d-v5', '--timesteps', 2048, '--run-dir', tmp_path/'w')
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((tmp_path/'w'/'train.json').read_text())
    assert rec['env_id'] == 'Walker2d-v5' and rec['timesteps'] == 2048 and rec['obs_dim'] == 17 and rec['act_dim'] == 6
    assert rec['env_backend'].startswith('envpool') == ('Walker2d-v5' in env_ids('envpool_id'))


@pytest.mark.slow
def test_sb3_halfcheetah_v5_and_no_pid_baseline(tmp_path):
    "HalfCheetah-v5 trains with SB3 and exports; evaluate asked for the PID fallback says in one line there is none."
    d = tmp_path/'hc'
    r = ppo_trt('train', '--env-id', 'HalfCheetah-v5', '--timesteps', 1024, '--preset', 'smoke', '--run-dir', d)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((d/'train.json').read_text())['env_id'] == 'HalfCheetah-v5'
    assert ppo_trt('export', '--run-dir', d).returncode == 0
    _one_line_error(ppo_trt('evaluate', '--run-dir', d, '--episodes', 1, '--fallback', 'pid'),
                    'no PID preset for HalfCheetah-v5')
    assert not (d/'evaluate.json').exists()


@pytest.mark.parametrize('command, needle', [(['sweep'], 'PID fallback, which exists for Hopper-v4, Hopper-v5'),
                                             (['residual-study'], 'no PID preset for Walker2d-v5'),
                                             (['train', '--expert', 'pid'], 'no PID preset for Walker2d-v5')])
def test_commands_needing_a_pid_baseline_say_so(tmp_path, command, needle):
    "Walker2d-v5 has a spec but no PID preset: what runs one beside the policy refuses it in one line, making nothing."
    where = ['--out' if command == ['sweep'] else '--run-dir', tmp_path/'r']
    _one_line_error(ppo_trt(*command, '--env-id', 'Walker2d-v5', *where), needle)
    assert not (tmp_path/'r').exists()


@pytest.mark.slow  # over 7 s: with the long checks (pytest -m slow tests)
def test_evaluate_inverted_pendulum_default_phases(tmp_path):
    "InvertedPendulum has no body to push: evaluate's default phases leave the push out instead of failing on it."
    d = tmp_path/'ip'
    r = ppo_trt('train', '--env-id', 'InvertedPendulum-v4', '--timesteps', 256, '--preset', 'smoke', '--run-dir', d)
    assert r.returncode == 0, r.stderr[-2000:]
    assert ppo_trt('export', '--run-dir', d).returncode == 0
    r = ppo_trt('evaluate', '--run-dir', d, '--backends', 'ort', '--episodes', 1)
    assert r.returncode == 0, r.stderr[-2000:]
    phases = [p['phase'] for p in json.loads((d/'evaluate.json').read_text())['phases']]
    assert phases == ['nominal', 'noise', 'delay', 'mass', 'friction', 'actuator', 'trip'], phases
    _one_line_error(ppo_trt('evaluate', '--run-dir', d, '--phases', 'nominal,push', '--episodes', 1),
                    'InvertedPendulum-v4 cannot take phase push (no body to push)')
