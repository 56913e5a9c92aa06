"""`ppo-trt sweep` on a local Ray: a tiny real sweep, resumed after a kill without redoing finished runs, refusals."""
import json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest
from conftest import ppo_trt
from ppo_trt.envs.gym import parse_randomize
from ppo_trt.envs.specs import env_spec
from ppo_trt.studies.sweep import load_sweep, run_name, sweep_settings

TINY = ['--env-id', 'Hopper-v4', '--seeds', 2, '--variants', 'nominal,randomized', '--preset', 'smoke',
        '--timesteps', 1024, '--phases', 'nominal,delay', '--episodes', 2, '--num-cpus', 2]


@pytest.fixture(scope='module')
def tiny_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp('sweep')/'hopper'
    t0 = time.perf_counter()
    r = ppo_trt('sweep', *TINY, '--out', out)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out, r, time.perf_counter() - t0


@pytest.mark.slow
def test_tiny_sweep_records(tiny_sweep):
    out, r, took = tiny_sweep
    rec = load_sweep(out)
    assert rec['status'] == 'complete' and rec['failed'] == {}
    assert sorted(rec['runs']) == sorted(run_name(v, s) for v in ('nominal', 'randomized') for s in (0, 1))
    assert rec['ray']['version'] and rec['ray']['nodes'] == 1 and rec['ray']['cpus'] == 2
    agg = rec['aggregates']
    for v in ('nominal', 'randomized'):
        for phase in ('nominal', 'delay', 'all'):
            est = agg['iqm'][v][phase]
            assert est['ci'][0] <= est['iqm'] <= est['ci'][1]
        assert list(agg['delay_iqm'][v]) == [str(k) for k in rec['settings']['delay_steps']]
    assert 0 <= agg['p_randomized_beats_nominal']['delay']['p'] <= 1
    for name, run in rec['runs'].items():
        ev = json.loads((out/run['dir']/'evaluate.json').read_text())
        assert ev['seed'] == rec['settings']['eval_seed'] == 1_000_000  # the same held-out episodes for every run
        train = json.loads((out/run['dir']/'train.json').read_text())
        assert (train['randomize'] is not None) == name.startswith('randomized')
        assert train['selection_eval_seed'] < 1_000_000
    assert not [p for p in (out/'runs').iterdir() if p.name.startswith('.')]
    assert 'IQM' in r.stdout and 'P(randomized > nominal)' in r.stdout


@pytest.mark.slow
def test_rerun_redoes_nothing(tiny_sweep):
    out, _, took = tiny_sweep
    before = {p: p.stat().st_mtime_ns for p in (out/'runs').rglob('*.json')}
    t0 = time.perf_counter()
    r = ppo_trt('sweep', *TINY, '--out', out)
    assert r.returncode == 0, r.stderr[-2000:]
    assert {p: p.stat().st_mtime_ns for p in (out/'runs').rglob('*.json')} == before
    assert time.perf_counter() - t0 < took


@pytest.mark.slow
def test_killed_sweep_resumes(tiny_sweep, tmp_path):
    "SIGKILL mid-sweep: no half-made run folder is visible; the rerun keeps finished runs and completes the rest."
    out = tmp_path/'killed'
    exe = Path(sys.executable).with_name('ppo-trt')
    args = [str(exe), 'sweep', *map(str, TINY), '--seeds', '3', '--num-cpus', '1', '--out', str(out)]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline and not any((out/'runs').glob('nominal-s*')): time.sleep(0.5)
    os.killpg(p.pid, signal.SIGKILL); p.wait()
    subprocess.run(['pkill', '-9', '-f', f'ray.*{out}'], check=False)
    visible = [d for d in (out/'runs').iterdir() if not d.name.startswith('.')]
    assert visible, 'no run finished before the kill'
    for d in visible: assert (d/'evaluate.json').exists() and (d/'policy.onnx').exists()  # complete, or not there
    kept = {d.name: (d/'train.json').stat().st_mtime_ns for d in visible}
    r = ppo_trt('sweep', *TINY, '--seeds', 3, '--out', out)
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'finished already' in r.stdout
    assert {n: (out/'runs'/n/'train.json').stat().st_mtime_ns for n in kept} == kept
    assert len(load_sweep(out)['runs']) == 6 and not [d for d in (out/'runs').iterdir() if d.name.startswith('.')]


@pytest.mark.parametrize('args, needle', [
    (['--seeds', 0], 'must be >= 1'),
    (['--randomize', 'weather'], "cannot randomize 'weather'"),
    (['--randomize', 'mass=1.4:0.7'], 'empty range'),
    (['--variants', 'nominal,robust'], "unknown variant 'robust'"),
    (['--address', '127.0.0.1:1'], 'cannot reach the Ray cluster at 127.0.0.1:1'),
    (['--env-id', 'Walker2d-v5'], 'PID fallback, which exists for Hopper-v4, Hopper-v5, InvertedPendulum-v4 only'),
    (['--env-id', 'InvertedPendulum-v4', '--randomize', 'push'], 'not push (no body to push)'),
    (['--env-id', 'InvertedPendulum-v4', '--phases', 'nominal,push'], 'cannot take phase push'),
    (['--env-id', 'Hopper-v7'], "unknown environment id 'Hopper-v7' (did you mean Hopper-v")])
def test_sweep_bad_input(tmp_path, args, needle):
    t0 = time.perf_counter()
    r = ppo_trt('sweep', '--out', tmp_path/'s', *args)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and needle in err[0], r.stderr[-2000:]
    assert time.perf_counter() - t0 < 30 and not (tmp_path/'s'/'sweep.json').exists()


def test_busy_sweep_folder_names_no_flag_it_lacks(tmp_path):
    "A sweep folder in use by another writer: one line, and no advice to drop a --no-wait that sweep does not take."
    from ppo_trt.core.records import run_lock
    out = tmp_path/'s'
    with run_lock(out, 'ppo-trt sweep'):
        r = ppo_trt('sweep', '--out', out, '--seeds', 1, '--variants', 'nominal')
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and 'is in use by `ppo-trt sweep`' in err, err
    assert '--no-wait' not in err and 'run again' in err


@pytest.mark.parametrize('env_id, push', [('InvertedPendulum-v4', False), ('Hopper-v4', True), ('Hopper-v5', True)])
def test_default_variants_fit_the_env(env_id, push):
    "The defaults (both variants, randomize all, the default phases) resolve to what the env's spec can take."
    s = sweep_settings(env_id, preset_name='smoke')
    assert s['variants'] == ['nominal', 'randomized']
    ranges = parse_randomize(s['randomize'])
    assert ranges == env_spec(env_id).default_ranges and ('push' in ranges) == push, ranges
    assert list(ranges) == ['noise', 'delay', 'mass', 'friction', *(['push'] if push else [])]
    assert s['phases'] == ['nominal', 'noise', 'delay', *(['push'] if push else []), 'mass', 'friction']


@pytest.mark.slow
def test_tiny_inverted_pendulum_sweep_with_defaults(tmp_path):
    "A real sweep on InvertedPendulum (no body to push) with the default variants, randomization and phases."
    out = tmp_path/'ip'
    r = ppo_trt('sweep', '--env-id', 'InvertedPendulum-v4', '--seeds', 1, '--preset', 'smoke', '--timesteps', 256,
                '--episodes', 1, '--num-cpus', 2, '--out', out)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rec = load_sweep(out)
    assert rec['status'] == 'complete' and sorted(rec['runs']) == ['nominal-s0', 'randomized-s0']
    assert rec['settings']['phases'] == ['nominal', 'noise', 'delay', 'mass', 'friction']
    train = json.loads((out/'runs'/'randomized-s0'/'train.json').read_text())
    assert train['randomize'] == env_spec('InvertedPendulum-v4').default_ranges


def _ray_version():
    from importlib.metadata import version
    return tuple(int(x) for x in version('ray').split('.')[:2])

@pytest.fixture
def token_cluster():
    "A real Ray head started as a user starts one, `ray start --head`, which a token in ~/.ray makes ask for it."
    import shutil, socket, tempfile
    home = Path(tempfile.mkdtemp(prefix='ray', dir='/tmp'))  # short: Ray's socket paths live under --temp-dir
    env = {k: v for k, v in os.environ.items() if not k.startswith('RAY_AUTH')} | {'HOME': str(home)}
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]
    ray_cli = shutil.which('ray') or str(Path(sys.executable).with_name('ray'))
    # a token in ~/.ray (a local ray.init() since Ray 2.60 leaves one) turns authentication on for `ray start --head`
    subprocess.run([ray_cli, 'get-auth-token', '--generate'], env=env, capture_output=True, check=True)
    head = subprocess.Popen([ray_cli, 'start', '--head', f'--port={port}', '--num-cpus=1', '--include-dashboard=false',
                             f'--temp-dir={home/"r"}', '--disable-usage-stats', '--block'], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for _ in range(120):
            try: socket.create_connection(('127.0.0.1', port), 1).close(); break
            except OSError: time.sleep(0.5)
        yield f'127.0.0.1:{port}', env
    finally:
        os.killpg(head.pid, signal.SIGTERM); head.wait(60)
        shutil.rmtree(home, ignore_errors=True)

@pytest.mark.slow
@pytest.mark.skipif(_ray_version() < (2, 60), reason='token authentication is on by default from Ray 2.60')
def test_token_cluster_is_one_line_and_no_sweep_json(token_cluster, tmp_path):
    "A cluster wanting a token: one line saying to export RAY_AUTH_MODE=token, none of Ray's retry warnings, no record."
    address, env = token_cluster
    args = ['sweep', '--address', address, '--seeds', '1', '--variants', 'nominal', '--out', str(tmp_path/'s')]
    r = subprocess.run([sys.executable, '-m', 'ppo_trt.cli', *args], capture_output=True, text=True,
                       env={**env, 'RAY_gcs_server_port_wait_time_s': '3'})  # Ray's client retries 3 s, not 20
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and 'export RAY_AUTH_MODE=token' in err[0], r.stderr[-3000:]
    assert 'gcs_client' not in r.stderr and 'InvalidAuthToken' not in r.stderr
    assert not (tmp_path/'s'/'sweep.json').exists()  # nothing ran: no record saying `running`
