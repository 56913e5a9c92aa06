"""The fast kernels under hostile policies: a policy.onnx holding NaN/inf is refused by every backend at load, with
one line; a NaN that arises at run time comes out as ORT gives it, never as a plausible number; a wide policy does not
overflow the C stack; the hot paths never misread a foreign byte order; the C cache survives odd files and a
read-only disk."""
import contextlib, json, os, resource, shutil, subprocess, sys, textwrap
from pathlib import Path
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper, TensorProto
from ppo_trt.backends import registry as B
from ppo_trt.core.files import BadArtifactError, sha256_file
from conftest import ppo_trt, QUICK_BENCH

ONNX_CPU = ['ort', 'ort-iobind', 'native', 'native-c']


def _save(path, nodes, inits, obs_dim, act_dim):
    "A ppo_trt-style policy.onnx (input obs, output action, the deploy metadata) from a chain of nodes."
    vi = lambda name, w: helper.make_tensor_value_info(name, TensorProto.FLOAT, ['B', w])
    g = helper.make_graph(nodes, 'g', [vi('obs', obs_dim)], [vi('action', act_dim)],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)], ir_version=9)
    for k, v in dict(env_id='Hopper-v4', obs_dim=str(obs_dim), act_dim=str(act_dim)).items():
        e = model.metadata_props.add(); e.key, e.value = k, v
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return Path(path)


def _mlp(path, W1=None, high=None, elu_alpha=1.0, gemm_alpha=1.0, const=None):
    "obs[4] - c -> Gemm 4x8 -> Elu -> MatMul 8x3 -> Min(high) -> Max(-1): the knobs put a bad number in one place."
    rng = np.random.default_rng(0)
    W1 = rng.normal(size=(8, 4)).astype(np.float32) if W1 is None else W1
    inits = dict(W1=W1, b1=np.zeros(8), W2=rng.normal(size=(8, 3)), high=np.ones(3) if high is None else high,
                 low=-np.ones(3))
    nodes = [helper.make_node('Constant', [], ['c'], name='centre',
                              value=numpy_helper.from_array(np.full(4, 0.1 if const is None else const, np.float32))),
             helper.make_node('Sub', ['obs', 'c'], ['x']),
             helper.make_node('Gemm', ['x', 'W1', 'b1'], ['h'], name='layer1', transB=1, alpha=gemm_alpha),
             helper.make_node('Elu', ['h'], ['e'], name='act1', alpha=elu_alpha),
             helper.make_node('MatMul', ['e', 'W2'], ['m']),
             helper.make_node('Min', ['m', 'high'], ['mn']), helper.make_node('Max', ['mn', 'low'], ['action'])]
    return _save(path, nodes, inits, 4, 3)


POISONED = {  # where the bad number is: (what _mlp gets, what the refusal must name)
    'weight-nan':      (dict(W1=np.where(np.eye(8, 4) > 0, np.nan, 0.5).astype(np.float32)), "initializer 'W1'"),
    'weight-inf':      (dict(W1=np.where(np.eye(8, 4) > 0, np.inf, 0.5).astype(np.float32)), "initializer 'W1'"),
    'action-high-nan': (dict(high=np.array([1, np.nan, 1])), "initializer 'high'"),
    'constant-nan':    (dict(const=np.nan), "Constant node 'centre'"),
    'elu-alpha-inf':   (dict(elu_alpha=np.inf), "attribute alpha of Elu node 'act1'"),
    'elu-alpha-nan':   (dict(elu_alpha=np.nan), "attribute alpha of Elu node 'act1'"),
    'gemm-alpha-nan':  (dict(gemm_alpha=np.nan), "attribute alpha of Gemm node 'layer1'"),
}


@pytest.mark.parametrize('where', POISONED)
@pytest.mark.parametrize('name', ONNX_CPU)
def test_nonfinite_policy_is_refused_at_load(tmp_path, name, where):
    "Every backend that runs policy.onnx refuses NaN/inf in it with one line naming the tensor and the fix."
    knobs, names = POISONED[where]
    p = _mlp(tmp_path/'policy.onnx', **knobs)
    with pytest.raises(BadArtifactError) as e: B.load(name, p)
    msg = str(e.value)
    assert names in msg and 're-export' in msg and '\n' not in msg, msg


@pytest.mark.parametrize('name', ONNX_CPU)
def test_infinite_bounds_are_not_refused(tmp_path, name):
    "An infinite action bound (an unbounded action space) is no bound, not a bad number: loads, and matches ORT."
    p = _mlp(tmp_path/'policy.onnx', high=np.array([np.inf, 1, np.inf]))
    x = np.random.default_rng(2).normal(size=(13, 4)).astype(np.float32)
    assert np.abs(B.load(name, p)(x) - B.load('ort', p)(x)).max() <= 1e-5


def test_elu_alpha_inf_is_not_a_numba_typing_error(tmp_path):
    """native used to raise numba's TypingError (`inf` in the generated source); `backends.load` refuses the file with
    one line, and the kernel compiled directly writes np.inf and computes what ORT does."""
    from ppo_trt.export.numba_kernel import compile_policy
    p = _mlp(tmp_path/'policy.onnx', elu_alpha=np.inf)
    with pytest.raises(BadArtifactError, match="attribute alpha of Elu node 'act1'"): B.load('native', p)
    pol = compile_policy(p)
    x = np.random.default_rng(2).normal(size=(13, 4)).astype(np.float32)
    out = np.empty((13, 3), np.float32); pol.forward_rows(x, out, np.empty((2, pol.scratch), np.float32))
    from ppo_trt.export.onnx import ort_cpu_session
    want = ort_cpu_session(p).run(['action'], {'obs': x})[0]
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    assert np.abs(np.nan_to_num(out - want)).max() <= 1e-5


def _overflowing(path):
    """Finite weights that overflow at run time: a row with x0 = 2 makes layer 1 +-inf (3e38 * 2), and layer 2 adds
    +inf and -inf into NaN in every order of summation; rows with x0 = 0 stay finite. Widths 16 (register tiles),
    10 (plain loops) and 3 (narrow head) take every C dense path; tanh, clip, relu, min and max see the NaN."""
    rng = np.random.default_rng(1)
    s = np.where(np.arange(16) % 2 == 0, 1.0, -1.0)
    W1 = rng.normal(size=(4, 16)) * 0.1; W1[0] = 3e38 * s
    W2 = np.abs(rng.normal(size=(16, 16))) + 0.1; W2[:, 0] = np.where(s > 0, 1.0, 0.0)  # column 0: +inf only
    inits = dict(W1=W1, W2=W2, W3=rng.normal(size=(16, 10)), W4=rng.normal(size=(10, 3)), lo=-0.5, hi=0.5,
                 high=np.ones(3), low=-np.ones(3))
    nodes = [helper.make_node('MatMul', ['obs', 'W1'], ['h1']), helper.make_node('MatMul', ['h1', 'W2'], ['h2']),
             helper.make_node('Tanh', ['h2'], ['t2']), helper.make_node('MatMul', ['t2', 'W3'], ['h3']),
             helper.make_node('Relu', ['h3'], ['r3']), helper.make_node('Clip', ['r3', 'lo', 'hi'], ['c3']),
             helper.make_node('MatMul', ['c3', 'W4'], ['h4']), helper.make_node('Min', ['h4', 'high'], ['m4']),
             helper.make_node('Max', ['m4', 'low'], ['action'])]
    return _save(path, nodes, inits, 4, 3)


@pytest.mark.parametrize('name', ['native', 'native-c', 'ort-iobind'])
def test_nan_at_run_time_comes_out_as_ort_gives_it(tmp_path, name):
    "The clamps (tanh, clip, relu, min, max) let a NaN through as ORT does, at batch 1 and in 6-row tiles."
    p = _overflowing(tmp_path/'policy.onnx')
    x = np.random.default_rng(3).normal(size=(13, 4)).astype(np.float32)
    x[:, 0] = [0, 2, 0, 0, 2, 0, 2, 2, 0, -2, 0, 0, 2]  # no row near the overflow: its NaNs depend on no order
    want = B.load('ort', p)(x)
    assert np.isnan(want).any() and np.isfinite(want).any()  # the policy does what the test needs, in ORT
    r = B.load(name, p)
    for got in (r(x), np.concatenate([r(x[i:i + 1]) for i in range(len(x))]), r.run(x).copy()):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert np.abs(np.nan_to_num(got - want)).max() <= 1e-5


@pytest.mark.parametrize('name', ['native', 'native-c'])
def test_hot_path_nan_obs_comes_out_as_ort_gives_it(run_dir, name):
    "`run` skips the finiteness pass; what it makes of a NaN observation is ORT's NaN, not a clamped action."
    obs = np.load(run_dir/'export_obs.npy')[:8].copy()
    obs[2, 5] = np.nan
    want = B.load('ort', run_dir).run(obs)
    got = B.load(name, run_dir).run(obs)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(want[2]).all() and np.abs(np.nan_to_num(got - want)).max() <= 1e-5


def test_bench_of_a_poisoned_run_is_one_line(run_copy):
    "NaN in action_high of a real run: bench refuses with one line (it used to print parity nan and SLA pass)."
    p = run_copy/'policy.onnx'
    m = onnx.load(p)
    t = next(t for t in m.graph.initializer if t.name == 'action_high')
    a = numpy_helper.to_array(t).copy(); a[1] = np.nan
    t.CopyFrom(numpy_helper.from_array(a, 'action_high')); onnx.save(m, p)
    rec = json.loads((run_copy/'export.json').read_text()); rec['onnx_sha256'] = sha256_file(p)
    (run_copy/'export.json').write_text(json.dumps(rec))  # as if exported so: the freshness check passes
    before = (run_copy/'bench.json').read_bytes()
    r = ppo_trt('bench', '--run-dir', run_copy, '--backends', 'native,native-c', *QUICK_BENCH)
    assert r.returncode == 2 and 'Traceback' not in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1 and "initializer 'action_high'" in r.stderr, r.stderr
    assert (run_copy/'bench.json').read_bytes() == before


def _wide(path, width=200_000):
    "A 200 000-wide input scaled elementwise (so the first scratch row is input-wide), then 2 tanh units, 3 actions."
    rng = np.random.default_rng(0)
    inits = dict(scale=np.float32(0.5), W1=rng.normal(size=(width, 2)) * 1e-3, W2=rng.normal(size=(2, 3)))
    nodes = [helper.make_node('Mul', ['obs', 'scale'], ['s']), helper.make_node('MatMul', ['s', 'W1'], ['h']),
             helper.make_node('Tanh', ['h'], ['t']), helper.make_node('MatMul', ['t', 'W2'], ['action'])]
    return _save(path, nodes, inits, width, 3)


def test_wide_policy_native_c_batch_8_does_not_overflow_the_stack(tmp_path):
    "6-row tiles of a 200 000-wide scratch were 9.6 MB on the stack: SIGSEGV under the usual 8 MB limit."
    p = _wide(tmp_path/'policy.onnx')
    x = np.random.default_rng(1).normal(size=(8, 200_000)).astype(np.float32)
    np.save(tmp_path/'x.npy', x)
    code = f"""
        import numpy as np
        from ppo_trt.backends import registry as B
        x = np.load({str(tmp_path/'x.npy')!r})
        r = B.load('native-c', {str(p)!r})
        out = [r(x), np.concatenate([r(x[i:i + 1]) for i in range(8)]), r.run(x).copy()]
        np.save({str(tmp_path/'out.npy')!r}, np.stack(out))
    """
    limit = 8 << 20  # the usual default; a larger one would hide the overflow
    res = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True, text=True,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_STACK, (limit, limit)))
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])  # -11 was the SIGSEGV
    want = B.load('ort', p)(x)
    for got in np.load(tmp_path/'out.npy'): assert np.abs(got - want).max() <= 1e-5


FOREIGN = {'big-endian': lambda o: o.astype('>f4'), 'float64': lambda o: o.astype(np.float64),
           'fortran': np.asfortranarray, 'strided': lambda o: np.repeat(o, 2, axis=1)[:, ::2]}


@pytest.mark.parametrize('name', [n for n, (ok, _) in B.available().items() if ok and not B.backends()[n].gpu])
def test_hot_path_converts_or_refuses_foreign_layouts(run_dir, name):
    "`run` on another byte order, dtype or layout gives the right actions or raises; ort misread big-endian bytes."
    obs = np.load(run_dir/'export_obs.npy')[:8]
    r = B.load(name, run_dir)
    want = r(obs)
    for what, make in FOREIGN.items():
        try: got = np.array(r.run(make(obs)))
        except Exception: continue  # refused: fine
        assert np.abs(got - want).max() <= 1e-5, what


def _load_c(onnx_path, cache):
    "compile_c_policy in a fresh interpreter: (return code, its `cache` line or stderr's tail, actions on 7 rows)."
    code = f"""
        import json, numpy as np
        from ppo_trt.export.c_kernel import compile_c_policy
        pol = compile_c_policy({str(onnx_path)!r}, None, {str(cache)!r})
        x = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32); out = np.empty((7, 3), np.float32)
        pol.forward(x, out)
        print(json.dumps(dict(cache=pol.cache, out=out.tolist())))
    """
    r = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True, text=True)
    if r.returncode: return r.returncode, r.stderr[-2000:], None
    res = json.loads(r.stdout.splitlines()[-1])
    return 0, res['cache'], np.asarray(res['out'], np.float32)


@pytest.fixture
def built(tmp_path):
    "(policy.onnx, its cache folder holding a verified build, ORT's actions on the rows _load_c runs)."
    p, cache = _mlp(tmp_path/'a'/'policy.onnx'), tmp_path/'cache'
    code, how, out = _load_c(p, cache)
    assert (code, how) == (0, 'built'), how
    x = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    assert np.abs(out - B.load('ort', p)(x)).max() <= 1e-5
    return p, cache, out


def test_c_cache_binary_path_is_a_directory(built):
    "A directory where the extension belongs: built in a private folder and said so (was IsADirectoryError)."
    p, cache, want = built
    so = next(cache.glob('ppo_trt_policy_*.so')); so.unlink(); so.mkdir(); (so/'x').write_text('x')
    code, how, out = _load_c(p, cache)
    assert code == 0 and how.startswith('built in a private temporary folder'), how
    np.testing.assert_array_equal(out, want)
    assert (so/'x').read_text() == 'x'  # nothing of the user's replaced


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_c_cache_binary_and_record_of_another_policy(built, tmp_path):
    "The .so and .json of another policy copied under this policy's names: rebuilt (was ImportError, no rebuild)."
    p, cache, want = built
    other, other_cache = _mlp(tmp_path/'b'/'policy.onnx', W1=np.full((8, 4), 0.25, np.float32)), tmp_path/'cache_b'
    assert _load_c(other, other_cache)[:2] == (0, 'built')
    so, rec = next(cache.glob('ppo_trt_policy_*.so')), next(cache.glob('ppo_trt_policy_*.json'))
    shutil.copy(next(other_cache.glob('ppo_trt_policy_*.so')), so)
    shutil.copy(next(other_cache.glob('ppo_trt_policy_*.json')), rec)
    code, how, out = _load_c(p, cache)
    assert code == 0 and how.startswith('rebuilt: '), how
    np.testing.assert_array_equal(out, want)
    assert _load_c(p, cache)[1] == 'loaded from the cache (hash verified)'
    forged = json.loads(rec.read_text())  # a record made to vouch for the other policy's binary: it cannot import
    shutil.copy(next(other_cache.glob('ppo_trt_policy_*.so')), so); forged['so_sha256'] = sha256_file(so)
    rec.write_text(json.dumps(forged))
    code, how, out = _load_c(p, cache)
    assert code == 0 and how.startswith('rebuilt: the cached binary does not import'), how
    np.testing.assert_array_equal(out, want)


@contextlib.contextmanager
def _read_only(folder):
    """`folder` unwritable, even to root: chmod 0555 for a user; for root (who ignores modes) a read-only bind mount,
    else the immutable attribute; skipped where neither is allowed (a container without CAP_SYS_ADMIN)."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try: yield
        finally: folder.chmod(0o755)
        return
    for on, off in ((['mount', '--bind', '-o', 'ro', str(folder), str(folder)], ['umount', str(folder)]),
                    (['chattr', '+i', str(folder)], ['chattr', '-i', str(folder)])):
        if shutil.which(on[0]) and subprocess.run(on, capture_output=True).returncode == 0:
            if on[0] == 'mount': subprocess.run(['mount', '-o', 'remount,ro,bind', str(folder)], capture_output=True)
            try:
                probe = folder/'.probe'
                with pytest.raises(OSError): probe.write_text('x')
                yield
            finally: subprocess.run(off, capture_output=True)
            return
    pytest.skip('cannot make a folder read-only for root here (no mount or chattr permission)')


def test_c_cache_on_a_read_only_disk(built):
    "A valid cache on a read-only disk loads (the private copy goes elsewhere); a missing build is built privately."
    p, cache, want = built
    before = {f.name: f.read_bytes() for f in cache.iterdir()}
    with _read_only(cache):
        code, how, out = _load_c(p, cache)
        assert (code, how) == (0, 'loaded from the cache (hash verified)'), how
        np.testing.assert_array_equal(out, want)
        other = _mlp(p.parent.parent/'b'/'policy.onnx', W1=np.full((8, 4), 0.25, np.float32))
        code, how, out = _load_c(other, cache)
        assert code == 0 and how.startswith('built in a private temporary folder'), how
        x = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
        assert np.abs(out - B.load('ort', other)(x)).max() <= 1e-5
    assert {f.name: f.read_bytes() for f in cache.iterdir()} == before
