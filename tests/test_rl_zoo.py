"`ppo-trt import` of RL Zoo run folders and off-policy agents, through the real console script."
import json, zipfile
from collections import OrderedDict
import numpy as np, pytest, yaml
from conftest import ppo_trt, one_line

def zoo_folder(logs, algo='tqc', env='Hopper-v3', config=None):
    "An RL Zoo run folder of an untrained `algo` agent for Hopper: logs/algo/ENV_1/{ENV.zip, ENV/config.yml, args.yml}."
    import gymnasium as gym
    from stable_baselines3 import SAC, TD3
    from sb3_contrib import TQC
    root = logs/algo/f'{env}_1'
    (root/env).mkdir(parents=True)
    cls = dict(sac=SAC, td3=TD3, tqc=TQC)[algo]
    cls('MlpPolicy', gym.make('Hopper-v4'), buffer_size=100, seed=0).save(root/f'{env}.zip')
    for name, pairs in (('config.yml', config or dict(policy='MlpPolicy')), ('args.yml', dict(algo=algo, env=env))):
        (root/env/name).write_text(yaml.dump(OrderedDict(sorted(pairs.items()))))
    return root

@pytest.mark.slow
def test_an_rl_zoo_tqc_folder_imports_and_deploys(tmp_path):
    root, rd = zoo_folder(tmp_path/'logs'), tmp_path/'run'
    r = ppo_trt('import', root, '--env-id', 'Hopper-v4', '--run-dir', rd)
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'TQC' in r.stdout and "SB3's predict" in r.stdout, r.stdout
    meta = {e.key: e.value for e in __import__('onnx').load(str(rd/'policy.onnx')).metadata_props}
    origin = json.loads(meta['imported_from'])
    assert origin['algorithm'] == 'TQC' and origin['rl_zoo']['algo'] == 'tqc'
    assert origin['parity']['max_abs_err'] <= origin['parity']['bound']
    from ppo_trt.backends.registry import load
    obs = np.random.default_rng(0).normal(size=(8, 11)).astype(np.float32)
    a, b = load('ort', rd)(obs), load('native', rd)(obs)
    assert a.shape == (8, 3) and np.abs(a - b).max() <= 128 * np.finfo(np.float32).eps * max(1, np.abs(a).max())

@pytest.mark.parametrize('config, says', [
    (dict(env_wrapper='sb3_contrib.common.wrappers.TimeFeatureWrapper'), 'TimeFeatureWrapper'),
    (dict(env_wrapper='my_pkg.Wrapper'), 'my_pkg.Wrapper'),
    (dict(normalize=True), 'vecnormalize.pkl is missing'),
])
def test_a_folder_it_cannot_deploy_is_refused_in_one_line(tmp_path, config, says):
    root, rd = zoo_folder(tmp_path/'logs', 'sac', config=config), tmp_path/'run'
    one_line(ppo_trt('import', root, '--env-id', 'Hopper-v4', '--run-dir', rd), 2, says)
    assert not rd.exists()

def test_a_python_tag_in_config_yml_is_never_run(tmp_path):
    root, rd = zoo_folder(tmp_path/'logs', 'td3'), tmp_path/'run'
    mark = tmp_path/'ran'
    (root/'Hopper-v3'/'config.yml').write_text(f"!!python/object/apply:os.system ['touch {mark}']\n")
    one_line(ppo_trt('import', root, '--env-id', 'Hopper-v4', '--run-dir', rd), 2, 'cannot be read as data')
    assert not mark.exists() and not rd.exists()

def test_a_folder_that_is_no_run_names_what_to_pass(tmp_path):
    (tmp_path/'models').mkdir()
    (tmp_path/'models'/'agent.zip').write_bytes(b'')
    err = one_line(ppo_trt('import', tmp_path/'models', '--env-id', 'Hopper-v4'), 2, 'agent.zip', 'logs/ALGO/ENV_ID_N')
    assert 'does not exist' not in err

def test_an_off_policy_zip_with_a_bomb_of_a_net_arch_is_refused_before_building(tmp_path):
    root = zoo_folder(tmp_path/'logs', 'sac')
    src, bad = root/'Hopper-v3.zip', tmp_path/'wide.zip'
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(bad, 'w') as zout:
        for i in zin.infolist():
            blob = zin.read(i)
            if i.filename == 'data':
                d = json.loads(blob); d['policy_kwargs'] = {**d.get('policy_kwargs', {}), 'net_arch': [16384] * 64}
                blob = json.dumps(d).encode()
            zout.writestr(i, blob)
    one_line(ppo_trt('import', bad, '--env-id', 'Hopper-v4', '--run-dir', tmp_path/'run'), 2, 'declare', 'weights')
