"""Issue 44: a foreign ONNX actor and a --obs .npy are data. Every file is crafted here (onnx.helper, numpy's .npy
header writer): declared shapes are checked against the computed ones, declared sizes are bounded before anything is
allocated (the allocation cases run in a child under a 1.5 GiB address-space limit, so a regression dies there instead
of passing), and every refusal is one line naming the user's file."""
import json, os, re, resource, shutil, subprocess, sys
from pathlib import Path
import numpy as np
import onnx
import pytest
from numpy.lib import format as npf
from onnx import helper, numpy_helper, TensorProto

from ppo_trt.core.files import BadArtifactError, BadInputError
from conftest import one_line

LIMIT = 3 << 29  # 1.5 GiB of address space for the children that meet a huge declared size


# ---- crafted files -----------------------------------------------------------------------------------------------
def vi(name, shape): return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def save(path, nodes, ins, outs, inits=None, meta=None):
    "An opset-17 model of `nodes` at `path`, with float32 initializers `inits` and metadata `meta`."
    g = helper.make_graph(nodes, 'g', ins, outs,
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)], ir_version=8)
    for k, v in (meta or {}).items():
        e = m.metadata_props.add(); e.key, e.value = k, v
    onnx.save(m, str(path))
    return Path(path)


W = (np.random.default_rng(0).normal(size=(4, 3)) * 0.3).astype(np.float32)


def matmul(path, declared=3, computed=3, meta=None, obs='obs', action='action'):
    "obs [B, 4] @ W [4, computed], declared as action [B, declared]."
    return save(path, [helper.make_node('MatMul', [obs, 'W'], [action])], [vi(obs, ['B', 4])],
                [vi(action, ['B', declared])], {'W': W[:, :computed] if computed <= 3 else np.ones((4, computed))},
                meta)


def recurrent(path, declared=8, computed=8, state_shape=None):
    "An actor with a state pair: h_in [1, B, 8] -> h_out declared [1, B, `declared`], computing `computed` wide."
    nodes = [helper.make_node('MatMul', ['obs', 'W'], ['action']), helper.make_node('MatMul', ['h_in', 'U'], ['h_out'])]
    shape = state_shape or [1, 'B', 8]
    return save(path, nodes, [vi('obs', ['B', 4]), vi('h_in', shape)],
                [vi('action', ['B', 3]), vi('h_out', [*shape[:-1], declared])],
                {'W': W, 'U': np.full((shape[-1] if len(shape) == 3 and shape[-1] < 1 << 16 else 8, computed), 0.1)})


def wide(path, obs=4, act=1):
    "A graph declaring obs [B, `obs`] -> action [B, `act`] (computing a sum)."
    return save(path, [helper.make_node('ReduceSum', ['obs'], ['action'], keepdims=1)], [vi('obs', ['B', obs])],
                [vi('action', ['B', act])])


def huge_state(path, n=100_000_000):
    "The 243-byte kind of file: a state h_in of [1, 1, n] numbers, passed through."
    nodes = [helper.make_node('MatMul', ['obs', 'W'], ['action']), helper.make_node('Identity', ['h_in'], ['h_out'])]
    return save(path, nodes, [vi('obs', ['B', 4]), vi('h_in', [1, 1, n])], [vi('action', ['B', 3]),
                                                                          vi('h_out', [1, 1, n])], {'W': W})


def npy_header(path, shape, descr='<f4', body=b''):
    "A .npy whose header says `shape` of `descr`, followed by `body`."
    with open(path, 'wb') as f:
        npf.write_array_header_1_0(f, {'descr': descr, 'fortran_order': False, 'shape': shape})
        f.write(body)
    return Path(path)


# ---- helpers -----------------------------------------------------------------------------------------------------
def limited():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def cli(*args, cwd, limit=False):
    "The console script (under the address-space limit if `limit`)."
    exe = shutil.which('ppo-trt') or str(Path(sys.executable).with_name('ppo-trt'))
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300,
                          preexec_fn=limited if limit else None, env={**os.environ, 'PYTHONWARNINGS': 'ignore'})


def cli_here(capsys, status, *args, says=()):
    "`ppo-trt args` run in this process: its exit `status` and one line on stderr holding each of `says`."
    from ppo_trt.cli import main
    capsys.readouterr()
    got = main([str(a) for a in args])
    err = capsys.readouterr().err.strip()
    assert got == status and len(err.splitlines()) == 1 and 'Traceback' not in err, (got, err[-3000:])
    for s in says: assert s in err, (s, err)
    return err


def adopt(path):
    from ppo_trt.export.foreign import adopt
    return adopt(path)


# ---- 1. declared shapes are checked against computed ones ----------------------------------------------------------
def test_action_declared_narrower_than_it_computes_is_refused(tmp_path):
    "Declared [B, 2], computes [B, 3]: on main adopted (ort reported act_dim 2 and returned 3 columns)."
    p = matmul(tmp_path/'lying.onnx', declared=2, computed=3)
    with pytest.raises(BadArtifactError, match=r"lying\.onnx: its action output 'action' is declared \[batch, 2\] "
                                               r"but computes \[1, 3\]"):
        adopt(p)


@pytest.mark.parametrize('computed', [1, 16])
def test_state_declared_other_than_it_computes_is_refused(tmp_path, computed):
    "h_out declared [1, B, 8] computing 1 (broadcast into the state on main) or 16 (a traceback on main)."
    p = recurrent(tmp_path/'gru.onnx', 8, computed)
    with pytest.raises(BadArtifactError, match=rf"gru\.onnx: its recurrent state output 'h_out' is declared "
                                               rf"\[1, batch, 8\] but computes \[1, 1, {computed}\]"):
        adopt(p)


def test_an_honest_recurrent_actor_is_still_adopted(tmp_path):
    a = adopt(recurrent(tmp_path/'gru.onnx'))
    assert (a.inference.act_dim, a.inference.state_dim) == (3, 8) and a.check_err <= 1e-6


def test_a_ppo_trt_policy_file_declaring_another_width_is_refused(tmp_path):
    "A file posing as ppo_trt's (obs -> action, its metadata) skips adoption: its computed width is checked on load."
    import ppo_trt
    meta = dict(obs_dim='4', act_dim='2', adopted_from=json.dumps({'origin': 'x'}))
    p = matmul(tmp_path/'posing.onnx', declared=2, computed=3, meta=meta)
    for backend in ('ort', 'ort-iobind'):
        with pytest.raises(BadArtifactError, match=r"posing\.onnx: its output 'action' is declared \[batch, 2\] "
                                                   r"but computes \[1, 3\]"):
            ppo_trt.load(backend, p)


def test_bench_of_a_lying_actor_is_one_line_and_writes_nothing(tmp_path, capsys):
    p = matmul(tmp_path/'lying.onnx', declared=2, computed=3)
    cli_here(capsys, 2, 'bench', p, '--run-dir', tmp_path/'b', says=('lying.onnx', 'declared [batch, 2]'))
    assert not (tmp_path/'b').exists()


# ---- 2. declared sizes bounded before anything is allocated (one child under 1.5 GiB) -------------------------------
def state_2_64(path):
    "A state of [2^32, B, 2^32]: 2^64 numbers, which an int64 product wraps to 0."
    nodes = [helper.make_node('MatMul', ['obs', 'W'], ['action']), helper.make_node('Identity', ['h_in'], ['h_out'])]
    return save(path, nodes, [vi('obs', ['B', 4]), vi('h_in', [1 << 32, 'B', 1 << 32])],
                [vi('action', ['B', 3]), vi('h_out', [1 << 32, 'B', 1 << 32])], {'W': W})


HUGE = {  # file: (how to make it, the bound its refusal names); main asked for the GiB in the comment
    'state.onnx': (huge_state, 'MAX_STATE'),                          # 3.7 GiB
    'obs.onnx': (lambda p: wide(p, obs=1 << 30), 'MAX_OBS_DIM'),      # 40 GiB
    'action.onnx': (lambda p: wide(p, act=1 << 30), 'MAX_ACT_DIM'),   # 8 GiB
    'wrap.onnx': (state_2_64, 'MAX_STATE'),
}
REFUSALS = """import json, sys
from ppo_trt.core.files import PpoTrtError
from ppo_trt.export.foreign import adopt
from ppo_trt.measure.bench import declared_observations, BenchSettings
out = {}
for f in sys.argv[1:]:
    try:
        if f.endswith('.npy'): declared_observations(4, BenchSettings(obs_file=f))
        else: adopt(f)
        out[f] = 'accepted'
    except PpoTrtError as e: out[f] = type(e).__name__ + ': ' + str(e)
print(json.dumps(out))"""


@pytest.fixture(scope='module')
def huge_refusals(tmp_path_factory):
    "{file: the refusal} of each huge file, adopted (or read) in one child under the address-space limit."
    d = tmp_path_factory.mktemp('huge')
    for name, (make, _) in HUGE.items(): make(d/name)
    npy_header(d/'rows.npy', (10 ** 12, 4), body=b'\0' * 64)
    assert all(p.stat().st_size < 400 for p in d.iterdir())
    r = subprocess.run([sys.executable, '-c', REFUSALS, *HUGE, 'rows.npy'], capture_output=True, text=True, cwd=d,
                       timeout=300, preexec_fn=limited, env={**os.environ, 'PYTHONWARNINGS': 'ignore'})
    assert r.returncode == 0, r.stderr[-3000:]  # a MemoryError (a regression) ends the child with a traceback
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize('name', HUGE)
def test_huge_declared_sizes_are_refused_before_allocating(huge_refusals, name):
    """On main: 3.7 GiB (state), 40 GiB (observation), 8 GiB (action) asked before any bound: MemoryError traceback."""
    assert huge_refusals[name].startswith(f'BadInputError: {name}: ') and HUGE[name][1] in huge_refusals[name], \
        huge_refusals[name]


def test_obs_npy_of_10_12_rows_is_refused_before_allocating(huge_refusals):
    "On main: np.load asked for 16 TB (a traceback)."
    assert huge_refusals['rows.npy'].startswith('BadInputError: --obs rows.npy: declares 1,000,000,000,000 rows'), \
        huge_refusals['rows.npy']
    assert 'MAX_OBS_ROWS' in huge_refusals['rows.npy'] and '1,000,000 ' in huge_refusals['rows.npy']


def test_export_c_of_a_huge_state_is_one_line_under_a_memory_limit(tmp_path):
    p = huge_state(tmp_path/'tiny.onnx')
    one_line(cli('export-c', p, '--out', tmp_path/'c', '--cc', 'none', cwd=tmp_path, limit=True), 2, 'tiny.onnx',
             'MAX_STATE')
    assert not (tmp_path/'c').exists()


@pytest.mark.parametrize('shape', [[-3, 'B', 8], [0, 'B', 8]])
def test_a_state_axis_below_one_is_refused(tmp_path, shape):
    from ppo_trt.export.foreign import infer_io
    nodes = [helper.make_node('MatMul', ['obs', 'W'], ['action']), helper.make_node('Identity', ['h_in'], ['h_out'])]
    p = save(tmp_path/'neg.onnx', nodes, [vi('obs', ['B', 4]), vi('h_in', shape)],
             [vi('action', ['B', 3]), vi('h_out', shape)], {'W': W})
    with pytest.raises(BadInputError, match='neg.onnx: the recurrent state .* axis below 1'):
        infer_io(onnx.load(p), where=p)


# ---- 3. --obs FILE.npy: the header read first ------------------------------------------------------------------------
NPY_CASES = {  # name: (shape, descr, body, what the refusal says)
    '10^12 rows': ((10 ** 12, 4), '<f4', b'\0' * 64, 'MAX_OBS_ROWS'),
    'object dtype': ((2, 4), '|O', b'\0' * 64, 'not [n, 4] float'),
    'structured dtype': ((2, 4), [('a', '<f4')], b'\0' * 32, 'not [n, 4] float'),
    'int dtype': ((2, 4), '<i4', b'\0' * 32, 'not [n, 4] float'),
    '3-D': ((2, 4, 1), '<f4', b'\0' * 32, 'not [n, 4] float'),
    'wrong width': ((2, 5), '<f4', b'\0' * 40, 'not [n, 4] float'),
    'zero rows': ((0, 4), '<f4', b'', 'not [n, 4] float'),
    'cut short': ((100, 4), '<f4', b'\0' * 160, 'cut or padded'),
    'padded': ((2, 4), '<f4', b'\0' * 4096, 'cut or padded'),
}


@pytest.mark.parametrize('case', NPY_CASES)
def test_obs_npy_refusals_read_the_header_first(tmp_path, case):
    from ppo_trt.measure.bench import declared_observations, BenchSettings
    shape, descr, body, says = NPY_CASES[case]
    p = npy_header(tmp_path/'obs.npy', shape, descr, body)
    with pytest.raises(BadInputError, match=rf'--obs .*obs\.npy: .*{re.escape(says)}'):
        declared_observations(4, BenchSettings(obs_file=str(p)))


def test_a_long_obs_npy_bakes_only_the_first_rows_into_the_c_header(tmp_path):
    "On main 200k rows became a 28.5 MB C header: only the first HEADER_ROWS are kept, and the line says so."
    from ppo_trt.measure.bench import declared_observations, BenchSettings, HEADER_ROWS
    obs = np.random.default_rng(0).normal(size=(5000, 4)).astype(np.float32)
    np.save(tmp_path/'obs.npy', obs)
    got, where = declared_observations(4, BenchSettings(obs_file=str(tmp_path/'obs.npy')), HEADER_ROWS)
    assert np.array_equal(got, obs[:HEADER_ROWS]) and f'the first {HEADER_ROWS:,} of 5,000 rows' in where
    full, _ = declared_observations(4, BenchSettings(obs_file=str(tmp_path/'obs.npy')))
    assert np.array_equal(full, obs)  # bench itself times on all of them


def test_a_fortran_order_float64_npy_still_reads(tmp_path):
    from ppo_trt.measure.bench import declared_observations, BenchSettings
    obs = np.asfortranarray(np.random.default_rng(0).normal(size=(7, 4)))
    np.save(tmp_path/'obs.npy', obs)
    got, _ = declared_observations(4, BenchSettings(obs_file=str(tmp_path/'obs.npy')))
    assert got.dtype == np.float32 and np.allclose(got, obs)


# ---- 4. the low ones ---------------------------------------------------------------------------------------------------
def test_obs_range_beyond_float32_says_so():
    "On main --obs-range=-1e39:1e39 drew inf and blamed the sensor."
    from ppo_trt.measure.bench import BenchSettings
    with pytest.raises(BadInputError, match=r'--obs-range -1e\+39:1e\+39 is not finite in float32.*give a box'):
        BenchSettings(obs_range=(-1e39, 1e39))


def test_an_output_that_is_its_input_is_named_so(tmp_path):
    "On main: 'which observation input to use is ambiguous (candidates: none)'."
    p = tmp_path/'echo.onnx'
    m = helper.make_model(helper.make_graph([], 'g', [vi('x', ['B', 4])], [vi('x', ['B', 4])]),
                          opset_imports=[helper.make_opsetid('', 17)], ir_version=8)
    onnx.save(m, str(p))
    with pytest.raises(BadInputError, match=r"echo\.onnx: its output 'x' is its input 'x' itself"):
        adopt(p)


def test_an_upper_case_suffix_is_an_onnx_file(tmp_path):
    "On main X.ONNX was refused ('neither a run folder nor a .onnx file')."
    import ppo_trt
    p = matmul(tmp_path/'ACTOR.ONNX')
    with ppo_trt.load('ort', p) as r:
        x = np.ones((2, 4), np.float32)
        assert np.allclose(r(x), x @ W, atol=1e-6)


def test_export_c_refusal_names_the_users_file_not_the_cache(tmp_path, capsys):
    "On main: '~/.cache/ppo_trt/adopted/<sha>.onnx: native backend cannot compile ops ['Sin']'."
    p = save(tmp_path/'sine.onnx', [helper.make_node('Sin', ['obs'], ['action'])], [vi('obs', ['B', 4])],
             [vi('action', ['B', 4])])
    err = cli_here(capsys, 2, 'export-c', p, '--out', tmp_path/'c', '--cc', 'none', says=('sine.onnx', "'Sin'"))
    assert 'adopted/' not in err and str(p) in err


def test_the_adoption_cache_keeps_the_newest_and_only_its_own_files(tmp_path, monkeypatch):
    "On main the adopted/ cache grew without bound."
    from ppo_trt.export.foreign import adopted_path, ADOPTED_CACHE_FILES
    monkeypatch.setenv('PPO_TRT_CACHE', str(tmp_path/'cache'))
    folder = tmp_path/'cache'/'adopted'; folder.mkdir(parents=True)
    old = [folder/f'{k:032x}.onnx' for k in range(ADOPTED_CACHE_FILES + 3)]
    for k, f in enumerate(old): f.write_bytes(b'x'); os.utime(f, (1000 + k, 1000 + k))
    others = {'notes.onnx': b'mine', f'{"a" * 32}.txt': b'mine', f'{"b" * 31}.onnx': b'mine'}
    for name, blob in others.items(): (folder/name).write_bytes(blob)
    (folder/f'{"c" * 32}.onnx').symlink_to(tmp_path/'elsewhere.onnx'); (tmp_path/'elsewhere.onnx').write_bytes(b'y')
    dest, a = adopted_path(matmul(tmp_path/'actor.onnx', obs='input', action='mu'))
    assert a is not None and dest.parent == folder and dest.is_file()
    kept = sorted(f.name for f in old if f.exists())
    assert kept == [f.name for f in old[-(ADOPTED_CACHE_FILES - 1):]], kept  # the newest, and the new one
    assert all((folder/n).read_bytes() == b for n, b in others.items())
    assert (folder/f'{"c" * 32}.onnx').is_symlink() and (tmp_path/'elsewhere.onnx').read_bytes() == b'y'
    again, _ = adopted_path(tmp_path/'actor.onnx')
    assert again == dest  # content-addressed: the same bytes, verified by hash, reused
