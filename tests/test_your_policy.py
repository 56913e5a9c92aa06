"""Policies trained elsewhere: actor ONNX files from Isaac Lab / rsl_rl / CleanRL exporters and SB3 models, made here
with torch and SB3 (no committed binaries), go through bench, export-c, import and evaluate; parity on every CPU
backend that accepts the graph; untrusted files stay data."""
import json, os, pickle, shutil, warnings, zipfile
from pathlib import Path
import numpy as np
import pytest
from conftest import ppo_trt
from ppo_trt.backends import registry as B

torch = pytest.importorskip('torch')
QUICK = ['--warmup', '10', '--iters', '100', '--batches', '1,16', '--sweep-seconds', '0.02']
CPU = [n for n, b in B.backends().items() if not b.gpu and not b.runner.needs_run]  # backends that read an ONNX file


def mlp(sizes, act=torch.nn.ELU):
    "Linear layers of `sizes` with `act` between them."
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]): layers += [torch.nn.Linear(a, b), act()]
    return torch.nn.Sequential(*layers[:-1]).eval()


class Recurrent(torch.nn.Module):
    "rsl_rl's recurrent actor as its exporter runs it: one step of the GRU / LSTM, then the MLP."
    def __init__(self, lstm, obs=10, hidden=16, act=3, layers=1):
        super().__init__()
        self.lstm, self.layers = lstm, layers
        self.rnn = (torch.nn.LSTM if lstm else torch.nn.GRU)(obs, hidden, num_layers=layers)
        self.actor = mlp([hidden, 32, act])
    def forward(self, obs, h, c=None):
        if self.lstm:
            y, (h, c) = self.rnn(obs.unsqueeze(0), (h, c))
            return self.actor(y.squeeze(0)), h, c
        y, h = self.rnn(obs.unsqueeze(0), h)
        return self.actor(y.squeeze(0)), h


def export(module, args, path, **kw):
    "torch.onnx.export as a trainer calls it (legacy exporter unless dynamo=True)."
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        torch.onnx.export(module, args, str(path), **{'dynamo': False, 'opset_version': 17, **kw})
    return Path(path)


@pytest.fixture(scope='module')
def actors(tmp_path_factory):
    "{name: (path, torch module)}: the actors other trainers export, made with torch."
    d = tmp_path_factory.mktemp('actors')
    torch.manual_seed(0)
    out = {}
    isaac = mlp([48, 512, 256, 128, 12])  # Isaac Lab / rsl_rl: obs -> actions, a batch of 1, opset 11
    out['isaac'] = export(isaac, torch.zeros(1, 48), d/'anymal.onnx', input_names=['obs'], output_names=['actions'],
                          opset_version=11), isaac
    cleanrl = mlp([17, 64, 64, 6], torch.nn.Tanh)  # CleanRL: the names torch picks
    out['cleanrl'] = export(cleanrl, torch.zeros(1, 17), d/'cleanrl.onnx'), cleanrl
    for lstm, layers in ((False, 1), (True, 1), (False, 2), (True, 2)):  # rsl_rl's default: one layer
        m = Recurrent(lstm, layers=layers).eval()
        args = (torch.zeros(1, 10), torch.zeros(layers, 1, 16)) + ((torch.zeros(layers, 1, 16),) if lstm else ())
        names = ['obs', 'h_in'] + (['c_in'] if lstm else []), ['actions', 'h_out'] + (['c_out'] if lstm else [])
        name = ('lstm' if lstm else 'gru') + ('' if layers == 1 else str(layers))
        out[name] = export(m, args, d/f'{name}.onnx', input_names=names[0], output_names=names[1], opset_version=11), m
    return out


@pytest.mark.slow  # over 4 s: the quick suite keeps the README test command under 10 minutes
def test_bench_and_export_c_take_an_actor_without_metadata(actors, tmp_path):
    "An Isaac-Lab-style actor (no metadata, obs -> actions, batch 1): bench and export-c exit 0 and say what they see."
    path = actors['isaac'][0]
    r = ppo_trt('bench', path, '--backends', 'ort,native-c', *QUICK, '--closed-loop-steps', '0',
                '--run-dir', tmp_path/'b')
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "inferred anymal.onnx: observation 'obs' [48] -> action 'actions' [12]; its batch of 1 freed" in r.stdout
    bench = json.loads((tmp_path/'b'/'bench.json').read_text())
    assert bench['obs_source'].startswith('uniform box [-1, 1]') and bench['env_id'] is None
    lat = {x['backend']: x for x in bench['records'] if x['ran'] and x['mode'] == 'latency'}
    assert lat['native-c']['parity_vs_ort_fp32']['max_abs_err'] <= 1e-5
    r = ppo_trt('export-c', path, '--out', tmp_path/'c', '--cc', 'cc')
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    contract = json.loads((tmp_path/'c'/'policy_contract.json').read_text())
    assert (contract['observation']['name'], contract['action']['name'], contract['action']['dim']) == \
        ('obs', 'actions', 12)
    assert contract['provenance']['file'] == 'anymal.onnx' and 'max abs err vs ONNX Runtime' in r.stdout
    assert sorted(os.listdir(path.parent)) == sorted(f'{n}.onnx' for n in ('anymal', 'cleanrl', 'gru', 'lstm', 'gru2',
                                                                             'lstm2'))


@pytest.mark.slow  # over 4 s: the quick suite keeps the README test command under 10 minutes
def test_obs_file_and_box_are_recorded(actors, tmp_path):
    "Observations from --obs FILE.npy or --obs-range: the record says which."
    path = actors['cleanrl'][0]
    np.save(tmp_path/'obs.npy', np.random.default_rng(0).normal(size=(50, 17)))
    r = ppo_trt('bench', path, '--backends', 'ort', *QUICK, '--obs', tmp_path/'obs.npy', '--run-dir', tmp_path/'f')
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp_path/'f'/'bench.json').read_text())['obs_source'] == 'recorded: obs.npy (50 obs, --obs)'
    r = ppo_trt('bench', path, '--backends', 'ort', *QUICK, '--obs-range=-3:3', '--run-dir', tmp_path/'r')
    assert r.returncode == 0
    assert 'uniform box [-3, 3]' in json.loads((tmp_path/'r'/'bench.json').read_text())['obs_source']
    r = ppo_trt('bench', path, '--obs', tmp_path/'obs.npy', '--obs-range=-3:3', '--run-dir', tmp_path/'x')
    assert r.returncode == 2 and r.stderr.count('\n') == 1 and 'not both' in r.stderr, r.stderr


@pytest.mark.parametrize('name', ['isaac', 'cleanrl'])
def test_parity_on_every_cpu_backend(actors, name):
    "Every CPU backend that accepts the adopted graph gives torch's actions within 1e-5 at batch 1 and 64."
    path, module = actors[name]
    obs = np.random.default_rng(1).uniform(-1, 1, (64, module[0].in_features)).astype(np.float32)
    with torch.no_grad(): want = module(torch.from_numpy(obs)).numpy()
    ran = []
    for n in CPU:
        try: r = B.load(n, path)
        except B.BackendUnavailable: continue
        assert np.abs(r(obs) - want).max() <= 1e-5 and np.abs(r(obs[:1]) - want[:1]).max() <= 1e-5, n
        ran.append(n)
    assert {'ort', 'ort-iobind', 'native', 'native-c'} <= set(ran), ran


@pytest.mark.parametrize('name', ['gru', 'lstm', 'gru2', 'lstm2'])
def test_recurrent_sequence_parity_with_resets(actors, name):
    "A recurrent actor on every CPU backend: torch's actions along a sequence, rows reset apart (2 layers: ORT only)."
    path, module = actors[name]
    rng = np.random.default_rng(2)
    steps, rows, reset_at = 12, 3, 5
    seq = rng.uniform(-1, 1, (steps, rows, 10)).astype(np.float32)
    L = module.layers
    state = lambda: tuple(torch.zeros(L, rows, 16) for _ in range(2 if module.lstm else 1))
    want, st = [], state()
    with torch.no_grad():
        for t in range(steps):
            if t == reset_at: st = tuple(torch.cat([s[:, :1], torch.zeros(L, rows - 1, 16)], 1) for s in st)
            a, *st = module(torch.from_numpy(seq[t]), *st)
            want.append(a.numpy())
    ran, refused = [], {}
    for n in CPU:
        try: r = B.load(n, path)
        except B.BackendUnavailable as e: refused[n] = str(e); continue
        got = []
        for t in range(steps):
            if t == reset_at: r.reset([1, 2])  # rows 1 and 2 start new episodes, row 0 goes on
            got.append(r(seq[t]))
        assert np.abs(np.stack(got) - np.stack(want)).max() <= 1e-5, n
        ran.append(n)
    assert {'ort', 'ort-iobind'} | ({'native', 'native-c'} if L == 1 else set()) <= set(ran), (ran, refused)
    for n, why in refused.items(): assert 'run it with ort' in why and '\n' not in why, (n, why)


@pytest.mark.parametrize('name', ['gru', 'lstm'])
def test_export_c_of_a_recurrent_actor(actors, name, tmp_path):
    "export-c on an rsl_rl GRU / LSTM actor: the library carries its state (ppo_policy_step_state), its test passes."
    r = ppo_trt('export-c', actors[name][0], '--out', tmp_path/'c', '--cc', 'cc')
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert 'the rows as one sequence (a reset every 50), max abs err' in r.stdout and '\\x0a' not in r.stdout
    contract = json.loads((tmp_path/'c'/'policy_contract.json').read_text())
    assert (contract['recurrent']['state_dim'], contract['c_library']['call']) == \
        (16 * (2 if name == 'lstm' else 1), 'ppo_policy_step_state')
    header = (tmp_path/'c'/'ppo_policy.h').read_text()
    assert 'int ppo_policy_step_state(' in header and 'recurrent state: h_in->h_out [1, 1, 16]' in header


@pytest.mark.slow  # over 5 s: the quick suite keeps the README test command under 10 minutes
def test_external_data_beside_the_file_is_benched_with_it(tmp_path):
    "torch 2.13's exporter writes policy.onnx + policy.onnx.data: bench reads both, the bench folder's copy holds both."
    d = tmp_path/'deploy'; d.mkdir()
    module = mlp([11, 64, 64, 3], torch.nn.Tanh)
    path = export(module, (torch.zeros(1, 11),), d/'policy.onnx', dynamo=True, external_data=True)
    assert (d/'policy.onnx.data').exists(), os.listdir(d)
    r = ppo_trt('bench', path, '--backends', 'ort,native', *QUICK, '--closed-loop-steps', '0',
                '--run-dir', tmp_path/'b')
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    obs = np.random.default_rng(0).uniform(-1, 1, (8, 11)).astype(np.float32)
    with torch.no_grad(): want = module(torch.from_numpy(obs)).numpy()
    assert np.abs(B.load('native', tmp_path/'b'/'policy.onnx')(obs) - want).max() <= 1e-5
    assert sorted(os.listdir(d)) == ['policy.onnx', 'policy.onnx.data']  # only read


@pytest.mark.parametrize('where', ['../w.bin', '/etc/hostname', 'link'])
def test_external_data_out_of_the_folder_is_refused(tmp_path, where):
    "An ONNX whose external data points outside its own folder (.., absolute, a link out) is refused in one line."
    import onnx
    d = tmp_path/'deploy'; d.mkdir()
    path = export(mlp([4, 8, 2]), (torch.zeros(1, 4),), d/'actor.onnx')
    m = onnx.load(str(path))
    onnx.save(m, str(path), save_as_external_data=True, location='w.bin', size_threshold=0)
    shutil.copy(d/'w.bin', tmp_path/'w.bin')
    if where == 'link': (d/'w.bin').unlink(); os.symlink(tmp_path/'w.bin', d/'w.bin'); loc = 'w.bin'
    else: loc = where
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == 'location': e.value = loc
    onnx.save(m, str(path))
    for cmd in (['bench', path, '--run-dir', tmp_path/'b'], ['export-c', path, '--out', tmp_path/'c']):
        r = ppo_trt(*cmd)
        assert r.returncode == 2 and r.stderr.count('\n') == 1 and 'Traceback' not in r.stderr, r.stderr
        assert any(w in r.stderr for w in ('climbs out', 'absolute path', 'leads out of')), r.stderr
    assert not (tmp_path/'c').exists()


def _sb3_walker(d, algo='PPO'):
    "An SB3 model trained a few steps on Walker2d-v4 with VecNormalize, saved as RL Zoo saves it; (model, venv)."
    import stable_baselines3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
    venv = VecNormalize(make_vec_env('Walker2d-v4', n_envs=1, seed=0))
    kw = dict(n_steps=32, batch_size=32) if algo == 'PPO' else dict(n_steps=8)
    model = getattr(stable_baselines3, algo)('MlpPolicy', venv, seed=0, device='cpu', **kw).learn(64)
    model.save(d/'model.zip'); venv.save(d/'vecnormalize.pkl')
    return model, venv


@pytest.mark.slow  # over 5 s: the quick suite keeps the README test command under 10 minutes
@pytest.mark.parametrize('algo', ['PPO', 'A2C'])
def test_imported_sb3_model_acts_as_predict(tmp_path, algo):
    "ppo-trt import of an SB3 model.zip + VecNormalize: policy.onnx's actions equal model.predict on normalised obs."
    model, venv = _sb3_walker(tmp_path, algo)
    r = ppo_trt('import', tmp_path/'model.zip', '--vecnormalize', tmp_path/'vecnormalize.pkl',
                '--env-id', 'Walker2d-v4', '--run-dir', tmp_path/'run')
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert f'{algo} (stable-baselines3' in r.stdout and 'never unpickled' in r.stdout
    obs = np.load(tmp_path/'run'/'export_obs.npy')
    want = model.predict(venv.normalize_obs(obs), deterministic=True)[0]
    for n in ('ort', 'native-c'):
        assert np.abs(B.load(n, tmp_path/'run')(obs) - want).max() <= 1e-5, n
    train = json.loads((tmp_path/'run'/'train.json').read_text())
    assert train['imported_from']['algorithm'] == algo and train['env_id'] == 'Walker2d-v4'


@pytest.mark.slow  # over 7 s: with the long checks (pytest -m slow tests)
def test_import_then_every_stage(tmp_path):
    "An imported SB3 model: bench, evaluate (no PID preset: the zero fallback), report and export-c run on it."
    _sb3_walker(tmp_path)
    run = tmp_path/'run'
    assert ppo_trt('import', tmp_path/'model.zip', '--vecnormalize', tmp_path/'vecnormalize.pkl', '--env-id',
                   'Walker2d-v4', '--run-dir', run).returncode == 0
    for cmd in (['bench', '--backends', 'ort,native-c', *QUICK, '--closed-loop-steps', '100'],
                ['evaluate', '--backends', 'ort', '--episodes', '1', '--phases', 'nominal,push'],
                ['report'], ['export-c', '--cc', 'cc']):
        r = ppo_trt(*cmd, '--run-dir', run)
        assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-2000:])
    ev = json.loads((run/'evaluate.json').read_text())
    assert ev['fallback'] == 'zero' and {'zero', 'ppo:ort', 'ppo:torch'} <= set(ev['phases'][0]['returns'])
    assert 'imported from' in (run/'report.html').read_text()


def test_an_off_policy_model_imports_checked_against_sb3(tmp_path):
    "An SB3 SAC model.zip (briefly trained): imported without unpickling, its actor checked against SB3's predict."
    from stable_baselines3 import SAC
    SAC('MlpPolicy', 'Pendulum-v1', learning_starts=10, seed=0, device='cpu').learn(20).save(tmp_path/'sac.zip')
    r = ppo_trt('import', tmp_path/'sac.zip', '--env-id', 'Pendulum-v1', '--run-dir', tmp_path/'run')
    assert r.returncode == 0 and 'Traceback' not in r.stderr, r.stderr
    assert "SAC (stable-baselines3" in r.stdout and "SB3's predict" in r.stdout, r.stdout
    assert sorted(p.name for p in (tmp_path/'run').iterdir() if not p.name.startswith('.')) == ['policy.onnx']


def _payload_marker(marker):
    "A pickle that creates `marker` when unpickled."
    class Evil:
        def __reduce__(self): return (open, (str(marker), 'w'))
    return pickle.dumps(Evil())


@pytest.mark.slow  # over 5 s: the quick suite keeps the README test command under 10 minutes
def test_pickle_payloads_never_run_on_import(tmp_path):
    "A model.zip whose data carries a pickle that writes a file, and a VecNormalize pickle that would: never executed."
    import base64
    _sb3_walker(tmp_path)
    marker = tmp_path/'pwned'
    with zipfile.ZipFile(tmp_path/'model.zip') as z: members = {n: z.read(n) for n in z.namelist()}
    data = json.loads(members['data'])
    data['observation_space'][':serialized:'] = base64.b64encode(_payload_marker(marker)).decode()
    members['data'] = json.dumps(data).encode()
    with zipfile.ZipFile(tmp_path/'evil.zip', 'w') as z:
        for n, b in members.items(): z.writestr(n, b)
    r = ppo_trt('import', tmp_path/'evil.zip', '--env-id', 'Walker2d-v4', '--run-dir', tmp_path/'a')
    assert r.returncode == 0 and not marker.exists(), r.stderr[-2000:]  # the payload is data: the space is rebuilt
    (tmp_path/'evil.pkl').write_bytes(_payload_marker(marker))
    r = ppo_trt('import', tmp_path/'model.zip', '--vecnormalize', tmp_path/'evil.pkl', '--env-id', 'Walker2d-v4',
                '--run-dir', tmp_path/'b')
    assert r.returncode == 2 and r.stderr.count('\n') == 1 and 'without running code' in r.stderr, r.stderr
    assert not marker.exists() and not (tmp_path/'b').exists()
    with zipfile.ZipFile(tmp_path/'a'/'policy.zip') as z:  # the run folder's copy holds no pickle at all
        kept = json.loads(z.read('data'))
    assert all(v.get(':serialized:') == '' for v in kept.values() if isinstance(v, dict) and ':serialized:' in v)


@pytest.mark.slow  # over 4.5 s: with the long checks (pytest -m slow tests)
@pytest.mark.parametrize('env_id, obs, act', [('Walker2d-v4', 17, 6), ('Swimmer-v4', 8, 2)])
def test_evaluate_without_a_pid_preset(tmp_path, env_id, obs, act):
    "evaluate runs on Walker2d-v4 (a spec, no PID preset) and Swimmer-v4 (no built-in spec: a generic one)."
    path = export(mlp([obs, 32, act], torch.nn.Tanh), (torch.zeros(1, obs),), tmp_path/'actor.onnx', input_names=['x'])
    assert ppo_trt('import', path, '--env-id', env_id, '--run-dir', tmp_path/'run').returncode == 0
    r = ppo_trt('evaluate', '--run-dir', tmp_path/'run', '--backends', 'ort', '--episodes', '1', '--fallback', 'hold')
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    ev = json.loads((tmp_path/'run'/'evaluate.json').read_text())
    assert ev['fallback'] == 'hold' and len(ev['phases']) >= 6 and ev['env_id'] == env_id
    if env_id == 'Swimmer-v4': assert 'has no built-in spec: a generic one from its spaces' in r.stdout
    r = ppo_trt('evaluate', '--run-dir', tmp_path/'run', '--fallback', 'pid', '--replace')
    assert r.returncode == 2 and 'no PID preset' in r.stderr and r.stderr.count('\n') == 1, r.stderr


def test_names_from_the_file_are_escaped_in_c(tmp_path):
    "An input named to end a C comment and start code reaches ppo_policy.h only escaped."
    path = export(mlp([4, 8, 2]), (torch.zeros(1, 4),), tmp_path/'actor.onnx', input_names=['obs*/ int evil; /*'])
    r = ppo_trt('export-c', path, '--out', tmp_path/'c', '--cc', 'cc')
    assert r.returncode == 0, r.stderr[-2000:]
    header = (tmp_path/'c'/'ppo_policy.h').read_text()
    assert '*/ int evil' not in header and 'obs\\x2a/ int evil; /\\x2a' in header


def test_ambiguous_actor_is_one_line_with_the_flag(tmp_path):
    "Two observation-like inputs: refused naming --obs-name; with it, adopted."
    class Two(torch.nn.Module):
        def forward(self, a, b): return a + b
    path = export(Two(), (torch.zeros(1, 4), torch.zeros(1, 4)), tmp_path/'two.onnx', input_names=['a', 'b'])
    r = ppo_trt('bench', path, '--run-dir', tmp_path/'b')
    assert r.returncode == 2 and '--obs-name' in r.stderr and r.stderr.count('\n') == 1, r.stderr
    assert not (tmp_path/'b'/'policy.onnx').exists()


@pytest.mark.slow
@pytest.mark.parametrize('env_id', ['Walker2d-v4', 'HalfCheetah-v4', 'Ant-v4', 'Swimmer-v4', 'Humanoid-v4'])
def test_run_evaluate_report_beyond_hopper(tmp_path, env_id):
    "train -> export -> bench -> report (`ppo-trt run`), then evaluate, on MuJoCo envs without a PID preset."
    run = tmp_path/'run'
    r = ppo_trt('run', '--env-id', env_id, '--timesteps', 1024, '--preset', 'smoke', '--backends', 'ort,native-c',
                *QUICK, '--closed-loop-steps', '100', '--run-dir', run)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    r = ppo_trt('evaluate', '--run-dir', run, '--backends', 'ort', '--episodes', '1')
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert ppo_trt('report', '--run-dir', run).returncode == 0 and (run/'report.html').exists()
