"""Issue 34: files users bring stay data. Every case is crafted here, as an attacker or a careless colleague would make
it, from a copy of a real run: code in a policy's metadata or in SB3's pickles never runs (no marker file appears),
a rerun keeps the user's files byte for byte, no link leads a secret into an output folder, metadata reaches C, HTML
and the terminal escaped, the generated kernels compute what ONNX Runtime computes or refuse, sizes are bounded before
anything is allocated, and every refusal is one line with its exit status. The five longest cases are marked slow
(`pytest -m slow tests`)."""
import base64, json, math, os, pickle, re, resource, shutil, signal, subprocess, sys, zipfile
from pathlib import Path
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper, TensorProto
from conftest import ppo_trt, QUICK_BENCH, one_line

ROOT = Path(__file__).parents[1]
REFERENCE = ROOT/'nbs'/'_reference'/'hopper'
TINY_BENCH = ['--warmup', '5', '--iters', '20', '--batches', '1,4', '--sweep-seconds', '0.01', '--closed-loop-steps',
              '50']


# ---- helpers -----------------------------------------------------------------------------------------------------
def sha(path):
    import hashlib
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def forge_records(run):
    "Re-forge the hashes train.json and export.json keep of the run's files, as any folder's author can."
    t, e = json.loads((run/'train.json').read_text()), json.loads((run/'export.json').read_text())
    t['policy_sha256'], t['obs_norm_sha256'] = sha(run/'policy.zip'), sha(run/'obs_norm.json')
    e['onnx_sha256'], e['export_obs_sha256'] = sha(run/'policy.onnx'), sha(run/'export_obs.npy')
    e['metadata']['policy_sha256'] = t['policy_sha256']
    (run/'train.json').write_text(json.dumps(t)); (run/'export.json').write_text(json.dumps(e))


class Payload:
    "A pickle that, when loaded, touches a marker file: the proof that code from a file ran."
    def __init__(self, marker): self.marker = str(marker)
    def __reduce__(self): return (os.system, (f'touch {self.marker}',))


def poison_zip(path, marker):
    "Put the payload where SB3 keeps a cloudpickle: the action space of the zip's `data` JSON."
    with zipfile.ZipFile(path) as z: members = {i.filename: z.read(i) for i in z.infolist()}
    data = json.loads(members['data'])
    data['action_space'][':serialized:'] = base64.b64encode(pickle.dumps(Payload(marker))).decode()
    members['data'] = json.dumps(data).encode()
    with zipfile.ZipFile(path, 'w') as z:
        for name, blob in members.items(): z.writestr(name, blob)


def tree(folder):
    "Every file under `folder` (links not followed) with its bytes or link target: what 'byte-identical' compares."
    out = {}
    for top, dirs, files in os.walk(folder):
        for n in dirs + files:
            p = Path(top)/n
            out[p.relative_to(folder).as_posix()] = (os.readlink(p) if p.is_symlink() else
                                                     p.read_bytes() if p.is_file() else 'dir')
    return out


def graph(path, nodes, inits=None, meta=None, in_type=TensorProto.FLOAT, opset=17, batch='B', width=(11, 3),
          extra_opsets=()):
    "A Hopper-sized policy.onnx (obs [batch, 11] -> action [batch, 3]) of `nodes`, with ppo_trt's metadata."
    g = helper.make_graph(nodes, 'g', [helper.make_tensor_value_info('obs', in_type, [batch, width[0]])],
                          [helper.make_tensor_value_info('action', TensorProto.FLOAT, [batch, width[1]])],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset), *extra_opsets], ir_version=8)
    for k, v in (meta or dict(env_id='Hopper-v4', obs_dim='11', act_dim='3')).items():
        e = m.metadata_props.add(); e.key, e.value = k, v
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(m, path)
    return Path(path)


W = (np.random.default_rng(0).normal(size=(11, 3)) * 0.2).astype(np.float32)
MLP = [helper.make_node('MatMul', ['obs', 'W'], ['m']), helper.make_node('Tanh', ['m'], ['action'])]


def policy_only(folder, nodes=MLP, inits=None, **kw):
    "A policy-only folder: a crafted policy.onnx and export observations of its width."
    graph(folder/'policy.onnx', nodes, {'W': W} if inits is None else inits, **kw)
    np.save(folder/'export_obs.npy', np.random.default_rng(1).normal(size=(40, 11)).astype(np.float32))
    return folder


def limited(mem_gb=8, fsize=None):
    "preexec_fn for a child with at most `mem_gb` GiB of address space (and `fsize` bytes per file)."
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (mem_gb << 30, mem_gb << 30))
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return apply


def ppo_trt_limited(*args, timeout=300, preexec=None, env=None):
    "The console script under limits: (CompletedProcess, or None when it ran past `timeout`)."
    exe = shutil.which('ppo-trt') or str(Path(sys.executable).with_name('ppo-trt'))
    try:
        return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                              preexec_fn=preexec or limited(),
                              env={**os.environ, 'PYTHONWARNINGS': 'ignore', **(env or {})})
    except subprocess.TimeoutExpired: return None


# ---- 1. every string goes through the escaper of where it lands ------------------------------------------------------
C_PAYLOAD = ('Hopper-v4\n#undef PPO_POLICY_ENV_ID\n#define PPO_POLICY_ENV_ID __FILE__\n'
             'extern int system(const char *); static const char pwn_cmd[] = {{{cmd}, 0}}; '
             '__attribute__((constructor)) static void pwn(void) {{ if (system(pwn_cmd)) return; }}\n'
             '#define PPO_POLICY_TAIL ')  # no '"' and no '*/': what the old escaping let through


def test_env_id_holding_c_never_reaches_the_compiler(run_copy, tmp_path):
    "An env_id with a newline and C (a constructor that runs a shell command) is refused before export-c writes C."
    marker = tmp_path/'PWNED'
    cmd = ', '.join(str(b) for b in f'touch {marker}'.encode())
    m = onnx.load(run_copy/'policy.onnx')
    next(p for p in m.metadata_props if p.key == 'env_id').value = C_PAYLOAD.format(cmd=cmd)
    onnx.save(m, run_copy/'policy.onnx'); forge_records(run_copy)
    r = ppo_trt('export-c', '--run-dir', run_copy)
    assert not marker.exists(), 'the C in the metadata ran'
    one_line(r, 2, 'is not an environment id')
    assert not (run_copy/'c_policy').exists()


def test_c_literals_spell_every_byte():
    "Any text written into C reads back byte for byte from the literal, and cannot end a comment."
    from ppo_trt.export.c_library import c_string, c_comment
    text = 'a"b\\c\n??/*/ é\x1b\x00' + ''.join(map(chr, range(32, 127)))
    lit = c_string(text)
    assert '\n' not in lit and '"' not in lit[1:-1] and '??' not in lit and '*/' not in c_comment(text)
    if not shutil.which('cc'): pytest.skip('no C compiler')
    d = Path(__import__('tempfile').mkdtemp())
    (d/'p.c').write_text(f'#include <stdio.h>\n/* {c_comment(text)} */\nint main(void) {{ '
                         f'fwrite({lit}, 1, sizeof {lit} - 1, stdout); return 0; }}\n')
    subprocess.run(['cc', '-std=c99', '-Wall', '-Wextra', '-pedantic', '-Werror', 'p.c', '-o', 'p'], cwd=d, check=True)
    assert subprocess.run([str(d/'p')], capture_output=True).stdout == text.encode('utf-8')


def test_terminal_escapes_in_a_record_are_shown_escaped(run_copy):
    "train.json's env_id holding ESC[2J and a title-setting OSC never reaches the terminal raw."
    t = json.loads((run_copy/'train.json').read_text())
    t['env_id'] = 'Hopper-v4\x1b[2J\x1b]0;pwned\x07'
    (run_copy/'train.json').write_text(json.dumps(t))
    r = ppo_trt('export-c', '--run-dir', run_copy, '--env-id', 'Walker2d-v4', '--cc', 'none')
    assert '\x1b' not in r.stderr + r.stdout and '\x07' not in r.stderr + r.stdout
    one_line(r, 2, 'train.json')


def test_a_ten_megabyte_metadata_value_is_one_short_line(tmp_path):
    "A 10 MB action_low in the metadata: one line, cut, naming the key (it was a 10 MB error line)."
    d = policy_only(tmp_path/'run', meta=dict(env_id='Hopper-v4', obs_dim='11', act_dim='3',
                                               action_low=json.dumps('x' * 10_000_000)))
    r = ppo_trt('export-c', '--run-dir', d, '--cc', 'none')
    err = one_line(r, 2, 'action_low')
    assert len(err) < 3000


HTML_PAYLOAD = '<img src="https://example.invalid/beacon.png" onerror="alert(1)"><script>alert(2)</script>'


def hostile_c_loop(run, where):
    "A c_loop.json for the run's policy with the payload in `where` (a typed fallback field, or free text)."
    c = json.loads((REFERENCE/'c_loop.json').read_text())
    c['onnx_sha256'] = c['session']['policy_sha256'] = sha(run/'policy.onnx')
    if where == 'fallback': c['fallback']['injected_step'] = HTML_PAYLOAD
    else: c['mujoco'], c['commands'] = HTML_PAYLOAD, [HTML_PAYLOAD]; c['python_returns'][HTML_PAYLOAD] = c['returns']
    (run/'c_loop.json').write_text(json.dumps(c))


@pytest.mark.skipif(not REFERENCE.is_dir(), reason='the reference run is in a clone (nbs/_reference)')
def test_markup_in_c_loop_fallback_is_refused(run_copy):
    "c_loop.json's fallback is typed: markup where a number goes is refused in one line, and no report carries it."
    hostile_c_loop(run_copy, 'fallback')
    r = ppo_trt('report', '--run-dir', run_copy)
    one_line(r, 2, 'c_loop.json')
    assert 'example.invalid' not in (run_copy/'report.html').read_text()


@pytest.mark.slow  # a long end-to-end check: pytest -m slow tests
@pytest.mark.skipif(not REFERENCE.is_dir(), reason='the reference run is in a clone (nbs/_reference)')
def test_markup_in_c_loop_text_is_escaped_and_report_fetches_nothing(run_copy):
    "Free text of c_loop.json reaches report.html and the site's page as text; report.html loads nothing remote."
    hostile_c_loop(run_copy, 'text')
    r = ppo_trt('report', '--run-dir', run_copy)
    assert r.returncode == 0, r.stderr[-2000:]
    html = (run_copy/'report.html').read_text()
    assert 'example.invalid/beacon' in html  # shown, as text
    assert not re.search(r'<(img|a|script)\b[^>]*example\.invalid', html), 'markup from the record, or a link to it'
    assert '<script' not in html.lower() and 'cdnjs' not in html and "default-src 'none'" in html
    nb = json.loads((run_copy/'report.ipynb').read_text())  # what the docs site renders as the run's page
    md = ''.join(''.join(o.get('data', {}).get('text/markdown', '')) for c in nb['cells'] for o in c.get('outputs', []))
    assert 'example.invalid' in md and '<img src="https://' not in md and '<script>' not in md


# ---- 2. no pickle from a file the user did not make here ------------------------------------------------------------
@pytest.mark.slow  # over 5 s: the quick suite keeps the README test command under 10 minutes
def test_policy_zip_pickle_never_runs(run_copy, tmp_path):
    "A payload in policy.zip's data: bench (sb3, torch), evaluate (torch) and export load the model, never the pickle."
    marker = tmp_path/'PWNED'
    poison_zip(run_copy/'policy.zip', marker); forge_records(run_copy)
    r = ppo_trt('bench', '--run-dir', run_copy, '--backends', 'sb3,torch', *TINY_BENCH)
    assert not marker.exists() and r.returncode == 0, r.stderr[-2000:]
    r = ppo_trt('evaluate', '--run-dir', run_copy, '--backends', 'torch', '--episodes', 1, '--phases', 'nominal')
    assert not marker.exists() and r.returncode == 0, r.stderr[-2000:]
    r = ppo_trt('export', '--run-dir', run_copy)
    assert not marker.exists() and r.returncode == 0, r.stderr[-2000:]


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_vecnormalize_pickle_never_runs(run_copy, tmp_path):
    "A payload as checkpoints/kept_vecnormalize.pkl: export refuses it in one line; the payload never ran."
    marker = tmp_path/'PWNED'
    (run_copy/'checkpoints'/'kept_vecnormalize.pkl').write_bytes(pickle.dumps(Payload(marker)))
    r = ppo_trt('export', '--run-dir', run_copy)
    assert not marker.exists()
    one_line(r, 2, 'kept_vecnormalize.pkl', 'without running code')


@pytest.mark.slow  # a long end-to-end check: pytest -m slow tests
def test_resume_reads_checkpoints_without_unpickling(run_copy, tmp_path):
    "train --resume from a checkpoint zip carrying a payload: training continues, the payload never runs."
    marker = tmp_path/'PWNED'
    ckpt = max((run_copy/'checkpoints').glob('ppo_*_steps.zip'), key=lambda p: int(p.stem.split('_')[1]))
    poison_zip(ckpt, marker)
    r = ppo_trt('train', '--run-dir', run_copy, '--resume', '--timesteps', 6144, '--eval-freq', 2048,
                '--eval-episodes', 1)
    assert not marker.exists()
    assert r.returncode == 0, r.stderr[-2000:]
    pkl = next((run_copy/'checkpoints').glob('ppo_vecnormalize_*_steps.pkl'))
    pkl.write_bytes(pickle.dumps(Payload(marker)))
    for z in (run_copy/'checkpoints').glob('ppo_vecnormalize_*_steps.pkl'): z.write_bytes(pkl.read_bytes())
    r = ppo_trt('train', '--run-dir', run_copy, '--resume', '--timesteps', 8192, '--eval-freq', 2048,
                '--eval-episodes', 1)
    assert not marker.exists()
    one_line(r, 2, 'without running code')


@pytest.mark.slow  # a long end-to-end check: pytest -m slow tests
def test_compare_does_not_load_a_reference_policy_zip_unless_asked(run_copy, tmp_path):
    "A reference with a payload in policy.zip: compare copies and loads it only for --backends torch, warning."
    marker = tmp_path/'PWNED'
    poison_zip(run_copy/'policy.zip', marker); forge_records(run_copy)
    quick = ['--warmup', '0', '--iters', '10', '--batches', '1', '--sweep-seconds', '0.01', '--closed-loop-steps', '0']
    r = ppo_trt('compare', '--reference', run_copy, '--run-dir', tmp_path/'cmp', *quick)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not marker.exists() and not (tmp_path/'cmp'/'policy.zip').exists()
    rows = {x['backend']: x for x in json.loads((tmp_path/'cmp'/'compare.json').read_text())['rows']}
    assert not rows['torch']['here']['ran'] and 'loads only when asked' in rows['torch']['here']['reason']
    r = ppo_trt('compare', '--reference', run_copy, '--run-dir', tmp_path/'cmp', '--backends', 'ort,torch', *quick)
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'WARNING' in r.stdout and "policy.zip" in r.stdout and not marker.exists()


def test_readme_says_which_files_are_code():
    readme = (ROOT/'README.md').read_text()
    assert 'ppo_trt never executes them' in readme and 'policy.zip' in readme and '.pkl' in readme


# ---- 3. reruns keep what is not theirs ------------------------------------------------------------------------------
USER_FILES = {'robot_main.c': b'int main(void) { return 0; }\n', 'mydriver/uart.c': b'/* years of work */\n',
              'CNAME': b'robot.example.org\n', '.git/HEAD': b'ref: refs/heads/gh-pages\n'}


def add_user_files(folder):
    for name, blob in USER_FILES.items():
        (folder/name).parent.mkdir(parents=True, exist_ok=True); (folder/name).write_bytes(blob)


def users(folder):
    return {n: (folder/n).read_bytes() if (folder/n).exists() else None for n in USER_FILES}


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
@pytest.mark.parametrize('out', [None, 'elsewhere'])
def test_export_c_rerun_keeps_the_users_files(run_copy, tmp_path, out):
    "export-c again over c_policy/ (or its --out): the user's files stay, byte for byte; its own are replaced."
    lib = run_copy/'c_policy' if out is None else tmp_path/out
    args = ['export-c', '--run-dir', run_copy, *(['--out', lib] if out else [])]
    assert ppo_trt(*args).returncode == 0
    add_user_files(lib)
    np.save(run_copy/'export_obs.npy', np.load(run_copy/'export_obs.npy')[::-1].copy()); forge_records(run_copy)
    r = ppo_trt(*args)
    assert r.returncode == 0, r.stderr[-2000:]
    assert users(lib) == USER_FILES
    assert 'ppo_policy.c' in os.listdir(lib)


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_export_c_never_writes_through_a_link_in_its_folder(run_copy, tmp_path):
    "A library file the user replaced by a link to their own file: the rerun refuses in one line, the file is intact."
    assert ppo_trt('export-c', '--run-dir', run_copy, '--cc', 'none').returncode == 0
    mine = tmp_path/'my_policy.c'; mine.write_bytes(USER_FILES['robot_main.c'])
    (run_copy/'c_policy'/'ppo_policy.c').unlink(); (run_copy/'c_policy'/'ppo_policy.c').symlink_to(mine)
    before = tree(run_copy/'c_policy')
    one_line(ppo_trt('export-c', '--run-dir', run_copy, '--cc', 'none'), 2, 'is a symbolic link')
    assert tree(run_copy/'c_policy') == before and mine.read_bytes() == USER_FILES['robot_main.c']


@pytest.mark.slow  # a long end-to-end check: pytest -m slow tests
def test_c_loop_rerun_keeps_the_users_files(run_copy):
    "c-loop again over c_loop/: a file the user keeps there stays."
    args = ('c-loop', '--run-dir', run_copy, '--steps', 500, '--episodes', 1)
    r = ppo_trt(*args)
    assert r.returncode == 0, r.stderr[-2000:]
    add_user_files(run_copy/'c_loop')
    assert ppo_trt(*args).returncode == 0
    assert users(run_copy/'c_loop') == USER_FILES


def test_docs_rerun_keeps_the_users_files(tmp_path):
    "The site installed again (what `ppo-trt docs --out` does after its build): CNAME, notes and .git stay."
    from ppo_trt.results.site import install_site, site_destination
    from ppo_trt.core.files import staging
    dest = site_destination(tmp_path/'site')
    for version in ('first', 'second'):
        with staging(dest) as stage:
            (stage/'site'/'assets').mkdir(parents=True)
            (stage/'site'/'index.html').write_text(f'<h1>{version}</h1>')
            (stage/'site'/'assets'/'x.css').write_text(version)
            install_site(stage, dest)
        if version == 'first': add_user_files(dest)
    assert users(dest) == USER_FILES and (dest/'index.html').read_text() == '<h1>second</h1>'


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_train_force_keeps_the_users_files_in_c_policy(run_copy):
    "train --force removes what was made from the old policy, never robot_main.c beside its C library."
    assert ppo_trt('export-c', '--run-dir', run_copy, '--cc', 'none').returncode == 0
    (run_copy/'c_policy'/'robot_main.c').write_bytes(USER_FILES['robot_main.c'])
    r = ppo_trt('train', '--run-dir', run_copy, '--force', '--preset', 'smoke', '--timesteps', 256)
    one_line(r, 2, 'robot_main.c was not written by ppo_trt')
    assert (run_copy/'c_policy'/'robot_main.c').read_bytes() == USER_FILES['robot_main.c']


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_leftovers_of_a_killed_run_are_listed_and_removed(run_copy):
    "What a kill -9 leaves (a half-built c_policy, a half-written record): doctor lists it, the next run removes it."
    building = run_copy/'.c_policy.building-999999999-x1'
    building.mkdir(); (building/'ppo_policy.c').write_text('half')
    partial = run_copy/'.bench.json.partial-x2.json'; partial.write_text('{"env')
    r = ppo_trt('doctor', '--run-dir', run_copy)
    assert '.c_policy.building-999999999-x1' in r.stdout and 'killed' in r.stdout, r.stdout[-2000:]
    assert ppo_trt('export-c', '--run-dir', run_copy, '--cc', 'none').returncode == 0
    assert not building.exists() and not partial.exists()


def test_enjoy_never_replaces_a_file_it_did_not_make(run_copy, tmp_path):
    "enjoy --out onto a file of the user's: refused in one line, the file byte for byte as it was."
    mine = tmp_path/'holiday.gif'; mine.write_bytes(b'GIF89a my holiday')
    one_line(ppo_trt('enjoy', '--run-dir', run_copy, '--out', mine, '--max-steps', 5), 2, 'never replaces a file')
    assert mine.read_bytes() == b'GIF89a my holiday'


# ---- 4. never read through a link out of the folder ----------------------------------------------------------------
SECRET = 'aws_secret_access_key = AKIA-NOT-A-REAL-KEY'


@pytest.mark.parametrize('name', ['config.json', 'train.json', 'obs_norm.json', 'export.json', 'export_obs.npy'])
def test_compare_never_copies_through_a_link(run_copy, tmp_path, name):
    "A reference whose file is a link to a secret outside it: refused in one line; no secret in compare's folder."
    (tmp_path/'credentials').write_text(SECRET)
    (run_copy/name).unlink(); (run_copy/name).symlink_to(tmp_path/'credentials')
    r = ppo_trt('compare', '--reference', run_copy, '--run-dir', tmp_path/'cmp', '--backends', 'ort',
                '--iters', 10, '--batches', 1, '--closed-loop-steps', 0)
    one_line(r, 2, name, 'never reads through a link')
    out = tmp_path/'cmp'
    assert not out.exists() or SECRET not in ''.join(p.read_text(errors='ignore') for p in out.rglob('*')
                                                     if p.is_file())


@pytest.mark.parametrize('name', ['export_obs.npy', 'bench.json', 'policy.onnx'])
def test_run_folder_reads_refuse_links_out(run_copy, tmp_path, name):
    "A run folder's artifact linked out of it: bench and report refuse it in one line."
    (tmp_path/'outside').write_bytes((run_copy/name).read_bytes())
    (run_copy/name).unlink(); (run_copy/name).symlink_to(tmp_path/'outside')
    cmd = 'report' if name == 'bench.json' else 'bench'
    r = ppo_trt(cmd, '--run-dir', run_copy, *(TINY_BENCH if cmd == 'bench' else []))
    one_line(r, 2, 'never reads through a link')


def test_a_bare_policy_linked_out_of_its_folder_is_refused(tmp_path):
    policy_only(tmp_path/'real')
    (tmp_path/'deploy').mkdir(); (tmp_path/'deploy'/'policy.onnx').symlink_to(tmp_path/'real'/'policy.onnx')
    r = ppo_trt('bench', tmp_path/'deploy'/'policy.onnx', '--run-dir', tmp_path/'b', *TINY_BENCH)
    one_line(r, 2, 'never reads through a link')


# ---- 5. the kernels compute what ORT computes, or refuse -------------------------------------------------------------
def _f(v): return np.asarray(v, np.float32)


KERNEL_CASES = {  # name: (nodes, initializers, graph() options)
    "Clip(x, '', max)": ([helper.make_node('MatMul', ['obs', 'W'], ['m']),
                          helper.make_node('Clip', ['m', '', 'hi'], ['action'])],
                         {'W': W, 'hi': _f(0.1)}, {}),
    'Clip-6 min/max attributes': ([helper.make_node('MatMul', ['obs', 'W'], ['m']),
                                   helper.make_node('Clip', ['m'], ['action'], min=-0.35, max=0.2)],
                                  {'W': W}, dict(opset=10)),
    'Constant(value_float)': ([helper.make_node('Constant', [], ['c'], value_float=0.5),
                               helper.make_node('MatMul', ['obs', 'W'], ['m']),
                               helper.make_node('Mul', ['m', 'c'], ['action'])],
                              {'W': W}, {}),
    'variadic Min': ([helper.make_node('MatMul', ['obs', 'W'], ['m']),
                      helper.make_node('Min', ['m', 'a', 'b'], ['action'])],
                     {'W': W, 'a': _f([0.2, 0.3, 0.4]), 'b': _f(0.25)}, {}),
    'int64 initializer': ([helper.make_node('MatMul', ['obs', 'W'], ['m']),
                           helper.make_node('Add', ['m', 'k'], ['action'])],
                          {'W': W, 'k': np.ones(3, np.int64)}, {}),
    'double initializer': ([helper.make_node('MatMul', ['obs', 'W'], ['action'])], {'W': W.astype(np.float64)}, {}),
    'double input': ([helper.make_node('MatMul', ['obs', 'W'], ['action'])], {'W': W.astype(np.float64)},
                     dict(in_type=TensorProto.DOUBLE)),
    'half input': ([helper.make_node('MatMul', ['obs', 'W'], ['action'])], {'W': W.astype(np.float16)},
                   dict(in_type=TensorProto.FLOAT16)),
    'duplicate node names': ([helper.make_node('MatMul', ['obs', 'W'], ['m'], name='n'),
                              helper.make_node('Tanh', ['m'], ['action'], name='n')], {'W': W}, {}),
    'opset 99': (MLP, {'W': W}, dict(opset=99)),
    'custom-domain Tanh': ([helper.make_node('MatMul', ['obs', 'W'], ['m']),
                            helper.make_node('Tanh', ['m'], ['action'], domain='evil')],
                           {'W': W}, dict(extra_opsets=[helper.make_opsetid('evil', 1)])),
    'column-wise Min': ([helper.make_node('MatMul', ['obs', 'W'], ['m']),
                         helper.make_node('Min', ['m', 'c'], ['action'])],
                        {'W': W, 'c': np.ones((3, 1), np.float32)}, {}),
}


def ort_actions(path, x):
    "ONNX Runtime's actions for `x`, or None where ORT refuses the model or these rows."
    import onnxruntime as ort
    try:
        sess = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
        return sess.run(None, {'obs': x.astype({TensorProto.DOUBLE: np.float64, TensorProto.FLOAT16: np.float16}.get(
            onnx.load(path).graph.input[0].type.tensor_type.elem_type, np.float32))})[0]
    except Exception: return None


@pytest.mark.parametrize('name', ['native', 'native-c'])
@pytest.mark.parametrize('case', KERNEL_CASES)
def test_generated_kernels_compute_what_ort_computes_or_refuse(tmp_path, case, name):
    "Each crafted graph: the kernel gives ORT's actions, or refuses in one line; where ORT refuses, it refuses."
    from ppo_trt.backends import registry as B
    from ppo_trt.core.files import PpoTrtError
    nodes, inits, kw = KERNEL_CASES[case]
    p = graph(tmp_path/'policy.onnx', nodes, inits, **kw)
    x = np.random.default_rng(3).normal(size=(9, 11)).astype(np.float32) * 3
    want = ort_actions(p, x)
    try: got = B.load(name, p)(x)
    except PpoTrtError as e:
        assert '\n' not in str(e), str(e)
        return
    assert want is not None and want.shape == got.shape, f'{case}: ORT refuses it, {name} ran it'
    assert np.abs(got - want).max() <= 1e-5, (case, np.abs(got - want).max())


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_c_loop_pass_compares_against_ort(run_copy):
    "A policy whose obs clip has an empty min: the C loop's actions must be ORT's (it passed with 22 against 211)."
    m = onnx.load(run_copy/'policy.onnx')
    clip = next(n for n in m.graph.node if n.op_type == 'Clip')
    clip.input[1] = ''
    onnx.save(m, run_copy/'policy.onnx'); forge_records(run_copy)
    r = ppo_trt('c-loop', '--run-dir', run_copy, '--steps', 1000, '--episodes', 2)
    rec = json.loads((run_copy/'c_loop.json').read_text())
    assert rec['check'].get('ort_max_abs') is not None and rec['check']['ort_max_abs'] <= 1e-5, rec['check']
    assert r.returncode == 0 and rec['check']['passed'], r.stderr[-2000:]
    ort = rec['python_returns']['ppo:ort']
    assert all(abs(a - b) <= 0.02 * abs(b) + 1 for a, b in zip(rec['returns'], ort)), (rec['returns'], ort)


# ---- 6. bounded by construction -------------------------------------------------------------------------------------
def test_bench_batches_beyond_memory_is_one_line(run_copy):
    before = (run_copy/'bench.json').read_bytes()
    r = ppo_trt_limited('bench', '--run-dir', run_copy, '--backends', 'ort', '--batches', 16777216, '--iters', 10,
                        '--closed-loop-steps', 0)
    assert r is not None, 'ran past the timeout'
    one_line(r, 2, '--batches', 'memory')
    assert (run_copy/'bench.json').read_bytes() == before


def test_export_parity_obs_beyond_memory_is_one_line(run_copy):
    before = tree(run_copy)
    r = ppo_trt_limited('export', '--run-dir', run_copy, '--parity-obs', 1_000_000_000)
    assert r is not None, 'ran past the timeout'
    one_line(r, 2, '--parity-obs', 'memory')
    assert tree(run_copy) == before


def test_fast_num_envs_beyond_memory_is_one_line(tmp_path):
    r = ppo_trt_limited('train', '--fast', '--num-envs', 16777216, '--run-dir', tmp_path/'fast', '--timesteps', 1000)
    assert r is not None, 'ran past the timeout'
    one_line(r, 2, '--num-envs', 'memory')


def test_evaluate_episodes_bounded(run_copy):
    r = ppo_trt_limited('evaluate', '--run-dir', run_copy, '--episodes', 100_000_000, timeout=120)
    assert r is not None, 'an absurd --episodes was accepted and ran'
    one_line(r, 2, '--episodes')


def test_a_graph_too_deep_to_compile_is_refused(tmp_path):
    "10 000 Tanh nodes: refused in one line, quickly (numba took minutes and gigabytes)."
    nodes = [helper.make_node('MatMul', ['obs', 'W'], ['t0'])] + [
        helper.make_node('Tanh', [f't{i}'], [f't{i + 1}' if i < 9_999 else 'action']) for i in range(10_000)]
    p = graph(tmp_path/'policy.onnx', nodes, {'W': W})
    code = (f"from ppo_trt.backends import registry as B\ntry: B.load('native', {str(p)!r})\n"
            "except Exception as e: print(type(e).__name__, e)")
    try: r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=90,
                            preexec_fn=limited(8))
    except subprocess.TimeoutExpired: pytest.fail('still compiling after 90 s')
    assert 'fused steps' in r.stdout and '\n' not in r.stdout.strip(), (r.stdout, r.stderr[-1000:])


def test_native_c_cache_is_evicted_by_size(tmp_path):
    "Builds of three policies under a 1 MiB cap: the least recently used go, the newest stays."
    cache = tmp_path/'cache'
    code = ("import sys\nfrom ppo_trt.export.c_kernel import compile_c_policy\n"
            "for p in sys.argv[1:]: compile_c_policy(p)")
    paths = [graph(tmp_path/f'p{i}'/'policy.onnx', MLP, {'W': W * (i + 1)}) for i in range(3)]
    r = subprocess.run([sys.executable, '-c', code, *map(str, paths)], capture_output=True, text=True,
                       env={**os.environ, 'PPO_TRT_CACHE': str(cache), 'PPO_TRT_NATIVE_C_CACHE_MB': '0.05'})
    assert r.returncode == 0, r.stderr[-2000:]
    builds = sorted(cache.glob('native_c/*.so'), key=os.path.getmtime)
    assert len(builds) == 1, [b.name for b in builds]  # 50 KB holds one build: only the newest stays


def test_bench_exits_non_zero_when_an_asked_backend_fails(run_copy):
    """torch cannot load a damaged policy.zip (its hash forged to match): its record says failed, bench.json is written,
    and the exit status is 1 (it was 0)."""
    (run_copy/'policy.zip').write_bytes(b'PK\x03\x04 not a model'); forge_records(run_copy)
    r = ppo_trt('bench', '--run-dir', run_copy, '--backends', 'ort,torch', *TINY_BENCH)
    one_line(r, 1, 'torch', 'failed to load')
    recs = json.loads((run_copy/'bench.json').read_text())['records']
    assert any(x['backend'] == 'torch' and x.get('failed') for x in recs)
    assert any(x['backend'] == 'ort' and x['ran'] for x in recs)


# ---- 7. one line, naming the file and the fix -----------------------------------------------------------------------
@pytest.mark.parametrize('case', ['fixed batch', 'column-wise Min'])
def test_bench_file_on_graphs_ort_cannot_batch(tmp_path, case):
    nodes = MLP if case == 'fixed batch' else KERNEL_CASES['column-wise Min'][0]
    inits = {'W': W} if case == 'fixed batch' else KERNEL_CASES['column-wise Min'][1]
    p = graph(tmp_path/'x'/'policy.onnx', nodes, inits, batch=1 if case == 'fixed batch' else 'B')
    one_line(ppo_trt('bench', p, '--run-dir', tmp_path/'b', *TINY_BENCH), 2, 'policy.onnx')


EXPORT_C_CASES = {
    'int64 initializer': 'int64 initializer', 'opset 99': 'opset 99', 'duplicate node names': 'duplicate node names',
    'custom-domain Tanh': 'custom-domain Tanh'}


@pytest.mark.parametrize('case', [*EXPORT_C_CASES, 'history_actions string', 'action_low string'])
def test_export_c_refusals_are_one_line(tmp_path, case):
    meta = dict(env_id='Hopper-v4', obs_dim='11', act_dim='3')
    if case == 'history_actions string': meta['history_actions'] = json.dumps('2')
    if case == 'action_low string': meta['action_low'] = json.dumps('[-1, -1, -1]')
    nodes, inits, kw = KERNEL_CASES.get(EXPORT_C_CASES.get(case), (MLP, {'W': W}, {}))
    d = policy_only(tmp_path/'run', nodes, inits, meta=meta, **kw)
    one_line(ppo_trt('export-c', '--run-dir', d), 2, 'policy.onnx')


def test_export_c_of_a_constant_value_float(tmp_path):
    "A valid Constant(value_float): the library is written, built and passes its test against ORT."
    nodes, inits, kw = KERNEL_CASES['Constant(value_float)']
    d = policy_only(tmp_path/'run', nodes, inits, **kw)
    r = ppo_trt('export-c', '--run-dir', d)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize('change', ['stats null', 'empty cdf', 'no calls'])
def test_report_on_a_bench_json_without_statistics(run_copy, change):
    b = json.loads((run_copy/'bench.json').read_text())
    rec = next(r for r in b['records'] if r['ran'] and r['mode'] == 'latency')
    if change == 'stats null': rec['stats'] = None
    elif change == 'empty cdf': rec['stats']['cdf_us'] = []
    else: rec['stats']['n'] = 0
    (run_copy/'bench.json').write_text(json.dumps(b))
    one_line(ppo_trt('report', '--run-dir', run_copy), 2, 'bench.json', 'ppo-trt bench --replace')


def test_a_compiler_that_fails_silently_is_named(run_copy):
    one_line(ppo_trt('export-c', '--run-dir', run_copy, '--cc', '/bin/false'), 2, 'exit status 1', 'printed nothing')


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_a_failed_library_test_leaves_the_good_library(run_copy, tmp_path):
    "A new library that fails its test never replaces the one installed: c_policy/ byte for byte as before."
    assert ppo_trt('export-c', '--run-dir', run_copy).returncode == 0
    before = tree(run_copy/'c_policy')
    np.save(run_copy/'export_obs.npy', np.load(run_copy/'export_obs.npy')[::-1].copy()); forge_records(run_copy)
    cc = tmp_path/'cc'
    cc.write_text('#!/bin/sh\ncc "$@" || exit $?\nfor last; do :; done\ncp /bin/false "$last"\n'); cc.chmod(0o755)
    r = ppo_trt('export-c', '--run-dir', run_copy, '--cc', cc)
    one_line(r, 2, 'test failed')
    assert tree(run_copy/'c_policy') == before


def test_a_full_disk_names_the_file(run_copy):
    "A write that fails (file size limit: EFBIG) names the file it was writing."
    r = ppo_trt_limited('export-c', '--run-dir', run_copy, '--cc', 'none', preexec=limited(8, fsize=64 << 10))
    one_line(r, 2, 'ppo_policy')


def test_env_id_advice_that_cannot_help_is_not_given(tmp_path):
    "A policy saying Hopper-v4 with 12 inputs: the line says the file does not fit Hopper-v4, not '--env-id Hopper-v4'."
    p = graph(tmp_path/'x'/'policy.onnx', MLP, {'W': np.ones((12, 3), np.float32)}, width=(12, 3),
              meta=dict(env_id='Hopper-v4', obs_dim='12', act_dim='3'))
    err = one_line(ppo_trt('bench', p, '--run-dir', tmp_path/'b', *TINY_BENCH), 2, 'Hopper-v4')
    assert '--env-id Hopper-v4' not in err


def test_a_broken_bare_policy_is_not_sent_to_export(tmp_path):
    (tmp_path/'x').mkdir(); (tmp_path/'x'/'policy.onnx').write_bytes(b'\x08\x07not onnx')
    err = one_line(ppo_trt('bench', tmp_path/'x'/'policy.onnx', '--run-dir', tmp_path/'b', *TINY_BENCH), 2)
    assert f'ppo-trt export --run-dir {tmp_path/"x"}' not in err


def test_metadata_of_the_wrong_type_is_named(tmp_path):
    "A string history_actions in a bare policy: the line names the key, not 'cannot be stepped here'."
    p = graph(tmp_path/'x'/'policy.onnx', MLP, {'W': W},
              meta=dict(env_id='Hopper-v4', obs_dim='11', act_dim='3', history_actions=json.dumps('x')))
    err = one_line(ppo_trt('bench', p, '--run-dir', tmp_path/'b', *TINY_BENCH), 2, 'history_actions')
    assert 'cannot be stepped here' not in err


def test_ort_iobind_hot_path_refuses_foreign_dtypes(run_dir):
    from ppo_trt.backends import registry as B
    obs = np.load(run_dir/'export_obs.npy')[:4]
    r = B.load('ort-iobind', run_dir)
    for foreign in (obs.astype('>f4'), obs.astype(np.float64), obs.astype(np.int32)):
        with pytest.raises(ValueError): r.run(foreign)


@pytest.mark.slow  # a long end-to-end check: pytest -m slow tests
def test_swapped_external_data_makes_the_bench_stale(tmp_path):
    "A policy.onnx whose weights live in w.bin: replacing w.bin is a changed policy (doctor said bench.json ok)."
    d = tmp_path/'run'; d.mkdir()
    m = onnx.load(graph(tmp_path/'tmp.onnx', MLP, {'W': W}))
    onnx.save(m, d/'policy.onnx', save_as_external_data=True, all_tensors_to_one_file=True, location='w.bin',
              size_threshold=0)
    assert ppo_trt('bench', '--run-dir', d, '--backends', 'ort', *TINY_BENCH).returncode == 0
    (d/'w.bin').write_bytes((W * 2).tobytes())
    out = ppo_trt('doctor', '--run-dir', d).stdout
    assert any(l.split()[2:4] == ['bench.json', 'stale'] for l in out.splitlines() if l.startswith('run folder')), out
