"""`ppo-trt build`: a real TensorRT-RTX engine on a CPU-only machine, its record, and stale-engine errors."""
import pytest
from conftest import ppo_trt
from ppo_trt.core.files import load_json, sha256_file
from ppo_trt.core.records import load_artifact
from ppo_trt.export.tensorrt import check_engine, EngineError, FP16_TOL

pytest.importorskip('tensorrt_rtx', reason='TensorRT-RTX is not installed: pip install "ppo_trt[trt-rtx]"')

@pytest.mark.slow  # over 5 s: the quick suite keeps the README test command under 10 minutes
@pytest.mark.parametrize('precision', ['fp32', pytest.param('fp16', marks=pytest.mark.slow)])
def test_build_trt_rtx(run_copy, precision):
    r = ppo_trt('build', '--run-dir', run_copy, '--flavour', 'trt-rtx', '--precision', precision, '--max-batch', 1024)
    assert r.returncode == 0, r.stderr[-2000:]
    name = f'policy.trt-rtx.{precision}.engine'
    rec = load_json(run_copy/'build.json')[name]
    assert (rec['flavour'] == 'trt-rtx' and rec['precision'] == precision
            and rec['profile'] == dict(min=1, opt=1, max=1024))
    assert (rec['engine_bytes'] == (run_copy/name).stat().st_size > 10_000
            and rec['engine_sha256'] == sha256_file(run_copy/name))
    assert rec['onnx_sha256'] == load_json(run_copy/'export.json')['onnx_sha256']
    assert (run_copy/rec['log']).exists() and (run_copy/rec['timing_cache']).exists()
    if precision == 'fp16':
        assert rec['fp16_method'] == 'fp16-typed onnx' and 0 < rec['fp16_parity']['max_abs_err'] <= FP16_TOL
    assert check_engine(run_copy, name) == load_artifact(run_copy, 'build_record')[name]
    assert ppo_trt('report', '--run-dir', run_copy).returncode == 0
    assert name in (run_copy/'report.html').read_text()

@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_stale_engine_after_reexport(run_copy):
    assert ppo_trt('build', '--run-dir', run_copy, '--flavour', 'trt-rtx').returncode == 0
    check_engine(run_copy, 'policy.trt-rtx.fp32.engine')  # fresh: valid
    import onnx
    m = onnx.load(run_copy/'policy.onnx'); m.doc_string = 're-exported'; onnx.save(m, run_copy/'policy.onnx')
    with pytest.raises(EngineError, match='policy.onnx changed'): check_engine(run_copy, 'policy.trt-rtx.fp32.engine')

def test_build_bad_input(run_copy):
    r = ppo_trt('build', '--run-dir', run_copy, '--flavour', 'trt-rtx', '--min-batch', 8, '--opt-batch', 2)
    assert r.returncode == 2 and 'min <= opt <= max' in r.stderr
    r = ppo_trt('build', '--run-dir', run_copy, '--flavour', 'trt-rtx', '--compute-capability', 'SM90')
    assert r.returncode == 2 and 'unknown compute capability' in r.stderr
    (run_copy/'policy.onnx').unlink()
    r = ppo_trt('build', '--run-dir', run_copy)
    assert r.returncode == 2 and 'ppo-trt export --run-dir' in r.stderr
    assert not (run_copy/'build.json').exists()
