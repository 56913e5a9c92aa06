"""A polite CLI: `--json` gives one JSON document on stdout, `--version`, progress lines that arrive as the work goes
when output is piped, words instead of Python values, one clear line instead of Ray's noise or a repeated fix."""
import json, os, shutil, subprocess, sys, time
from pathlib import Path
import pytest
import ppo_trt as pkg
from conftest import ppo_trt, QUICK_BENCH

REF = Path(__file__).parents[1]/'nbs'/'_reference'/'hopper'
EXE = shutil.which('ppo-trt') or str(Path(sys.executable).with_name('ppo-trt'))

def timed_lines(*args):
    "Run the console script with stdout a pipe; each stdout line with the seconds since start it arrived at; exit code."
    t0 = time.perf_counter()
    p = subprocess.Popen([EXE, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, 'PYTHONWARNINGS': 'ignore'})
    lines = [(time.perf_counter() - t0, line.rstrip('\n')) for line in p.stdout]
    p.wait()
    return lines, time.perf_counter() - t0, p.returncode

def progress(lines): return [(t, l) for t, l in lines if l.startswith('[ppo-trt]')]

def reference_copy(tmp_path):
    "A copy of the committed reference run (records, policy.onnx; no policy.zip)."
    return Path(shutil.copytree(REF, tmp_path/'ref'))

# --json -------------------------------------------------------------------------------------------------------------

@pytest.mark.slow  # over 4 s: the quick suite keeps the README test command under 10 minutes
def test_bench_json_is_one_document_on_stdout(run_copy):
    r = ppo_trt('bench', '--run-dir', run_copy, '--backends', 'ort,native', '--json', *QUICK_BENCH)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(r.stdout)  # the whole of stdout: no table, no progress line
    assert rec == json.loads((run_copy/'bench.json').read_text())
    assert {x['backend'] for x in rec['records'] if x['session'] == rec['session']} == {'ort', 'native'}
    assert '[ppo-trt]' in r.stderr and 'ppo-trt bench' in r.stderr  # progress and the table went to stderr

@pytest.mark.slow  # over 4.5 s: with the long checks (pytest -m slow tests)
def test_evaluate_json(run_copy):
    r = ppo_trt('evaluate', '--run-dir', run_copy, '--phases', 'nominal', '--episodes', 1, '--backends', 'native',
                '--deadline-us', 1e6, '--json')
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    assert [p['phase'] for p in rep['phases']] == ['nominal'] and set(rep['gates']) == {'torch', 'native'}
    assert 'gate native' in r.stderr

def test_doctor_json(run_dir):
    r = ppo_trt('doctor', '--run-dir', run_dir, '--json')
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert all(set(row) == {'component', 'ok', 'detail', 'fix'} for row in doc['components'])
    assert {b['name'] for b in doc['backends']} >= {'ort', 'native-c'}
    assert {x['file']: x['state'] for x in doc['run_folder']['records']}['policy.onnx'] == 'ok'

def test_json_error_leaves_stdout_empty(tmp_path):
    r = ppo_trt('bench', '--run-dir', tmp_path/'nothing', '--json')
    assert r.returncode == 2 and r.stdout == '' and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert 'ppo-trt bench: error:' in r.stderr and 'run `ppo-trt' in r.stderr, r.stderr  # the stage's refusal

def test_version():
    r = ppo_trt('--version')
    assert r.returncode == 0 and r.stdout == f'ppo-trt {pkg.__version__}\n', (r.stdout, r.stderr)

# progress when piped ------------------------------------------------------------------------------------------------

@pytest.mark.slow  # over 4.5 s: with the long checks (pytest -m slow tests)
def test_bench_progress_arrives_as_it_goes(run_copy):
    lines, wall, rc = timed_lines('bench', '--run-dir', run_copy, '--backends', 'ort,native', *QUICK_BENCH)
    assert rc == 0
    said = progress(lines)
    ort = [t for t, l in said if l.startswith('[ppo-trt] bench ort')]
    native = [t for t, l in said if l.startswith('[ppo-trt] bench native')]
    assert len(ort) == len(native) == 2, lines[:10]  # started, finished
    assert max(ort) <= min(native) and max(ort) < wall - 0.5  # in order, each as its backend finished

@pytest.mark.slow  # over 5 s: the quick suite keeps the README test command under 10 minutes
def test_evaluate_progress_per_phase_and_policy(run_copy):
    lines, wall, rc = timed_lines('evaluate', '--run-dir', run_copy, '--phases', 'nominal,noise', '--episodes', 1,
                                  '--backends', 'native', '--deadline-us', 1e6)
    assert rc == 0
    said = [l for _, l in progress(lines)]
    for phase in ('nominal', 'noise'):
        for policy in ('PID', 'torch', 'native'):
            assert any(phase in l and policy in l for l in said), (phase, policy, said)
    assert progress(lines)[0][0] < wall - 0.5

def test_enjoy_says_what_it_does_before_the_slow_part(run_dir):
    lines, wall, rc = timed_lines('enjoy', '--run-dir', run_dir, '--mode', 'benchmark', '--backend', 'native',
                                  '--iters', 100, '--warmup', 10)
    assert rc == 0 and len(lines) == 2, lines
    assert 'closed loop' in lines[0][1] and 'native' in lines[0][1] and 'Hz' in lines[1][1]
    assert lines[0][0] < lines[1][0]

def test_fast_train_progress_keeps_its_prefix(tmp_path):
    "Lines printed through rich (fast PPO's evaluations) keep their `[ppo-trt]`, which rich took for markup."
    code = ('from ppo_trt.train.fast_ppo import fast_train; '
            f'fast_train({str(tmp_path/"ft")!r}, env_id="CartPole-v1", timesteps=4096, eval_every=1, eval_episodes=2, '
            'final_eval_episodes=2, progress=True)')
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=tmp_path)
    said = [l for l in r.stdout.splitlines() if 'steps: evaluated return' in l]
    assert r.returncode == 0 and said and all(l.startswith('[ppo-trt] ') for l in said), r.stdout + r.stderr[-1000:]

def test_fast_train_piped_prints_progress_and_its_rounding(tmp_path):
    "Piped into a log (no terminal), `train --fast` still says each evaluation, its progress and the budget's rounding."
    r = ppo_trt('train', '--fast', '--env-id', 'CartPole-v1', '--timesteps', 10_000, '--run-dir', tmp_path/'cp')
    lines = r.stdout.splitlines()
    assert r.returncode == 0, r.stderr[-2000:]
    assert any('8,192 steps to train (10,000 asked, rounded down to whole updates of 64 envs × 32 steps)' in l
               for l in lines), r.stdout
    evaluations = [l for l in lines if 'steps: evaluated return' in l]
    heartbeats = [l for l in lines if ' of 8,192 steps (' in l]
    assert len(evaluations) >= 1 and len(heartbeats) >= 1 and '\x1b' not in r.stdout, r.stdout

# words, not Python values -------------------------------------------------------------------------------------------

@pytest.mark.slow  # over 7 s: with the long checks (pytest -m slow tests)
def test_evaluate_says_sla_in_words(run_copy):
    (run_copy/'bench.json').unlink()
    r = ppo_trt('evaluate', '--run-dir', run_copy, '--phases', 'nominal', '--episodes', 1, '--backends', 'native',
                '--deadline-us', 1e6)
    assert r.returncode == 0, r.stderr[-2000:]
    gates = [l for l in r.stdout.splitlines() if l.startswith('gate ')]
    assert gates and all('SLA not measured: bench.json has no latency record' in l for l in gates), gates
    assert not any(w in r.stdout for w in ('SLA None', 'SLA True', 'SLA False'))

def test_help_shows_a_list_default_as_typed():
    r = ppo_trt('env-bench', '--help')
    text = ' '.join(r.stdout.split())
    assert '(default: 32,1024,65536)' in text and '(32, 1024, 65536)' not in text, text

# one clear line -----------------------------------------------------------------------------------------------------

def test_doctor_names_a_fix_once(tmp_path):
    ref = reference_copy(tmp_path)
    (ref/'evaluate.json').write_text('{"env_id": 3}')
    r = ppo_trt('doctor', '--run-dir', ref)
    line = next(l for l in r.stdout.splitlines() if l.startswith('run folder evaluate.json'))
    assert line.count(f'ppo-trt evaluate --run-dir {ref}') == 1, line

def test_advise_names_the_machine_the_records_come_from(tmp_path):
    ref = reference_copy(tmp_path)
    rec = json.loads((ref/'bench.json').read_text())
    for s in rec['sessions'].values(): s.update(machine='Imaginary CPU (64 logical CPUs), no GPU', machine_id='0' * 12)
    (ref/'bench.json').write_text(json.dumps(rec))
    r = ppo_trt('advise', '--run-dir', ref)
    out = ' '.join(r.stdout.split())
    assert r.returncode == 0 and 'Imaginary CPU (64 logical CPUs)' in out and "this machine's measurements" not in out

def test_train_refuses_an_unknown_env_before_saying_anything(tmp_path):
    r = ppo_trt('train', '--env-id', 'Hoper-v4', '--run-dir', tmp_path/'t')
    assert r.returncode == 2 and r.stdout == '' and 'did you mean Hopper-v4' in r.stderr
    assert not (tmp_path/'t').exists()

def test_docs_finds_the_clone_from_outside(tmp_path):
    "`ppo-trt docs` run outside the clone builds from the clone the package is imported from."
    code = 'from ppo_trt.results.site import _project; print(_project().config_path)'
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, 'PYTHONPATH': str(Path(pkg.__file__).parents[1])})
    assert r.returncode == 0, r.stderr[-1500:]
    assert Path(r.stdout.strip()) == Path(pkg.__file__).parents[1]
