"""The committed reference run (policy.onnx and records, no policy.zip, no export_obs.npy) re-measured anywhere:
bench and evaluate run on a copy, a bare policy.onnx is benched in a folder of its own, `compare` sets this
machine's figures beside the reference machine's without touching it, and doctor never advises retraining it."""
import shutil
from pathlib import Path
import pytest
from conftest import ppo_trt, QUICK_BENCH
from ppo_trt.core.files import sha256_file
from ppo_trt.core.records import read_record

REFERENCE = Path(__file__).resolve().parents[1]/'nbs'/'_reference'/'hopper'

def _hashes(folder):
    "{relative path: sha256} of every file under `folder`."
    return {str(p.relative_to(folder)): sha256_file(p) for p in sorted(Path(folder).rglob('*')) if p.is_file()}

def _ok(r):
    assert r.returncode == 0 and 'Traceback' not in r.stderr, (r.stdout[-2000:], r.stderr[-2000:])
    return r

@pytest.fixture
def ref_copy(tmp_path):
    "A copy of the committed reference run: policy.onnx and records, no policy.zip, no export_obs.npy."
    d = tmp_path/'hopper'
    shutil.copytree(REFERENCE, d)
    assert not (d/'policy.zip').exists() and not (d/'export_obs.npy').exists()
    return d

def test_bench_on_a_policy_only_folder(ref_copy):
    _ok(ppo_trt('bench', '--run-dir', ref_copy, '--backends', 'ort,native-c,torch', *QUICK_BENCH))
    rec = read_record(ref_copy/'bench.json')
    assert rec.obs_source == 'env rollout (seed 0, 1000 obs)'
    now = {r.backend: r for r in rec.records if r.session == rec.session and r.mode in ('latency', 'all')}
    for b in ('ort', 'native-c'):  # measured against ORT FP32 on the env rollout's observations
        assert now[b].ran and now[b].parity_vs_ort_fp32.n == 1000 and now[b].parity_vs_ort_fp32.max_abs_err < 1e-5
    assert not now['torch'].ran and not now['torch'].failed and 'policy.zip' in now['torch'].reason
    assert any(r.session != rec.session for r in rec.records)  # the reference machine's records are kept

def test_evaluate_on_a_policy_only_folder(ref_copy):
    r = _ok(ppo_trt('evaluate', '--run-dir', ref_copy, '--phases', 'nominal', '--episodes', 1,
                    '--backends', 'ort,native-c,torch', '--deadline-us', 1e6, '--replace'))
    rep = read_record(ref_copy/'evaluate.json')
    assert rep.reference == 'ort' and rep.backends == ['ort', 'native-c']  # torch is not silently replaced
    assert 'policy.zip' in rep.skipped['torch'] and 'skipped torch' in r.stdout
    nominal = rep.phases[0].returns
    assert [p.phase for p in rep.phases] == ['nominal'] and len(nominal['ppo:ort']) == 1
    assert abs(nominal['ppo:native-c'][0] - nominal['ppo:ort'][0]) <= 0.01 * abs(nominal['ppo:ort'][0])
    assert rep.gates['native-c'].worst_return_gap <= 0.01

@pytest.mark.slow  # over 4.5 s: with the long checks (pytest -m slow tests)
def test_bench_a_bare_onnx_file(ref_copy, tmp_path):
    before = _hashes(ref_copy)
    r = _ok(ppo_trt('bench', ref_copy/'policy.onnx', '--backends', 'ort', *QUICK_BENCH, cwd=tmp_path))
    made = tmp_path/'runs'/'bench-policy'
    assert str(made) in r.stdout  # it says where it wrote
    assert _hashes(ref_copy) == before  # the file's own folder: only read
    rec = read_record(made/'bench.json')
    lat = next(x for x in rec.records if x.backend == 'ort' and x.mode == 'latency')
    assert lat.parity_vs_ort_fp32.max_abs_err == 0.0 and rec.obs_source.startswith('env rollout')
    assert sha256_file(made/'policy.onnx') == before['policy.onnx']
    _ok(ppo_trt('bench', ref_copy/'policy.onnx', '--backends', 'ort', *QUICK_BENCH, cwd=tmp_path))  # its folder: again
    refused = ppo_trt('bench', ref_copy/'policy.onnx', '--run-dir', ref_copy, '--backends', 'ort', *QUICK_BENCH)
    assert refused.returncode == 2 and 'was not made by `ppo-trt bench`' in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and _hashes(ref_copy) == before

@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_compare_leaves_the_reference_untouched(tmp_path):
    from ppo_trt.measure.compare import read_compare
    before = _hashes(REFERENCE)
    out = tmp_path/'cmp'
    r = _ok(ppo_trt('compare', '--reference', REFERENCE, '--run-dir', out, '--backends', 'ort,torch,trt',
                    '--warmup', 20, '--iters', 300, '--batches', '1,64', '--sweep-seconds', 0.05,
                    '--closed-loop-steps', 300, '--evaluate', '--episodes', 1))
    assert _hashes(REFERENCE) == before
    rec = read_compare(out/'compare.json')
    rows = {x.backend: x for x in rec.rows}
    assert rows['ort'].here.ran and rows['ort'].reference.ran and all(v > 0 for v in rows['ort'].ratios.values())
    assert not rows['torch'].here.ran and rows['torch'].reference.ran and 'policy.zip' in rows['torch'].here.reason
    assert rec.reference_machine.cpu == 'AMD EPYC' and rec.reference_machine.cores == 2
    assert {x.policy for x in rec.returns} >= {'pid', 'ppo:ort', 'ppo:torch'}
    assert 'reference → here' in r.stdout and 'skipped torch here' in r.stdout and 'here/ref' in r.stdout
    refused = ppo_trt('compare', '--reference', REFERENCE, '--run-dir', REFERENCE)
    assert refused.returncode == 2 and 'compare never writes there' in refused.stderr, refused.stderr
    assert _hashes(REFERENCE) == before

@pytest.mark.slow  # over 4 s: the quick suite keeps the README test command under 10 minutes
def test_doctor_does_not_advise_retraining_a_policy_only_folder(ref_copy):
    r = _ok(ppo_trt('doctor', '--run-dir', ref_copy))
    said = r.stdout[r.stdout.index('run folder'):]
    assert 'ppo-trt train' not in said and 'ppo-trt export' not in said, said
    assert f'ppo-trt compare --reference {ref_copy}' in said and f'ppo-trt bench --run-dir {ref_copy}' in said
    (ref_copy/'train.json').write_text('{"env_id": ')  # damaged: the fix is not to train again
    said = ppo_trt('doctor', '--run-dir', ref_copy).stdout
    assert 'train.json' in said and 'ppo-trt train' not in said and f'ppo-trt bench {ref_copy}/policy.onnx' in said
