"A TorchScript policy.pt through every front door, read as data: never run by ppo_trt, checked against itself."
import re, zipfile
import numpy as np, pytest, torch
from conftest import ppo_trt, one_line
from torchscript_actors import save_exporter

def bound(ref): return 128 * np.finfo(np.float32).eps * max(1.0, float(np.abs(ref).max()))

@pytest.fixture
def policy_pt(tmp_path):
    "An Isaac Lab / rsl_rl style exporter (EmpiricalNormalization + ELU MLP) for Hopper's widths, and the module."
    path = tmp_path/'policy.pt'
    return path, save_exporter(path, [11, 64, 64, 3])

@pytest.mark.slow
def test_every_cpu_backend_matches_the_torchscript_itself(policy_pt):
    import ppo_trt
    path, _ = policy_pt
    obs = np.random.default_rng(0).normal(size=(64, 11)).astype(np.float32) * 3
    want = torch.jit.load(str(path))(torch.from_numpy(obs)).detach().numpy()  # our own file: safe to run here
    for name in ('ort', 'native', 'native-c'):
        got = ppo_trt.load(name, path)(obs)
        assert np.abs(got - want).max() <= bound(want), name

def test_one_weight_off_by_1e3_is_caught(policy_pt, tmp_path):
    import ppo_trt
    path, module = policy_pt
    w = module.actor[4].weight  # the output layer's largest weight: 1e-3 of it is well over float32's rounding
    with torch.no_grad(): w.view(-1)[w.abs().argmax()] *= 1 + 1e-3
    torch.jit.script(module).save(str(tmp_path/'off.pt'))
    obs = np.random.default_rng(1).normal(size=(256, 11)).astype(np.float32) * 3
    want = torch.jit.load(str(path))(torch.from_numpy(obs)).detach().numpy()
    got = ppo_trt.load('ort', tmp_path/'off.pt')(obs)  # the rebuilt graph every backend runs
    assert np.abs(got - want).max() > bound(want)

@pytest.mark.slow
def test_import_and_export_c_take_a_pt(policy_pt, tmp_path):
    path, _ = policy_pt
    r = ppo_trt('import', path, '--env-id', 'Hopper-v4', '--run-dir', tmp_path/'run')
    assert r.returncode == 0 and (tmp_path/'run'/'policy.onnx').is_file(), r.stderr[-2000:]
    r = ppo_trt('export-c', path, '--out', tmp_path/'c')
    assert r.returncode == 0 and 'max abs err vs ONNX Runtime' in r.stderr + r.stdout, r.stderr[-2000:]

def test_a_pt_naming_os_system_is_refused_and_never_run(policy_pt, tmp_path):
    path, _ = policy_pt
    mark, evil = tmp_path/'ran', tmp_path/'evil.pt'
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(evil, 'w') as zout:
        for i in zin.infolist():
            blob = zin.read(i)
            if i.filename.endswith('/data.pkl'):
                blob, n = re.subn(rb'c__torch__[\w.]*\n\w+\n', b'cos\nsystem\n', blob, count=1)
                assert n == 1
            zout.writestr(i.filename, blob)
    err = one_line(ppo_trt('import', evil, '--env-id', 'Hopper-v4', '--run-dir', tmp_path/'run'), 2, 'os.system')
    assert 'torch.onnx.export' in err and not mark.exists() and not (tmp_path/'run').exists()

class PolicyExporterLSTM(torch.nn.Module):
    "legged_gym's recurrent exporter: the LSTM's state in buffers, updated in place on every call."
    def __init__(self, actor, memory):
        super().__init__()
        self.actor, self.is_recurrent, self.memory = actor, True, memory
        self.register_buffer('hidden_state', torch.zeros(memory.num_layers, 1, memory.hidden_size))
        self.register_buffer('cell_state', torch.zeros(memory.num_layers, 1, memory.hidden_size))
    def forward(self, x):
        out, (h, c) = self.memory(x.unsqueeze(0), (self.hidden_state, self.cell_state))
        self.hidden_state[:] = h
        self.cell_state[:] = c
        return self.actor(out.squeeze(0))

@pytest.mark.parametrize('backend', ['ort', pytest.param('native-c', marks=pytest.mark.slow)])
def test_a_recurrent_pt_keeps_its_state_as_the_original(tmp_path, backend):
    import ppo_trt
    torch.manual_seed(0)
    m = PolicyExporterLSTM(torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ELU(), torch.nn.Linear(32, 3)),
                           torch.nn.LSTM(11, 64, 1))
    torch.jit.script(m).save(str(tmp_path/'lstm.pt'))
    original, runner = torch.jit.load(str(tmp_path/'lstm.pt')), ppo_trt.load(backend, tmp_path/'lstm.pt')
    seq = np.random.default_rng(0).normal(size=(20, 11)).astype(np.float32)
    want = np.stack([original(torch.from_numpy(o[None])).detach().numpy()[0] for o in seq])
    got = np.stack([runner(o[None])[0] for o in seq])
    assert np.abs(got - want).max() <= bound(want)
    assert np.abs(got[1:] - got[:-1]).max() > 0  # the state moved: not a stateless copy of step one

class Odd(torch.nn.Module):
    "A policy ppo_trt does not rebuild from data: a side branch reads the observation."
    def __init__(self): super().__init__(); self.lin = torch.nn.Linear(11, 3)
    def forward(self, x): return torch.tanh(self.lin(x)) * 0.5 + torch.sin(x[:, :3])

def test_a_pt_not_read_as_data_runs_only_behind_trust_code(tmp_path):
    import ppo_trt
    from ppo_trt.core.files import PpoTrtError
    torch.jit.script(Odd()).save(str(tmp_path/'odd.pt'))
    with pytest.raises(PpoTrtError, match='--trust-code'):
        ppo_trt.load('ort', tmp_path/'odd.pt')(np.zeros((1, 11), np.float32))
    obs = np.random.default_rng(0).normal(size=(32, 11)).astype(np.float32)
    want = torch.jit.load(str(tmp_path/'odd.pt'))(torch.from_numpy(obs)).detach().numpy()
    got = ppo_trt.load('ort', tmp_path/'odd.pt', trust_code=True)(obs)
    assert np.abs(got - want).max() <= bound(want)
