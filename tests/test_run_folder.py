"""The run folder never lies: bad records are one line and change nothing, a killed stage leaves records that are old
or new (never half-written) and doctor says which, writers take turns, records merge, --force and --resume keep one
timeline."""
import hashlib, json, os, random, signal, subprocess, sys, time
from pathlib import Path
import numpy as np
import pytest
from conftest import ppo_trt, QUICK_BENCH
from ppo_trt.core.files import PARTIAL
from ppo_trt.core.records import lineage_problems, read_record, LOCK_NAME, HOLDER_NAME


def _state(folder):
    "{relative path: sha256} of every file, the lock's own files and killed writers' partial files left out."
    skip = (LOCK_NAME, HOLDER_NAME)
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob('*')) if p.is_file() and p.name not in skip and PARTIAL not in p.name}


def _one_line_error(r, *needles):
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stdout[-800:], err[-2000:])
    assert len(err.splitlines()) == 1 and 'Traceback' not in err, err
    for n in needles: assert n in err, (n, err)


# file -> (the command that reads it, a key it must have, a typed key and a wrong value for it)
RECORDS = {
    'config.json': (['train', '--resume', '--timesteps', '4096'], 'seed', ('timesteps', 'many')),
    'train.json': (['export'], 'timesteps', ('obs_dim', 'eleven')),
    'obs_norm.json': (['export'], 'var', ('mean', 'zero')),
    'export.json': (['bench', '--backends', 'ort', *QUICK_BENCH], 'onnx_sha256', ('opset', 'seventeen')),
    'bench.json': (['report'], 'records', ('records', {'a': 1})),
    'evaluate.json': (['report'], 'phases', ('episodes', 'twenty')),
}


def _damaged(blob, how, required, typed):
    if how == 'random bytes': return np.random.default_rng(0).bytes(len(blob))
    if how == 'truncated': return blob[:len(blob) // 2]
    if how == 'nested deep': return b'[' * 200_000 + b']' * 200_000  # deeper than Python's recursion limit
    d = json.loads(blob)
    if how == 'missing key': d.pop(required)
    else: d[typed[0]] = typed[1]
    return json.dumps(d).encode()


@pytest.fixture(scope='module')
def evaluated(run_dir, tmp_path_factory):
    "A copy of the end-to-end run with an evaluate.json too."
    import shutil
    dst = tmp_path_factory.mktemp('evaluated')/'run'
    shutil.copytree(run_dir, dst)
    r = ppo_trt('evaluate', '--run-dir', dst, '--phases', 'nominal', '--episodes', 1, '--backends', 'ort',
                '--deadline-us', 1e6)
    assert r.returncode == 0, r.stderr[-2000:]
    return dst


# the quick run covers one damage per record (each check runs a stage: seconds); `pytest -m slow` the other four
@pytest.mark.parametrize('how', ['random bytes',
                                 *(pytest.param(h, marks=pytest.mark.slow) for h in ('nested deep', 'truncated',
                                                                                    'wrong type', 'missing key'))])
@pytest.mark.parametrize('file', list(RECORDS))
def test_bad_record_is_one_line_and_changes_nothing(evaluated, tmp_path, file, how):
    import shutil
    run = tmp_path/'run'; shutil.copytree(evaluated, run)
    cmd, required, typed = RECORDS[file]
    (run/file).write_bytes(_damaged((run/file).read_bytes(), how, required, typed))
    before = _state(run)
    _one_line_error(ppo_trt(*cmd, '--run-dir', run), file)
    assert _state(run) == before
    # doctor reads records like the stages do; two damages show it
    if how not in ('random bytes', 'missing key'): return
    doctor = ppo_trt('doctor', '--run-dir', run)
    assert (doctor.returncode == 0 and 'to fix' in doctor.stdout
            and file in doctor.stdout.split('to fix')[-1]), doctor.stdout[-1500:]


@pytest.mark.parametrize('damage', ['no metadata', 'truncated onnx', 'truncated zip'])
def test_bad_model_files(run_copy, damage):
    import onnx
    if damage == 'no metadata':
        m = onnx.load(run_copy/'policy.onnx'); del m.metadata_props[:]; onnx.save(m, run_copy/'policy.onnx')
        cmd, needle = ['bench', '--backends', 'ort', *QUICK_BENCH], 'policy.onnx'
    elif damage == 'truncated onnx':
        p = run_copy/'policy.onnx'; p.write_bytes(p.read_bytes()[:500])
        cmd, needle = ['bench', '--backends', 'ort'], 'policy.onnx'
    else:
        p = run_copy/'policy.zip'; p.write_bytes(p.read_bytes()[:3000]); cmd, needle = ['export'], 'policy.zip'
    before = _state(run_copy)
    _one_line_error(ppo_trt(*cmd, '--run-dir', run_copy), needle)
    assert _state(run_copy) == before


def _kill_at(cmd, run, at_s):
    "Start `ppo-trt cmd` on `run`, SIGKILL it after `at_s` seconds (if still running); its return code."
    exe = Path(sys.executable).with_name('ppo-trt')
    p = subprocess.Popen([str(exe), *map(str, cmd), '--run-dir', str(run)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try: return p.wait(timeout=at_s)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL); return p.wait()


STAGES = {'export': ['export'], 'bench': ['bench', '--backends', 'ort,native-c', *QUICK_BENCH],
          'evaluate': ['evaluate', '--phases', 'nominal', '--episodes', 1, '--backends', 'ort', '--deadline-us', 1e6],
          'report': ['report']}


@pytest.mark.slow
@pytest.mark.parametrize('stage', list(STAGES))
def test_killed_stage_leaves_old_or_new_records_and_doctor_says_which(evaluated, tmp_path, stage):
    import shutil
    rng = random.Random(stage)
    scratch = tmp_path/'scratch'; shutil.copytree(evaluated, scratch)
    t0 = time.perf_counter(); assert _kill_at(STAGES[stage], scratch, 600) == 0
    whole = time.perf_counter() - t0  # kill points spread over the stage's own duration, writes near the end included
    run = tmp_path/'run'; shutil.copytree(evaluated, run)
    for attempt in range(2):
        before = _state(run)
        rc = _kill_at(STAGES[stage], run, whole * rng.uniform(0.4, 1.0))
        after = _state(run)
        for f, h in after.items():  # every record is a whole file, the old one or a new one
            if f.endswith('.json') and h != before.get(f): read_record(run/f)
        problems = lineage_problems(run)
        doctor = ppo_trt('doctor', '--run-dir', run).stdout
        if problems: assert 'to fix' in doctor and all(p[0] in doctor for p in problems), (problems, doctor[-1500:])
        else: assert 'consistent' in doctor, doctor[-1500:]
        print(stage, attempt, 'rc', rc, 'changed', sorted(f for f in after if after[f] != before.get(f)),
              'problems', problems)
    # running the stage again repairs what the kills left of its own records
    r = ppo_trt(*STAGES[stage], '--run-dir', run)
    assert r.returncode == 0, r.stderr[-2000:]
    later = {'export': {'bench.json', 'evaluate.json', 'report.html'}, 'bench': {'report.html'},
             'evaluate': {'report.html'}}
    assert {p[0] for p in lineage_problems(run)} <= later.get(stage, set()), lineage_problems(run)
    assert not list(run.rglob(f'.*{PARTIAL}*'))


@pytest.mark.slow  # over 4 s: the quick suite keeps the README test command under 10 minutes
def test_interrupted_export_is_detected(run_copy):
    "The window between policy.onnx's rename and export.json's: every later stage refuses, doctor names it."
    import onnx
    m = onnx.load(run_copy/'policy.onnx'); m.doc_string = 'another export'; onnx.save(m, run_copy/'policy.onnx')
    _one_line_error(ppo_trt('bench', '--backends', 'ort', '--run-dir', run_copy), 'does not match export.json',
                    'ppo-trt export')
    _one_line_error(ppo_trt('report', '--run-dir', run_copy), 'does not match export.json')
    assert 'policy.onnx' in ppo_trt('doctor', '--run-dir', run_copy).stdout.split('to fix')[-1]


@pytest.mark.slow  # over 4.5 s: with the long checks (pytest -m slow tests)
def test_writers_take_turns(run_copy):
    exe = str(Path(sys.executable).with_name('ppo-trt'))
    first = subprocess.Popen([exe, 'bench', '--run-dir', str(run_copy), '--backends', 'ort', '--iters', '3000',
                              '--sweep-seconds', '0.3'],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (run_copy/HOLDER_NAME).exists() and time.time() < deadline: time.sleep(0.05)
    _one_line_error(ppo_trt('evaluate', '--run-dir', run_copy, '--no-wait'), 'is in use by `ppo-trt bench`')
    second = ppo_trt('bench', '--run-dir', run_copy, '--backends', 'native-c', *QUICK_BENCH)
    assert first.wait(timeout=300) == 0 and second.returncode == 0, second.stderr[-2000:]
    assert 'waiting for `ppo-trt bench`' in second.stderr
    recs = read_record(run_copy/'bench.json').records
    assert {'ort', 'native-c'} <= {r.backend for r in recs if r.ran}


@pytest.mark.slow  # over 4 s: the quick suite keeps the README test command under 10 minutes
def test_subset_bench_keeps_the_rest(run_copy):
    before = read_record(run_copy/'bench.json')
    r = ppo_trt('bench', '--run-dir', run_copy, '--backends', 'ort', *QUICK_BENCH)
    assert r.returncode == 0, r.stderr[-2000:]
    after = read_record(run_copy/'bench.json')
    key = lambda x: (x.backend, x.mode, x.batch)
    assert {key(x) for x in after.records} == {key(x) for x in before.records}
    old = {key(x): x for x in before.records}
    for x in after.records:
        assert (x.session == after.session) == (x.backend == 'ort')
        if x.backend != 'ort': assert x == old[key(x)]
    assert 'also keeps' in r.stdout
    r = ppo_trt('bench', '--run-dir', run_copy, '--backends', 'ort', '--replace', *QUICK_BENCH)
    assert {x.backend for x in read_record(run_copy/'bench.json').records} == {'ort'}


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_force_removes_everything_made_from_the_old_policy(run_copy):
    (run_copy/'env_bench_CartPole-v1.json').write_text(json.dumps(dict(rows=[], cpu='x')))
    r = ppo_trt('train', '--run-dir', run_copy, '--force', '--preset', 'smoke', '--timesteps', 512, '--eval-freq', 512,
                '--eval-episodes', 1)
    assert r.returncode == 0, r.stderr[-2000:]
    names = {p.name for p in run_copy.iterdir() if not p.name.startswith('.')}
    assert names == {'config.json', 'policy.zip', 'obs_norm.json', 'train_log.csv', 'train.json', 'checkpoints',
                     'env_bench_CartPole-v1.json'}, names


@pytest.mark.slow
def test_killed_then_resumed_training_keeps_one_timeline(tmp_path):
    run = tmp_path/'run'
    exe = str(Path(sys.executable).with_name('ppo-trt'))
    p = subprocess.Popen([exe, 'train', '--run-dir', str(run), '--preset', 'smoke', '--timesteps', '60000',
                          '--eval-freq', '768', '--eval-episodes', '1'],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    def ready():  # a checkpoint exists and the log has gone past it
        ck = (sorted(int(f.name.split('_')[1]) for f in (run/'checkpoints').glob('ppo_*_steps.zip'))
              if (run/'checkpoints').exists() else [])
        log = (run/'train_log.csv').read_text().splitlines()[1:] if (run/'train_log.csv').exists() else []
        return ck and log and int(log[-1].split(',')[0]) > ck[-1]
    while not ready() and time.time() < deadline and p.poll() is None: time.sleep(0.2)
    p.send_signal(signal.SIGKILL); p.wait()
    assert not (run/'policy.zip').exists()
    _one_line_error(ppo_trt('train', '--run-dir', run, '--preset', 'smoke', '--timesteps', 4096),
                    'interrupted training')
    r = ppo_trt('train', '--run-dir', run, '--preset', 'smoke', '--timesteps', 4096, '--resume', '--eval-freq', 768,
                '--eval-episodes', 1)
    assert r.returncode == 0, r.stderr[-2000:]
    t = read_record(run/'train.json')
    steps = [int(l.split(',')[0]) for l in (run/'train_log.csv').read_text().splitlines()[1:]]
    assert steps == sorted(set(steps)) and max(steps) <= t.timesteps, (steps, t.timesteps)
    assert t.kept_timesteps <= t.timesteps and (t.kept_timesteps in steps or t.kept_timesteps == t.timesteps), t


def test_artifacts_follow_the_umask(run_dir):
    import stat
    from ppo_trt.core.files import _umask
    for f in ('report.html', 'bench.json', 'policy.onnx'):  # not mkstemp's 0600: what the umask allows
        assert stat.S_IMODE((run_dir/f).stat().st_mode) == 0o666 & ~_umask(), f
