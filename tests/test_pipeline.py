"""End-to-end: `ppo-trt run` leaves a complete, consistent run folder."""
import numpy as np, pytest
from conftest import ppo_trt
from ppo_trt.backends import registry as B
from ppo_trt.core.files import load_json
from ppo_trt.core.records import LOCK_NAME

ARTIFACTS = ['config.json', 'policy.zip', 'obs_norm.json', 'train_log.csv', 'train.json', 'policy.onnx',
             'export_obs.npy', 'export.json', 'bench.json', 'report.ipynb', 'report.html']

def test_every_artifact(run_dir):
    missing = [a for a in ARTIFACTS if not (run_dir/a).is_file()]
    assert not missing
    # no partial files, no holder
    assert not [p for p in run_dir.iterdir() if p.name.startswith('.') and p.name != LOCK_NAME]

def test_train_record(run_dir):
    t = load_json(run_dir/'train.json')
    assert t['timesteps'] == 4096 and t['env_id'] == 'Hopper-v4' and t['obs_dim'] == 11 and t['act_dim'] == 3
    assert t['steps_per_s'] > 0 and np.isfinite(t['final_eval_mean'])
    log = (run_dir/'train_log.csv').read_text().splitlines()
    assert log[0].startswith('timesteps,mean_return') and [l.split(',')[0] for l in log[1:]] == ['2048', '4096']
    norm = load_json(run_dir/'obs_norm.json')
    assert len(norm['mean']) == 11 and min(norm['var']) > 0 and norm['clip_obs'] == 10.0

def test_export_parity(run_dir):
    e = load_json(run_dir/'export.json')
    assert e['opset'] == 17 and e['input']['name'] == 'obs' and e['output']['name'] == 'action'
    assert e['parity_ort_cpu']['n'] >= 1000 and e['parity_ort_cpu']['max_abs_err'] < 1e-5
    assert np.load(run_dir/'export_obs.npy').shape == (e['parity_ort_cpu']['n'], 11)

def test_bench_records(run_dir):
    b = load_json(run_dir/'bench.json')
    lat = {r['backend']: r for r in b['records'] if r['mode'] == 'latency'}
    can_run = {n for n, (ok, _) in B.available().items() if ok}
    assert set(lat) == can_run and {r['backend'] for r in b['records'] if not r['ran']} == set(B.names()) - can_run
    for r in lat.values():
        s = r['stats']
        assert s['n'] == 300 and s['p50_us'] <= s['p99_us'] <= s['max_us'] and r['sla_pass'] == (s['p99_us'] < 1000)
        assert r['device'] in ('cpu', 'cuda') and r['provider'] and r['parity_vs_ort_fp32']['max_abs_err'] < 1e-5
    sweep = [r for r in b['records'] if r['mode'] == 'sweep']
    assert sorted({r['batch'] for r in sweep}) == [1, 64, 1024] and all(r['throughput_per_s'] > 0 for r in sweep)
    loops = [r for r in b['records'] if r['mode'] == 'closed-loop']
    assert len(loops) == len(lat) and all(r['loop']['mean_us'] >= r['inference']['mean_us'] for r in loops)
    assert b['machine']['cpu'] and b['timer_overhead']['p50_ns'] > 0

def test_report_html(run_dir):
    html = (run_dir/'report.html').read_text()
    assert 'What the numbers say' in html and 'is the fastest backend' in html
    assert html.count('data:image/png;base64') >= 3  # CDF, sweep, learning curve
    assert 'max abs err' in html and 'Hopper-v4' in html
    for name in B.names(): assert f'<code>{name}</code>' in html

@pytest.mark.slow  # over 4 s: the quick suite keeps the README test command under 10 minutes
def test_runner_matches_sb3(run_dir):
    obs = np.load(run_dir/'export_obs.npy')
    ref = B.load('sb3', run_dir)(obs)
    others = [n for n, (ok, _) in B.available().items() if ok and n != 'sb3' and not B.backends()[n].gpu]
    assert len(others) >= 6
    for name in others: assert np.abs(B.load(name, run_dir)(obs) - ref).max() < 1e-5, name

def test_gpu_backends_skipped_with_reason(run_dir):
    """Without a GPU, every GPU backend is in bench.json as not run, with the missing piece named; none is replaced by
    another."""
    import torch
    if torch.cuda.is_available(): pytest.skip('a GPU is present: the GPU backends run (see the gpu-flagged tests)')
    recs = {r['backend']: r for r in load_json(run_dir/'bench.json')['records']
            if r['mode'] == 'latency' or not r['ran']}
    gpu = [n for n, b in B.backends().items() if b.gpu]
    assert len(gpu) >= 8
    for name in gpu:
        assert not recs[name]['ran'], name
        assert any(k in recs[name]['reason']
                   for k in ('CUDA', 'cuda', 'tensorrt', 'ExecutionProvider')), recs[name]['reason']
        with pytest.raises(B.BackendUnavailable): B.load(name, run_dir)
    assert recs['torch-compile']['ran'] and recs['torch-compile']['info']['provider'].startswith('torch.compile')

@pytest.mark.slow  # over 7 s: with the long checks (pytest -m slow tests)
def test_each_stage_reruns_alone(run_copy):
    before = load_json(run_copy/'export.json')['onnx_sha256']
    assert ppo_trt('export', '--run-dir', run_copy).returncode == 0
    assert load_json(run_copy/'export.json')['onnx_sha256'] == before  # deterministic export
    r = ppo_trt('bench', '--run-dir', run_copy, '--backends', 'ort', '--iters', 50, '--warmup', 5, '--batches', '1',
                '--closed-loop-steps', 0, '--replace')
    assert r.returncode == 0, r.stderr
    assert [x['backend'] for x in load_json(run_copy/'bench.json')['records']] == ['ort', 'ort']
    assert ppo_trt('report', '--run-dir', run_copy).returncode == 0

@pytest.mark.slow  # over 4.5 s: with the long checks (pytest -m slow tests)
def test_resume_continues(run_copy):
    r = ppo_trt('train', '--run-dir', run_copy, '--timesteps', 6144, '--resume', '--eval-freq', 2048,
                '--eval-episodes', 1)
    assert r.returncode == 0, r.stderr[-2000:]
    t = load_json(run_copy/'train.json')
    assert t['timesteps'] == 6144 and t['resumed_from'] == 4096 and t['trained_this_call'] == 2048

def test_enjoy(run_dir, tmp_path):
    out = tmp_path/'ep.gif'
    r = ppo_trt('enjoy', '--run-dir', run_dir, '--mode', 'visual', '--out', out, '--max-steps', 40)
    assert r.returncode == 0, r.stderr[-2000:]
    assert out.stat().st_size > 1000 and 'frames' in r.stdout
    r = ppo_trt('enjoy', '--run-dir', run_dir, '--mode', 'benchmark', '--iters', 200, '--warmup', 10,
                '--backend', 'ort-iobind')
    assert r.returncode == 0 and 'loop' in r.stdout and 'Hz' in r.stdout

def test_doctor():
    r = ppo_trt('doctor')
    assert r.returncode == 0 and 'onnxruntime (CPU EP)' in r.stdout and 'TensorRT' in r.stdout
    lines = [l for l in r.stdout.splitlines() if l.startswith('backend ')]
    assert [l.split()[1] for l in lines] == B.names()  # every registered backend, with its family and state
    for l, (name, b) in zip(lines, B.backends().items()):
        assert l.split()[2] == b.family and (' available' in l or ' missing: ' in l), l
