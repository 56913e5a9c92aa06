"""Expert + residual runs through export and every backend: folded (InvertedPendulum PID) and not foldable
(Hopper PID gait)."""
import numpy as np, pytest
from ppo_trt.backends import registry as B
from ppo_trt.cli import main
from ppo_trt.core.files import BadInputError, load_json
from ppo_trt.envs.controllers import run_episode
from ppo_trt.export.onnx import onnx_metadata
from ppo_trt.train.residual import train_residual
from ppo_trt.export.deployment import export_run, make_expert, residual_env
from ppo_trt.envs.gym import make_env

SMOKE = dict(preset_name='smoke', eval_freq=256, n_eval_episodes=1, final_eval_episodes=1, progress=False)


def _trained_and_exported(tmp_path_factory, env_id, scale, timesteps):
    d = tmp_path_factory.mktemp(env_id)/'run'
    train_residual(d, env_id, expert='pid', residual_scale=scale, timesteps=timesteps, **SMOKE)
    export_run(d)
    return d


@pytest.fixture(scope='module')
def folded(tmp_path_factory): return _trained_and_exported(tmp_path_factory, 'InvertedPendulum-v4', 0.5, 512)


@pytest.fixture(scope='module')
def unfolded(tmp_path_factory): return _trained_and_exported(tmp_path_factory, 'Hopper-v4', 0.3, 256)


def test_records_describe_the_env_not_the_residual(folded):
    "train.json and the ONNX metadata give the env's action bounds ([-3, 3]), not the residual's [-1, 1]."
    t, meta = load_json(folded/'train.json'), onnx_metadata(folded/'policy.onnx')
    assert t['action_low'] == [-3.0] and t['action_high'] == [3.0] and t['obs_dim'] == 4
    assert meta['action_low'] == [-3.0] and meta['obs_dim'] == 4


def test_folded_backends_agree_with_expert_plus_residual(folded):
    obs = np.load(folded/'export_obs.npy')
    meta = onnx_metadata(folded/'policy.onnx')['residual']
    assert meta['folded'] and meta['expert'] == 'pid'
    ex = make_expert('pid', 'InvertedPendulum-v4')
    sb3 = B.load('sb3', folded)
    assert isinstance(sb3, B.ResidualRunner)  # SB3 predicts the residual alone; the expert is added on the host
    ref = sb3(obs)
    assert np.abs(ref - ex.act_batch(obs)).max() <= 0.5 + 1e-6  # the residual moves the expert by at most the scale
    for name in ('torch', 'ort', 'ort-iobind'):
        r = B.load(name, folded)
        assert not isinstance(r, B.ResidualRunner) and r.info['residual'] == 'expert folded in'
        assert np.abs(r(obs) - ref).max() < 1e-5, name


def test_unfolded_runs_expert_on_host(unfolded):
    meta = onnx_metadata(unfolded/'policy.onnx')['residual']
    assert not meta['folded'] and 'oscillating setpoint' in meta['fold_reason']
    assert 'oscillating setpoint' in load_json(unfolded/'export.json')['metadata']['residual']['fold_reason']
    net = B.load('ort', unfolded, network_only=True)
    assert 'residual network only' in net.info['residual']
    obs = np.load(unfolded/'export_obs.npy')
    assert np.abs(net(obs)).max() <= 1.0  # the residual, in [-1, 1]
    composed = B.load('ort', unfolded)
    assert isinstance(composed, B.ResidualRunner) and composed.info['expert_on_host']['kind'] == 'pid'
    with pytest.raises(BadInputError, match='one observation at a time'): composed(obs[:2])
    env = make_env('Hopper-v4')
    r_ort, r_sb3 = (run_episode(env, B.load(n, unfolded), seed=5) for n in ('ort', 'sb3'))
    assert r_ort[1] == r_sb3[1] and abs(r_ort[0] - r_sb3[0]) < 1e-3 * max(1.0, abs(r_sb3[0]))


def test_composed_runner_replays_the_wrapped_env(unfolded):
    "The deployed composition acts exactly as the training env did (expert state reset per episode)."
    model_env = residual_env('Hopper-v4', 'pid', 0.3)
    sb3_net = B.load('sb3', unfolded, network_only=True)
    class Residual:
        def predict(self, obs, deterministic=True): return sb3_net.predict(obs)
    train_side = run_episode(model_env, Residual(), seed=2)
    deployed = run_episode(make_env('Hopper-v4'), B.load('sb3', unfolded), seed=2)
    assert train_side[1] == deployed[1] and abs(train_side[0] - deployed[0]) < 1e-6 * max(1.0, abs(train_side[0]))


def test_expert_for_another_env_is_refused(folded, tmp_path, capsys):
    with pytest.raises(BadInputError, match='trained for InvertedPendulum-v4'): make_expert(folded, 'Hopper-v4')
    rc = main(['train', '--env-id', 'Hopper-v4', '--expert', str(folded), '--preset', 'smoke', '--timesteps', '256',
               '--run-dir', str(tmp_path/'x')])
    assert rc == 2 and 'trained for InvertedPendulum-v4' in capsys.readouterr().err
    assert not (tmp_path/'x'/'policy.zip').exists()


@pytest.mark.parametrize('argv, msg', [
    (['--expert', 'pid', '--env-id', 'Walker2d-v4'], 'no PID preset for Walker2d-v4'),
    (['--expert', 'nope'], 'unknown expert'),
    (['--expert', 'pid', '--residual-scale', '0'], 'argument --residual-scale: must be > 0'),
    (['--expert', 'pid', '--append-expert-obs'], 'needs a stateless expert'),
])
def test_bad_residual_arguments(argv, msg, tmp_path, capsys):
    try: rc = main(['train', '--preset', 'smoke', '--timesteps', '256', '--run-dir', str(tmp_path/'r'), *argv])
    except SystemExit as e: rc = e.code  # argparse's own refusal of a value out of range
    assert rc == 2 and msg in capsys.readouterr().err
    assert not (tmp_path/'r').exists()


@pytest.mark.slow
def test_evaluate_with_residual_run(run_copy, unfolded, folded):
    from conftest import ppo_trt
    from ppo_trt.core.records import load_artifact
    r = ppo_trt('evaluate', '--run-dir', run_copy, '--phases', 'nominal,push', '--episodes', 2, '--backends', 'ort',
                '--deadline-us', 1e6, '--residual-run', unfolded)
    assert r.returncode == 0, r.stderr[-2000:]
    rep = load_artifact(run_copy, 'evaluate_record')
    assert all(set(p.returns) == {'pid', 'residual', 'ppo:torch', 'ppo:ort'} for p in rep.phases)
    r = ppo_trt('evaluate', '--run-dir', run_copy, '--phases', 'nominal', '--episodes', 1, '--residual-run', folded)
    assert r.returncode == 2 and 'needs a residual policy for Hopper-v4' in r.stderr
