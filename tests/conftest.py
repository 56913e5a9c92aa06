"""Shared fixtures: one real end-to-end `ppo-trt run` per test session."""
import os, shutil, subprocess, sys, tempfile
from pathlib import Path
import pytest

# generated code (the C extension) is cached per test session, never in the user's cache
os.environ.setdefault('PPO_TRT_CACHE', tempfile.mkdtemp(prefix='ppo_trt_cache_'))
# a stage re-renders the report.html a run folder holds (half a minute each): tests of other things leave it;
# tests/test_newcomer.py checks the re-render itself with PPO_TRT_REPORT_REFRESH=1
os.environ.setdefault('PPO_TRT_REPORT_REFRESH', '0')

QUICK_BENCH = ['--warmup', '20', '--iters', '300', '--batches', '1,64,1024', '--sweep-seconds', '0.05',
               '--closed-loop-steps', '300']

def ppo_trt(*args, cwd=None, env=None):
    "Run the real console script (`env`: variables to set for it); return the CompletedProcess."
    exe = shutil.which('ppo-trt') or str(Path(sys.executable).with_name('ppo-trt'))
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, 'PYTHONWARNINGS': 'ignore', **(env or {})})

def one_line(r, status=2, *says):
    "`r` failed with exit `status` and one line on stderr holding each of `says` (no traceback)."
    err = r.stderr.strip()
    assert r.returncode == status, (r.returncode, r.stdout[-1500:], err[-3000:])
    assert 'Traceback' not in r.stderr and len(err.splitlines()) == 1, err[-3000:]
    for s in says: assert s in err, (s, err)
    return err

@pytest.fixture(scope='session')
def run_dir(tmp_path_factory):
    "A run folder made by `ppo-trt run` with a few thousand timesteps of the default preset, once per pytest run."
    from filelock import FileLock
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get('PYTEST_XDIST_WORKER'): shared = shared.parent  # the workers' common folder, this run's
    d, done = shared/'e2e'/'hopper', shared/'e2e'/'made'
    with FileLock(str(shared/'e2e.lock')):  # the first worker makes it; the others wait and use it read-only
        if not done.exists():
            d.parent.mkdir(exist_ok=True)
            r = ppo_trt('run', '--run-dir', d, '--timesteps', 4096, '--eval-freq', 2048, '--eval-episodes', 2,
                        *QUICK_BENCH)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            done.touch()
    return d

@pytest.fixture
def run_copy(run_dir, tmp_path):
    "A throwaway copy of the end-to-end run folder, for tests that damage it."
    dst = tmp_path/'copy'
    shutil.copytree(run_dir, dst)
    return dst


CHROMIUM = os.environ.get('CHROMIUM') or shutil.which('chromium') or shutil.which('chromium-browser')

@pytest.fixture(scope='session')
def browser():
    "One headless Chromium per pytest process (Playwright's sync API allows one at a time in a thread)."
    if not CHROMIUM: pytest.skip('no Chromium on this machine: apt-get install -y chromium (CI installs it)')
    sync_playwright = pytest.importorskip('playwright.sync_api', reason='pip install playwright').sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=['--no-sandbox', '--disable-gpu'])
        yield b
        b.close()
