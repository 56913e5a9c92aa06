"""`ppo-trt evaluate`: per-phase returns, gates, evaluate.json round trip, report section, bad input."""
import pytest
from conftest import ppo_trt
from ppo_trt.core.records import load_artifact

@pytest.mark.slow  # over 7 s: with the long checks (pytest -m slow tests)
def test_evaluate_cli(run_copy):
    r = ppo_trt('evaluate', '--run-dir', run_copy, '--phases', 'nominal,delay,trip', '--episodes', 2,
                '--backends', 'ort,native', '--deadline-us', 1e6)  # parity, not timing: a loaded CI box can miss 1 ms
    assert r.returncode == 0, r.stderr[-2000:]
    rep = load_artifact(run_copy, 'evaluate_record')
    assert [p.phase for p in rep.phases] == ['nominal', 'delay', 'trip'] and rep.backends == ['torch', 'ort', 'native']
    for p in rep.phases:
        assert (set(p.returns) == {'pid', 'ppo:torch', 'ppo:ort', 'ppo:native'}
                and all(len(v) == 2 for v in p.returns.values()))
    for b in ('ort', 'native'):  # FP32 backends reproduce the reference's returns on the same seeds
        assert rep.gates[b].worst_return_gap <= 0.01 and rep.gates[b].sla_pass is True
    assert ppo_trt('report', '--run-dir', run_copy).returncode == 0
    html = (run_copy/'report.html').read_text()
    assert 'Control quality per scenario phase' in html and 'PPO beats the PID baseline' in html

def test_evaluate_bad_input(run_copy):
    r = ppo_trt('evaluate', '--run-dir', run_copy, '--phases', 'nominal,blizzard')
    assert r.returncode == 2 and 'unknown phase' in r.stderr and 'nominal, noise' in r.stderr
    r = ppo_trt('evaluate', '--run-dir', run_copy, '--backends', 'tensorrt-magic')
    assert r.returncode == 2 and 'unknown backend' in r.stderr
    assert not (run_copy/'evaluate.json').exists()
