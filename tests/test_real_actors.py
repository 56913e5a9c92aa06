"""Kernels that cover real actors (issue 36, item 2): actors made with torch the way Isaac Lab / rsl_rl, CleanRL and
older exporters make them (every activation, LayerNorm in both forms, a normaliser, action scaling and Clip, GRU and
LSTM packed as [obs | state] -> [action | state']) give ONNX Runtime's actions within 1e-5 on every CPU backend that
runs an ONNX file (ort, ort-iobind, native, native-c), in the C library's own test program (x86 and, under QEMU,
NEON), and step by step with resets for the recurrent ones; anything else is refused at load with the op named.
(The torch backends run a run folder's trained model, not a foreign ONNX file: not applicable here.)"""
import os, shutil, subprocess, sys, tempfile
from pathlib import Path
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper, TensorProto

pytest.importorskip('torch')
import actors
from ppo_trt.backends import registry as B
from ppo_trt.export.onnx_graph import parse_chain, Recurrent, Norm, NativeUnsupportedError
from ppo_trt.export.onnx import ort_cpu_session
from ppo_trt.export.c_library import library_files, build_and_test
from ppo_trt.export.targets import target_missing

TOL = 1e-5
CPU = ('ort', 'ort-iobind', 'native', 'native-c')
FEEDFORWARD = ['isaac-elu', 'cleanrl-tanh', 'every-activation', 'every-activation-legacy', 'layernorm-op',
               'layernorm-decomposed']
RECURRENT = {'gru': (10, 3, 32), 'gru-dynamo': (10, 3, 32), 'lstm': (10, 3, 64), 'lstm-dynamo': (10, 3, 64),
             'gru-lbr0': (6, 2, 8)}  # (observation, action, state) widths: in [obs | state], out [action | state']
CC = shutil.which('cc')


def _model(name):
    if name == 'gru-lbr0': return actors.gru_onnx(lbr=0)
    if name == 'layernorm-opset18': return actors.layernorm_opset18()
    return actors.recurrent(name) if name in RECURRENT else actors.feedforward(name)


@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    "name -> the actor saved with the metadata today's backends.load asks for (made once per module)."
    folder, cache = tmp_path_factory.mktemp('actors'), {}
    def get(name):
        if name not in cache: cache[name] = actors.with_metadata(_model(name), folder/f'{name}.onnx')
        return cache[name]
    return get


def _obs(width, rows=37, seed=0):
    return (np.random.default_rng(seed).normal(size=(rows, width)) * 1.5).astype(np.float32)


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_the_parser_fuses_what_the_exporters_write():
    kinds = lambda steps: [getattr(s, 'kind', type(s).__name__) for s in steps]
    steps, dims = parse_chain(actors.feedforward('every-activation'))
    assert dims == (9, 4)
    assert [k for k in kinds(steps) if k != 'Dense'] == ['tanh', 'elu', 'relu', 'leakyrelu', 'selu', 'sigmoid',
                                                          'silu', 'softplus']
    assert next(s for s in steps if getattr(s, 'kind', '') == 'softplus').c == 20  # torch's threshold (Where)
    for name in ('layernorm-op', 'layernorm-decomposed'):
        steps, _ = parse_chain(actors.feedforward(name))
        assert kinds(steps)[:5] == ['Dense', 'Norm', 'mul', 'add', 'silu' if name.endswith('op') else 'elu'], name
    assert kinds(parse_chain(actors.feedforward('cleanrl-tanh'))[0]) == [
        'sub', 'div', 'Dense', 'tanh', 'Dense', 'tanh', 'Dense', 'mul', 'add', 'clip']
    gru, dims = parse_chain(actors.recurrent('gru'))
    assert isinstance(gru, Recurrent) and dims == (42, 35) and gru.cell.kind == 'gru'
    assert (gru.obs, gru.h_in, gru.out) == ((0, 10), 10, [('action', 0, 3), ('h', 3, 32)])
    lstm, dims = parse_chain(actors.recurrent('lstm-dynamo'))
    assert dims == (74, 67) and (lstm.h_in, lstm.c_in) == (10, 42) and kinds(lstm.encoder) == ['sub', 'div']


@pytest.mark.slow  # over 4 s: the quick suite keeps the README test command under 10 minutes
@pytest.mark.parametrize('name', FEEDFORWARD + ['layernorm-opset18'])
def test_every_cpu_backend_gives_ort_actions(name, saved):
    path = saved(name)
    sess = ort_cpu_session(path)
    x = _obs(sess.get_inputs()[0].shape[1])
    ref = sess.run(None, {'obs': x})[0]
    for backend in CPU:
        runner = B.load(backend, path)
        one = np.concatenate([runner(x[i:i + 1]) for i in range(len(x))])
        assert np.abs(one - ref).max() <= TOL, (backend, np.abs(one - ref).max())
        assert np.abs(runner(x) - ref).max() <= TOL, backend


def _sequence(step, obs, state_width, resets):
    "Outputs of `step` over `obs` rows as one sequence: the state it returns fed back, zeros at each reset."
    state, out = np.zeros(state_width, np.float32), []
    for r, o in enumerate(obs):
        if r in resets: state[:] = 0
        y = step(np.concatenate([o, state])[None].astype(np.float32))[0]
        out.append(y); state = y[-state_width:].copy()
    return np.asarray(out)


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
@pytest.mark.parametrize('name', list(RECURRENT))
def test_recurrent_actors_step_with_ort_on_every_cpu_backend(name, saved):
    obs_w, act_w, state_w = RECURRENT[name]
    path = saved(name)
    sess = ort_cpu_session(path)
    obs, resets = _obs(obs_w, rows=60, seed=1), {0, 23, 41}
    ref = _sequence(lambda x: sess.run(None, {'obs': x})[0], obs, state_w, resets)
    assert np.abs(ref[1:23, -state_w:]).max() > 0.05  # the state really moves
    for backend in CPU:
        got = _sequence(B.load(backend, path), obs, state_w, resets)
        assert np.abs(got - ref).max() <= TOL, (backend, np.abs(got - ref).max())


def _library(path, folder, obs):
    lib = Path(folder)/'lib'; lib.mkdir()
    for k, v in library_files(path, obs, 'ab' * 32).items(): (lib/k).write_text(v)
    return lib


@pytest.mark.skipif(CC is None, reason='no C compiler (cc) on this machine')
@pytest.mark.parametrize('name', ['isaac-elu', 'every-activation', 'layernorm-decomposed', 'gru', 'lstm-dynamo',
                                  'gru-lbr0'])
@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_the_c_library_test_program_passes(name, saved, tmp_path):
    path = saved(name)
    width = RECURRENT[name][0] if name in RECURRENT else ort_cpu_session(path).get_inputs()[0].shape[1]
    lib = _library(path, tmp_path, _obs(width, rows=120))
    for flags in (('-march=native',), (), ('-DPPO_POLICY_PORTABLE',)):
        r = build_and_test(lib, 'cc', extra=flags)
        assert r['ok'] and not r['warnings'], (flags, r['output'], r['warnings'][-2000:])
        if name in RECURRENT: assert 'recurrent state of' in r['output'] and 'reset every 50' in r['output']
    header = (lib/'ppo_policy.h').read_text()
    assert ('ppo_policy_step_state' in header) == (name in RECURRENT)


A64 = target_missing('aarch64')


@pytest.mark.skipif(bool(A64), reason=A64 or 'aarch64 toolchain present')
@pytest.mark.parametrize('name', ['every-activation', 'layernorm-op', 'gru', 'lstm'])
def test_the_c_library_passes_on_neon(name, saved, tmp_path):
    "The NEON kernel (aarch64, under qemu-aarch64) passes the same test program: parity, NaN, the state sequence."
    path = saved(name)
    width = RECURRENT[name][0] if name in RECURRENT else ort_cpu_session(path).get_inputs()[0].shape[1]
    lib = _library(path, tmp_path, _obs(width, rows=60))
    for flags, kernel in ((('-O3',), 'neon'), (('-O3', '-DPPO_POLICY_PORTABLE'), 'portable C')):
        b = subprocess.run(['aarch64-linux-gnu-gcc', *flags, '-static', '-std=c99', '-Wall', '-Wextra', '-pedantic',
                            'ppo_policy.c', 'test_ppo_policy.c', '-lm', '-o', 't'], cwd=lib, capture_output=True,
                           text=True)
        assert b.returncode == 0 and not b.stderr, b.stderr[-2000:]
        r = subprocess.run(['qemu-aarch64', str(lib/'t')], capture_output=True, text=True)
        assert r.returncode == 0 and f'(kernel {kernel})' in r.stdout, r.stdout + r.stderr


def _refusal(model):
    "The one line native and native-c refuse `model` with (they must agree), via backends.load."
    with tempfile.TemporaryDirectory() as d:
        path = actors.with_metadata(model, Path(d)/'policy.onnx')
        lines = []
        for backend in ('native', 'native-c'):
            with pytest.raises(B.BackendUnavailable) as e: B.load(backend, path)
            lines.append(str(e.value))
    assert lines[0] == lines[1] and '\n' not in lines[0], lines
    return lines[0]


def _graph(nodes, inits, width=4, out=4, opset=17, inputs=None):
    g = helper.make_graph(nodes, 'g', inputs or [helper.make_tensor_value_info('obs', TensorProto.FLOAT, ['B', width])],
                          [helper.make_tensor_value_info('action', TensorProto.FLOAT, ['B', out])],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)], ir_version=9)


def test_anything_else_is_refused_at_load_with_the_op_named():
    w = np.eye(4, dtype=np.float32)
    assert "cannot compile ops ['Softmax']" in _refusal(_graph([helper.make_node('Softmax', ['obs'], ['action'])], {}))
    residual = _graph([helper.make_node('MatMul', ['obs', 'W'], ['h']), helper.make_node('Add', ['h', 'obs'],
                                                                                         ['action'], name='skip')],
                      {'W': w})
    assert 'skip (Add) combines two computed values' in _refusal(residual)
    gru = actors.gru_onnx(lbr=1)
    two_way = onnx.ModelProto(); two_way.CopyFrom(gru)
    node = next(n for n in two_way.graph.node if n.op_type == 'GRU')
    node.attribute.append(helper.make_attribute('direction', 'bidirectional'))
    assert "(GRU) has direction b'bidirectional'" in _refusal(two_way)
    two_layers = onnx.ModelProto(); two_layers.CopyFrom(gru)
    node = next(n for n in two_layers.graph.node if n.op_type == 'GRU')
    node.name = 'second'
    two_layers.graph.node.insert(list(two_layers.graph.node).index(node) + 1, helper.make_node(
        'GRU', ['x3', 'W', 'R', 'Bias', '', 'h3'], ['', 'unused'], hidden_size=8, name='extra'))
    assert 'extra (GRU) is a second recurrent cell' in _refusal(two_layers)
    unpacked = actors.export(actors.gru_actor(), [(2, 10), (1, 2, 32)], ['obs', 'h_in'], ['action', 'h_out'])
    with pytest.raises(NativeUnsupportedError, match=r'the graph has 2 inputs \(obs, h_in\)'):
        parse_chain(unpacked)  # the front door packs such a graph before any kernel sees it
    mean = _graph([helper.make_node('ReduceMean', ['obs'], ['m'], axes=[-1]),
                   helper.make_node('Mul', ['obs', 'm'], ['action'], name='odd')], {})
    assert 'odd (Mul) uses part of a decomposed LayerNormalization' in _refusal(mean)


def test_the_c_library_refuses_what_the_kernels_refuse(tmp_path):
    path = actors.with_metadata(_graph([helper.make_node('Softmax', ['obs'], ['action'])], {}), tmp_path/'p.onnx')
    with pytest.raises(NativeUnsupportedError, match=r"p.onnx: native backend cannot compile ops \['Softmax'\]"):
        library_files(path, _obs(4), 'ab' * 32)


@pytest.mark.slow
def test_a_1024_wide_actor_on_every_backend_and_in_c(saved, tmp_path):
    "Four hidden layers of 1024 (3.2 M weights): native, native-c and the C library give ORT's actions."
    path = saved('wide-1024')
    x = _obs(64, rows=13)
    ref = ort_cpu_session(path).run(None, {'obs': x})[0]
    for backend in CPU:
        assert np.abs(B.load(backend, path)(x) - ref).max() <= TOL, backend
    if CC:
        r = build_and_test(_library(path, tmp_path, x), 'cc', extra=('-march=native',))
        assert r['ok'], r['output']


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
@pytest.mark.skipif(CC is None, reason='no C compiler (cc) on this machine')
def test_the_timing_harness_states_the_arithmetic_and_its_limits(saved, tmp_path):
    "make bench's harness prints the FMA limit for the actor's multiply-adds and the time to read its weights."
    from ppo_trt.export.c_library import bench_c_library
    lib = _library(saved('isaac-elu'), tmp_path, _obs(48, rows=64))
    r = bench_c_library(lib, flags=('-O3', '-march=native'), calls=20_000)
    macs = 48 * 512 + 512 * 256 + 256 * 128 + 128 * 12
    assert r['multiply_adds'] == macs and r['weight_bytes'] == 4 * (macs + 512 + 256 + 128 + 12)
    assert r['fma_per_ns'] > 0 and r['fma_limit_ns'] == pytest.approx(macs / r['fma_per_ns'], rel=1e-2)
    assert r['p50_over_limit'] == pytest.approx(r['p50_ns'] / r['fma_limit_ns'], rel=2e-2)
    assert r['weight_read_ns'] > 0 and r['batch64_ns'] > 0 and r['failed_calls'] == 0


@pytest.mark.parametrize('name', ['every-activation', 'layernorm-decomposed', 'gru', 'lstm-dynamo', 'gru-lbr0'])
def test_the_triton_kernel_covers_them_too(name):
    "The generated Triton kernel, in Triton's interpreter on the CPU (test_gpu.py runs it compiled where a GPU is)."
    torch = pytest.importorskip('torch')
    if torch.cuda.is_available(): pytest.skip('a GPU is present: the compiled kernel is tested in test_gpu.py')
    from ppo_trt.export.triton_mlp import build_triton_policy, import_triton
    if import_triton()[0] is None: pytest.skip(import_triton()[1])
    model = _model(name)
    steps, dims = parse_chain(model)
    x = _obs(dims[0], rows=21)
    ref = ort_cpu_session(model.SerializeToString()).run(None, {'obs': x})[0]
    out = build_triton_policy(steps, dims).forward(torch.as_tensor(x), torch.empty(len(x), dims[1]))
    assert np.abs(out.numpy() - ref).max() <= TOL


def test_the_triton_kernel_runs_though_triton_was_imported_first():
    "No GPU, and triton imported before the switch to its interpreter (torch's dynamo exporter does): LayerNorm runs."
    if Path('/dev/nvidiactl').exists(): pytest.skip('an NVIDIA GPU is present: Triton compiles for it')
    pytest.importorskip('triton')
    code = """import sys; sys.path.insert(0, 'tests')
import triton.language, numpy as np, torch, actors
from ppo_trt.export.onnx_graph import parse_chain
from ppo_trt.export.onnx import ort_cpu_session
from ppo_trt.export.triton_mlp import build_triton_policy
model = actors.feedforward('layernorm-decomposed'); steps, dims = parse_chain(model)
x = np.random.default_rng(0).normal(size=(9, dims[0])).astype(np.float32)
ref = ort_cpu_session(model.SerializeToString()).run(None, {'obs': x})[0]
out = build_triton_policy(steps, dims).forward(torch.as_tensor(x), torch.empty(len(x), dims[1]))
print('max abs err', float(np.abs(out.numpy() - ref).max()))"""
    env = {k: v for k, v in os.environ.items() if k != 'TRITON_INTERPRET'}
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env,
                       cwd=Path(__file__).parent.parent)
    assert r.returncode == 0 and r.stdout.startswith('max abs err'), r.stderr[-2000:]
    assert float(r.stdout.split()[-1]) <= TOL, r.stdout
