"""A third-party backend family, a package of its own installed with pip, is found through the `ppo_trt.backends`
entry-point group only, and the CLI lists, benches and evaluates it like a built-in backend; a plugin entry point that
fails to import is listed by `ppo-trt doctor` as skipped with its error line, never a traceback."""
import os, shutil, subprocess, sys, textwrap
from pathlib import Path
import pytest
from conftest import QUICK_BENCH
from ppo_trt.core.files import load_json
from ppo_trt.core.records import load_artifact

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = {
    'pyproject.toml': '''
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "ppo-trt-toy-plugin"
        version = "0.1.0"
        requires-python = ">=3.10"

        [project.entry-points."ppo_trt.backends"]
        toy = "ppo_trt_toy_plugin:FAMILY"
        broken = "ppo_trt_toy_plugin.missing:FAMILY"

        [tool.setuptools]
        packages = ["ppo_trt_toy_plugin"]
        ''',
    'ppo_trt_toy_plugin/__init__.py': '''
        "A third-party backend: policy.onnx through a plain ONNX Runtime session."
        from ppo_trt.backends.runner import Runner, Backend, Family, module_available

        class ToyOrtRunner(Runner):
            "policy.onnx in an ONNX Runtime CPU session of its own."
            name, concurrent_run = 'toy-ort', True
            def __init__(self, src, threads=1):
                import onnxruntime as ort
                so = ort.SessionOptions()
                so.intra_op_num_threads = threads
                self.sess = ort.InferenceSession(str(src.onnx()), so, providers=['CPUExecutionProvider'])
                meta = src.meta
                super().__init__(meta['obs_dim'], meta['act_dim'], provider='toy plugin: onnxruntime session',
                                 env_id=meta['env_id'])
            def run(self, obs): return self.sess.run(['action'], {'obs': obs})[0]

        HINT = 'pip install onnxruntime'
        FAMILY = Family('toy', (Backend(ToyOrtRunner, lambda: module_available('onnxruntime', HINT), HINT),),
                        packages=('ppo-trt-toy-plugin',))
        ''',
}


def _write_plugin(folder):
    "The plugin's source tree in `folder`."
    for rel, text in PLUGIN.items():
        (folder/rel).parent.mkdir(parents=True, exist_ok=True)
        (folder/rel).write_text(textwrap.dedent(text).lstrip())
    return folder


@pytest.fixture(scope='module')
def plugin_site(tmp_path_factory):
    "A folder holding the toy plugin as pip installs it (offline, with its entry points); not the shared venv."
    tmp = tmp_path_factory.mktemp('plugin')
    src = _write_plugin(tmp/'ppo-trt-toy-plugin')
    r = subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-deps', '--no-build-isolation', '--no-index',
                        '--disable-pip-version-check', '--quiet', '--target', str(tmp/'site'), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return tmp/'site'


def cli(*args, path=()):
    "The real console script with `path` (and this worktree) on PYTHONPATH."
    exe = shutil.which('ppo-trt') or str(Path(sys.executable).with_name('ppo-trt'))
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(map(str, [*path, ROOT])), 'PYTHONWARNINGS': 'ignore'}
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, env=env)


def test_doctor_lists_the_plugin_and_the_one_that_failed(plugin_site):
    r = cli('doctor', path=[plugin_site])
    assert r.returncode == 0 and 'Traceback' not in r.stdout + r.stderr, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    toy = [l for l in lines if l.startswith('backend toy-ort ')]
    assert len(toy) == 1 and 'toy (ppo-trt-toy-plugin 0.1.0)' in toy[0] and toy[0].endswith('available'), toy
    assert any(l.startswith('backend native-c ') for l in lines)  # the built-in ones are all still there
    broken = [l for l in lines if l.startswith('plugin  broken = ppo_trt_toy_plugin.missing:FAMILY skipped: ')]
    assert len(broken) == 1 and "ModuleNotFoundError: No module named 'ppo_trt_toy_plugin.missing'" in broken[0]


@pytest.mark.slow  # over 7 s: with the long checks (pytest -m slow tests)
def test_bench_and_evaluate_the_plugin(plugin_site, run_copy):
    r = cli('bench', '--run-dir', run_copy, '--backends', 'toy-ort', *QUICK_BENCH, path=[plugin_site])
    assert r.returncode == 0, r.stderr[-2000:]
    mine = [x for x in load_json(run_copy/'bench.json')['records'] if x['backend'] == 'toy-ort']
    assert {x['mode'] for x in mine} == {'latency', 'sweep', 'closed-loop'} and all(x['ran'] for x in mine)
    lat = next(x for x in mine if x['mode'] == 'latency')
    assert lat['info']['provider'] == 'toy plugin: onnxruntime session'
    assert lat['parity_vs_ort_fp32']['max_abs_err'] < 1e-5 and lat['stats']['n'] == 300
    assert load_json(run_copy/'bench.json')['machine']['packages']['ppo-trt-toy-plugin'] == '0.1.0'

    r = cli('evaluate', '--run-dir', run_copy, '--backends', 'toy-ort', '--phases', 'nominal', '--episodes', 2,
            '--deadline-us', 1e6, path=[plugin_site])
    assert r.returncode == 0, r.stderr[-2000:]
    rep = load_artifact(run_copy, 'evaluate_record')
    assert rep.backends == ['torch', 'toy-ort'] and len(rep.phases[0].returns['ppo:toy-ort']) == 2
    assert rep.gates['toy-ort'].worst_return_gap <= 0.01  # an FP32 backend: the reference's returns


def test_a_plugin_is_found_only_through_the_entry_point_group(tmp_path, run_copy):
    "Its package importable but not installed (no entry point): the backend is unknown, in one line."
    src = _write_plugin(tmp_path/'src')
    r = cli('bench', '--run-dir', run_copy, '--backends', 'toy-ort', '--iters', 10, path=[src])
    assert r.returncode == 2 and 'Traceback' not in r.stderr
    assert r.stderr.strip().count('\n') == 0 and "unknown backend 'toy-ort'" in r.stderr, r.stderr
