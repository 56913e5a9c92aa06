"""Untrusted files, round three (issue 44): a VecNormalize .pkl is read by ppo_trt's own pickle-opcode interpreter
(plain data, never a callable), an SB3 zip's declared sizes are bounded before anything is built, and `ppo-trt import`
is all or nothing. Every hostile file is crafted here, opcode by opcode or member by member, as an attacker would; the
ones that could crash or allocate are read in a child process under a memory limit, so a regression dies (or says
MemoryError) instead of passing."""
import json, os, pickle, struct, subprocess, sys, zipfile
from pathlib import Path
import numpy as np
import pytest
from conftest import ppo_trt
from ppo_trt.core.files import BadArtifactError, BadInputError, PpoTrtError

MEM_LIMIT = 3 << 29  # 1.5 GiB of address space for a child reading hostile files


# ---- a pickle written opcode by opcode ------------------------------------------------------------------------------
def G(module, name): return f'c{module}\n{name}\n'.encode()                    # GLOBAL
def S(text): b = text.encode(); return b'X' + struct.pack('<I', len(b)) + b     # BINUNICODE
def I(i): return b'J' + struct.pack('<i', i)                                    # BININT
def F(x): return b'G' + struct.pack('>d', x)                                    # BINFLOAT
def B(raw): return b'B' + struct.pack('<I', len(raw)) + raw                     # BINBYTES
def T(*parts): return b'(' + b''.join(parts) + b't'                             # MARK ... TUPLE
def D(**kv): return b'}(' + b''.join(S(k) + v for k, v in kv.items()) + b'u'   # EMPTY_DICT MARK ... SETITEMS
def call(f, *args): return f + T(*args) + b'R'                                  # f(*args) by REDUCE
def obj(module, name, **attrs): return G(module, name) + b')\x81' + D(**attrs) + b'b'  # NEWOBJ, BUILD
TRUE, FALSE, NONE = b'\x88', b'\x89', b'N'

def dtype(code='f8', order='<', flags=0):
    "numpy's pickle of a dtype: dtype(code, False, True), then BUILD of its standard state."
    return (call(G('numpy', 'dtype'), S(code), FALSE, TRUE)
            + T(I(3), S(order), NONE, NONE, NONE, I(-1), I(-1), I(flags)) + b'b')

def array(values=(0.0,), shape=None, dt=None, raw=None):
    "numpy's pickle of an array: _reconstruct(ndarray, (0,), b'b'), then BUILD (1, shape, dtype, False, raw opcodes)."
    v = np.asarray(values, '<f8')
    shape = v.shape if shape is None else shape
    return (call(G('numpy.core.multiarray', '_reconstruct'), G('numpy', 'ndarray'), T(I(0)), B(b'b'))
            + T(I(1), T(*map(I, shape)), dt or dtype(), FALSE, raw or B(v.tobytes())) + b'b')

RMS = ('stable_baselines3.common.running_mean_std', 'RunningMeanStd')
def rms(mean=None, var=None, **extra):
    return obj(*RMS, mean=mean or array([0.5, -1.0, 2.0]), var=var or array([1.0, 4.0, 0.25]), count=F(4.0), **extra)

def vecnorm(obs_rms=None, **more):
    "A VecNormalize pickle (protocol 2) as SB3 writes one, with `obs_rms` and any attribute replaced by opcodes."
    attrs = dict(obs_rms=obs_rms or rms(), ret_rms=rms(array([0.0], shape=()), array([1.0], shape=())),
                 clip_obs=F(10.0), clip_reward=F(10.0), gamma=F(0.99), epsilon=F(1e-8), training=TRUE,
                 norm_obs=TRUE, norm_reward=TRUE)
    attrs.update(more)
    return b'\x80\x02' + obj('stable_baselines3.common.vec_env.vec_normalize', 'VecNormalize', **attrs) + b'.'

BOX = ('gymnasium.spaces.box', 'Box')
INTERFACE = dict(shape=T(I(3)), typestr=S('<f8'), version=I(3))
SHARED = B(b'\0' * (1 << 20)) + b'r' + struct.pack('<I', 9999)  # 1 MiB of bytes, memoised (LONG_BINPUT 9999)
HOSTILE = {  # name: (the file's bytes, what the one line must say)
    'array_interface_address': (vecnorm(rms(mean=obj(*BOX, __array_interface__=D(data=T(I(16), TRUE), **INTERFACE)))),
                                'its observation mean is not a vector of floats'),
    'array_interface_heap': (vecnorm(rms(mean=obj(*BOX, __array_interface__=D(data=B(b'A' * 8), offset=I(4096),
                                                                              **INTERFACE)))),
                             'its observation mean is not a vector of floats'),
    'rms_own_interface': (vecnorm(rms(__array_interface__=D(data=T(I(16), TRUE), **INTERFACE))),
                          'RunningMeanStd has an attribute __array_interface__'),
    'object_dtype_flags_cleared': (vecnorm(rms(mean=array(shape=(1,), raw=B(b'A' * 8), dt=call(
        G('numpy', 'dtype'), S('O8'), FALSE, TRUE) + T(I(3), S('|'), NONE, NONE, NONE, I(-1), I(-1), I(0)) + b'b'))),
        'it calls dtype with arguments numpy never writes'),
    'structured_object_dtype': (vecnorm(rms(mean=call(G('numpy', 'ndarray'), T(I(1)), call(
        G('numpy', 'dtype'), b']' + T(S('a'), S('O')) + b'a'), B(b'A' * 8)))), 'it calls dtype'),
    'dtype_state_rewritten': (vecnorm(rms(mean=array([1.0], dt=dtype(flags=63)))), 'it sets the state of dtype'),
    'ndarray_stride_0': (vecnorm(rms(mean=call(G('numpy', 'ndarray'), T(I(1 << 27)), S('u1'), B(b'\0'), I(0),
                                               T(I(0))))), 'it calls ndarray'),
    'shape_dwarfs_bytes': (vecnorm(rms(mean=array(shape=(1 << 27,)))), 'it holds an array of shape (134217728,)'),
    'shape_and_bytes_differ': (vecnorm(rms(mean=array(shape=(4,)))), 'in 8 bytes, not 32'),
    'one_mib_in_2000_arrays': (vecnorm(old_obs=SHARED + b'0' + b']' + b'('
                                       + array(shape=(1 << 17,), raw=b'j' + struct.pack('<I', 9999)) * 2000 + b'e'),
                               'it builds more bytes of arrays than its own'),
    'getattr': (b'\x80\x02' + call(G('builtins', 'getattr'), S('x'), S('y')) + b'.', 'builtins.getattr'),
    'eval': (vecnorm(gamma=call(G('builtins', 'eval'), S('0.99'))), 'builtins.eval'),
    'copyreg_reconstructor': (vecnorm(gamma=call(G('copyreg', '_reconstructor'), G(*BOX), G('builtins', 'object'),
                                                 NONE)), 'copyreg._reconstructor'),
    'alias_of_a_runner': (vecnorm(gamma=call(G('numpy.testing._private.utils', 'runstring'), S('1'), D())),
                          'numpy.testing._private.utils.runstring'),
    'ext1': (b'\x80\x02\x82\x01.', 'opcode EXT1'),
    'persistent_id': (b'\x80\x02' + S('x') + b'Q.', 'opcode BINPERSID'),
    'dict_observations': (vecnorm(obs_rms=D(a=rms())), 'a Dict observation space'),
    'no_statistics': (vecnorm(obs_rms=NONE), 'it holds no running statistics'),
    'not_finite': (vecnorm(rms(mean=array([np.nan, 0.0, 1.0]))), 'not two finite vectors'),
}

CHILD = '''
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from ppo_trt.core.checkpoint import read_vecnormalize
for path in sys.argv[1:]:
    try: st = read_vecnormalize(path); out = ['read', repr(st.obs_mean)]
    except Exception as e: out = [type(e).__name__, str(e)]
    print(json.dumps([path, *out]), flush=True)
'''

def in_child(code, *args, timeout=300):
    "Run `code` in a fresh Python under the memory limit: (returncode, {first arg of a line: the rest}, stderr)."
    r = subprocess.run([sys.executable, '-c', code.format(limit=MEM_LIMIT), *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, env={**os.environ, 'PYTHONWARNINGS': 'ignore'})
    return r.returncode, {row[0]: row[1:] for row in map(json.loads, r.stdout.splitlines())}, r.stderr


@pytest.fixture(scope='module')
def hostile_reads(tmp_path_factory):
    "(returncode, {case: [error class, message]}) of one child reading every hostile .pkl in turn."
    d = tmp_path_factory.mktemp('pkl')
    for name, (blob, _) in HOSTILE.items(): (d/f'{name}.pkl').write_bytes(blob)
    rc, rows, err = in_child(CHILD, *(d/f'{n}.pkl' for n in HOSTILE))
    return rc, {Path(k).stem: v for k, v in rows.items()}, err


def test_hostile_reads_end_in_no_signal(hostile_reads):
    "The child reading every hostile file exits by itself: no SIGSEGV, no kill for memory."
    rc, rows, err = hostile_reads
    assert rc == 0, f'the reader died with {rc} after {list(rows)}: {err[-2000:]}'


@pytest.mark.parametrize('case', list(HOSTILE))
def test_hostile_pickle_refused_in_one_line(hostile_reads, case):
    "Each hostile VecNormalize file: one line naming the file and what in it is refused; nothing read from it."
    rc, rows, err = hostile_reads
    assert case in rows, f'the reader died before {case} (exit {rc}): {err[-1500:]}'
    kind, line = rows[case]
    assert kind == 'BadArtifactError' and '\n' not in line, (kind, line)
    assert f'{case}.pkl' in line and HOSTILE[case][1] in line, line


# ---- real VecNormalize files, every protocol SB3 and RL Zoo write ---------------------------------------------------
@pytest.fixture(scope='module')
def sb3(tmp_path_factory):
    "(folder, VecNormalize, PPO model) on Pendulum: model.zip and vecnormalize.pkl saved by SB3 itself (untrained)."
    import warnings
    warnings.filterwarnings('ignore')
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
    d = tmp_path_factory.mktemp('sb3')
    venv = VecNormalize(make_vec_env('Pendulum-v1', n_envs=2, seed=0), gamma=0.98, clip_obs=5.0)
    venv.reset()
    for _ in range(5): venv.step(np.ones((2, 1), np.float32))
    venv.action_space.seed(1); venv.observation_space.sample()  # a Box holding a seeded generator
    model = PPO('MlpPolicy', venv, n_steps=64, batch_size=32, seed=0, device='cpu')
    model.save(d/'model.zip'); venv.save(str(d/'vecnormalize.pkl'))
    return d, venv, model


@pytest.mark.parametrize('protocol', [2, 3, 4, 5, 'save', 'sb3-1.x'])
def test_real_vecnormalize_reads_back(sb3, protocol, tmp_path):
    "A VecNormalize pickled by SB3 (its save, protocols 2 to 5, SB3 1.x's gym / numpy.core spelling) reads exactly."
    from ppo_trt.core.checkpoint import read_vecnormalize
    d, vn, _ = sb3
    path = tmp_path/'vn.pkl'
    if protocol == 'save': path = d/'vecnormalize.pkl'
    elif protocol == 'sb3-1.x':  # protocol 2 names globals as text lines: respell them as gym and numpy 1.x did
        blob = pickle.dumps(vn, protocol=2).replace(b'cgymnasium.spaces.box\n', b'cgym.spaces.box\n')
        path.write_bytes(blob.replace(b'cnumpy._core.multiarray\n', b'cnumpy.core.multiarray\n'))
        assert b'cgym.spaces.box\n' in path.read_bytes()
    else: path.write_bytes(pickle.dumps(vn, protocol=protocol))
    st = read_vecnormalize(path)
    assert (st.obs_mean == vn.obs_rms.mean).all() and (st.obs_var == vn.obs_rms.var).all()
    assert (st.obs_count, st.ret_mean, st.ret_var, st.ret_count) == (vn.obs_rms.count, float(vn.ret_rms.mean),
                                                                    float(vn.ret_rms.var), vn.ret_rms.count)
    assert (st.clip_obs, st.clip_reward, st.gamma, st.epsilon) == (5.0, vn.clip_reward, 0.98, vn.epsilon)
    assert (st.norm_obs, st.norm_reward, st.training) == (True, True, True)


# ---- SB3 zips: crafted members and settings -------------------------------------------------------------------------
def rezip(src, dst, change=None, prefix=b'', members=None):
    "A copy of SB3 zip `src` at `dst`: its data JSON changed by `change`, `prefix` put in front of its keys."
    with zipfile.ZipFile(src) as z: files = {i.filename: z.read(i) for i in z.infolist()}
    if change: data = json.loads(files['data']); change(data); files['data'] = json.dumps(data).encode()
    if prefix: files['data'] = b'{' + prefix + files['data'].lstrip()[1:]
    files.update(members or {})
    with zipfile.ZipFile(dst, 'w', zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for n, b in files.items(): z.writestr(n, b)
    return Path(dst)

def patch_headers(path, member, method=None, flag=0):
    "Set the zip method and OR `flag` into the general-purpose flags of `member`'s local and central headers."
    blob, name = bytearray(path.read_bytes()), member.encode()
    for sig, flags_at, len_at, name_at in ((b'PK\x03\x04', 6, 26, 30), (b'PK\x01\x02', 8, 28, 46)):
        i = blob.find(sig)
        while i >= 0:
            n = struct.unpack_from('<H', blob, i + len_at)[0]
            if blob[i + name_at:i + name_at + n] == name:
                struct.pack_into('<H', blob, i + flags_at, struct.unpack_from('<H', blob, i + flags_at)[0] | flag)
                if method is not None: struct.pack_into('<H', blob, i + flags_at + 2, method)
            i = blob.find(sig, i + 4)
    path.write_bytes(bytes(blob))
    return path

def nan_weights(src):
    "policy.pth of SB3 zip `src` with one weight NaN."
    import io, torch
    with zipfile.ZipFile(src) as z: sd = torch.load(io.BytesIO(z.read('policy.pth')), weights_only=True)
    next(t for t in sd.values() if t.is_floating_point()).view(-1)[0] = float('nan')
    buf = io.BytesIO(); torch.save(sd, buf)
    return {'policy.pth': buf.getvalue()}

def dropped(key): return lambda d: d.pop(key)

def setting(key, value):
    def change(d): d[key] = value
    return change


def refusal(path, run, **kw):
    "The error import_policy raises for `path` into `run` (Pendulum-v1), asserted one line; the run folder absent."
    from ppo_trt.export.foreign import import_policy, ImportSettings
    with pytest.raises(PpoTrtError) as e: import_policy(path, ImportSettings('Pendulum-v1', run, **kw))
    line = str(e.value)
    assert '\n' not in line and not run.exists() and not list(run.parent.glob(f'.{run.name}.building-*')), line
    return e.value


@pytest.mark.parametrize('case, make, want', [
    ('encrypted', lambda d, z: patch_headers(rezip(z, d/'x.zip'), 'data', flag=0x1), 'its member data is encrypted'),
    ('method_99', lambda d, z: patch_headers(rezip(z, d/'x.zip'), 'data', method=99), 'packed with zip method 99'),
    ('timesteps_text', lambda d, z: rezip(z, d/'x.zip', setting('num_timesteps', 'abc')), 'num_timesteps is abc,'),
    ('timesteps_list', lambda d, z: rezip(z, d/'x.zip', setting('num_timesteps', [1])), 'num_timesteps is [1]'),
    ('timesteps_1e400', lambda d, z: rezip(z, d/'x.zip', dropped('num_timesteps'), b'"num_timesteps": 1e400, '),
     'num_timesteps is inf'),
    ('gamma_nan', lambda d, z: rezip(z, d/'x.zip', dropped('gamma'), b'"gamma": NaN, '), 'its gamma is nan'),
    ('nan_weights', lambda d, z: rezip(z, d/'x.zip', members=nan_weights(z)), 'policy.pth holds NaN or inf'),
    ('discrete_huge', lambda d, z: rezip(z, d/'x.zip', lambda j: j['action_space'].update(
        {':type:': "<class 'gymnasium.spaces.discrete.Discrete'>", 'n': 10 ** 30})), 'a Discrete of'),
])
def test_zip_refused_whole(sb3, tmp_path, case, make, want):
    "A hostile SB3 zip: a BadArtifactError of one line naming the file and the cause; no run folder left behind."
    path = make(tmp_path, sb3[0]/'model.zip')
    e = refusal(path, tmp_path/'run')
    assert isinstance(e, BadArtifactError) and str(path) in str(e) and want in str(e), str(e)


def test_import_folder_says_folder(sb3, tmp_path):
    "A folder given for the model: one line saying it is a folder and naming the model files in it."
    e = refusal(sb3[0], tmp_path/'run')
    assert isinstance(e, BadInputError) and 'is a folder: pass the model file in it (model.zip)' in str(e), str(e)


def test_late_failure_leaves_nothing(sb3, tmp_path):
    "An import failing at its last step (export) leaves no run folder, no stage; the line names the user's file."
    e = refusal(sb3[0]/'model.zip', tmp_path/'run', vecnormalize=sb3[0]/'vecnormalize.pkl', parity_obs=10,
                eval_episodes=1)
    assert f"importing {sb3[0]/'model.zip'}: parity needs at least 1000" in str(e), str(e)


ZIP_CHILD = '''
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from pathlib import Path
from ppo_trt.export.foreign import import_policy, ImportSettings
for path in sys.argv[2:]:
    run = Path(sys.argv[1])/Path(path).stem
    try: import_policy(path, ImportSettings('Pendulum-v1', run, eval_episodes=1)); out = ['imported', '']
    except Exception as e: out = [type(e).__name__, str(e)]
    print(json.dumps([Path(path).stem, *out, run.exists()]), flush=True)
'''
BIG = {  # a zip within the unpacked-size cap whose settings ask for gigabytes (or seconds) before any check
    'box_8_gib': (lambda j: j['observation_space'].update(_shape=[1 << 20, 1 << 10], low='-1.0', high='1.0'),
                  'observation_space is a Box of shape [1048576, 1024]'),
    'list_40m': (b'"junk": [' + b'0,' * 40_000_000 + b'0], ', 'its data holds 80,0'),
    'net_arch_4096': (lambda j: j.update(policy_kwargs={'net_arch': [4096, 4096]}), 'its net_arch declares 16,805,890 weights'),
    'rollout_2_40': (lambda j: j.update(n_steps=1 << 40), 'rollout buffer of'),
}


@pytest.fixture(scope='module')
def big_imports(sb3, tmp_path_factory):
    "(returncode, {case: [error class, message, run folder exists]}) of one child importing every zip of `BIG`."
    d = tmp_path_factory.mktemp('big')
    for name, (change, _) in BIG.items():
        rezip(sb3[0]/'model.zip', d/f'{name}.zip', **({'prefix': change} if isinstance(change, bytes) else
                                                      {'change': change}))
    return in_child(ZIP_CHILD, d/'runs', *(d/f'{n}.zip' for n in BIG))


@pytest.mark.parametrize('case', list(BIG))
def test_zip_sizes_bounded_before_allocation(big_imports, case):
    "Declared sizes past the stated bounds are refused in one line before anything is built (under 1.5 GiB)."
    rc, rows, err = big_imports
    assert case in rows, f'the importer died before {case} (exit {rc}): {err[-1500:]}'
    kind, line, left = rows[case]
    assert kind == 'BadArtifactError' and '\n' not in line and BIG[case][1] in line and not left, (kind, line, left)


# ---- the command ----------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_failed_import_then_retry(sb3, tmp_path):
    """ppo-trt import: a failure (num_timesteps 'abc') exits 2 with one line and leaves no folder; the retry, with .ZIP
    and .PKL spelled in capitals, imports; a folder given as the model says so."""
    bad, run = rezip(sb3[0]/'model.zip', tmp_path/'bad.zip', setting('num_timesteps', 'abc')), tmp_path/'run'
    r = ppo_trt('import', bad, '--env-id', 'Pendulum-v1', '--run-dir', run)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and 'num_timesteps is abc,' in lines[-1] and 'Traceback' not in r.stderr, r.stderr
    assert not run.exists()
    r = ppo_trt('import', sb3[0], '--env-id', 'Pendulum-v1', '--run-dir', run)
    assert r.returncode == 2 and 'is a folder: pass the model file in it' in r.stderr and not run.exists(), r.stderr
    (tmp_path/'MODEL.ZIP').write_bytes((sb3[0]/'model.zip').read_bytes())
    (tmp_path/'VN.PKL').write_bytes((sb3[0]/'vecnormalize.pkl').read_bytes())
    r = ppo_trt('import', tmp_path/'MODEL.ZIP', '--vecnormalize', tmp_path/'VN.PKL', '--env-id', 'Pendulum-v1',
                '--run-dir', run)
    assert r.returncode == 0, r.stderr
    assert {'policy.zip', 'policy.onnx', 'obs_norm.json', 'config.json', 'train.json', 'export.json'} <= {
        p.name for p in run.iterdir()}
