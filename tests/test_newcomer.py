"""The newcomer's path (issue 46): the gate says why it fails, the report follows its records, a policy brought along
the README's order keeps its bench record, and the terminal says each thing once, in words that agree."""
import io, json, shutil, subprocess, sys, warnings
from pathlib import Path
import msgspec
import pytest
from rich.console import Console
from conftest import ppo_trt, QUICK_BENCH
from ppo_trt.core.records import load_artifact, Event, lineage_problems
from ppo_trt.core.files import policy_sha256, mark_made_by

REF = Path(__file__).parents[1]/'nbs'/'_reference'/'hopper'


@pytest.fixture(scope='module')
def ref_eval():
    "The committed reference's evaluate.json and bench.json (only read)."
    return load_artifact(REF, 'evaluate_record'), load_artifact(REF, 'bench_record')


def busy(rep, ref_extra=0):
    "`rep` as a busy machine makes it: 4 deadline misses of ort in nominal and noise, the reference's own in noise."
    def one(p):
        if p.phase not in ('nominal', 'noise'): return p
        evs = {'ort': [Event(step=i, kind='deadline', latency_us=4000.0) for i in range(4)]}
        viol = {'ort': 4}
        if ref_extra and p.phase == 'noise':
            evs[rep.reference] = [Event(step=i, kind='deadline', latency_us=5000.0) for i in range(20)]
            viol[rep.reference] = ref_extra
        return msgspec.structs.replace(p, violations={**p.violations, **viol}, events={**p.events, **evs})
    return msgspec.structs.replace(rep, phases=[one(p) for p in rep.phases])


def printed(rep):
    "What `ppo-trt evaluate` prints after its run for `rep` (tables, definitions, gates), as text."
    from ppo_trt.measure.evaluate import print_evaluation
    con = Console(record=True, width=400, file=io.StringIO())
    print_evaluation(rep, con)
    return con.export_text()


def test_each_failing_gate_names_its_cause(ref_eval):
    from ppo_trt.measure.evaluate import _gates
    rep, bench = ref_eval
    rep = busy(rep, ref_extra=141)
    rep.gates = _gates(rep, bench, policy_sha256(REF/'policy.onnx'))
    text = printed(rep)
    gates = {l.split(':')[0]: l for l in text.splitlines() if l.startswith('gate ')}
    assert 'FAIL: 8 deadline misses of 1,000 µs (the latest call took 4,000 µs): the machine was busy' \
        in gates['gate ort'], gates
    assert all(': FAIL: ' not in l or l.split(': FAIL: ')[1].strip() for l in gates.values())  # never a bare FAIL
    assert 'violations: control steps where a backend' in text  # defined where it is shown
    assert 'the reference torch fell back to the PID 141 times (noise: 141' in text  # its own fallbacks shown
    assert '│ delay (2 steps, 16 ms) ' in text  # the delay phase names its step count


def test_a_backend_doing_better_than_the_reference_never_fails(ref_eval):
    from ppo_trt.measure.evaluate import _gates
    rep, bench = ref_eval
    nominal = rep.phases[0]
    better = msgspec.structs.replace(nominal, returns={**nominal.returns, 'ppo:native-c': [
        r * 1.28 for r in nominal.returns['ppo:torch']]})
    worse = msgspec.structs.replace(nominal, returns={**nominal.returns, 'ppo:native-c': [
        r * 0.72 for r in nominal.returns['ppo:torch']]})
    sha = policy_sha256(REF/'policy.onnx')
    up = _gates(msgspec.structs.replace(rep, phases=[better, *rep.phases[1:]]), bench, sha)['native-c']
    down = _gates(msgspec.structs.replace(rep, phases=[worse, *rep.phases[1:]]), bench, sha)['native-c']
    assert up.passed and up.worst_return_gap < 0.01, up  # 28 % better: passes
    assert not down.passed and down.worst_return_gap == pytest.approx(0.28), down  # 28 % worse: fails


def test_bench_says_each_skip_reason_once(ref_eval):
    from ppo_trt.measure.bench import print_bench
    _, bench = ref_eval
    gpu_why = 'the test GPU is not here (a made-up reason, the same for three backends)'
    from ppo_trt.measure.bench import skipped
    recs = [*bench.records, *(msgspec.structs.replace(skipped(n, f'backend {n} cannot run here: {gpu_why}'),
                                                      session=bench.session) for n in ('gpu-a', 'gpu-b', 'gpu-c'))]
    con = Console(record=True, width=400, file=io.StringIO())
    print_bench(msgspec.structs.replace(bench, records=recs), bench.session, con)
    text = con.export_text()
    assert text.count(gpu_why) == 1 and 'skipped gpu-a, gpu-b, gpu-c: ' + gpu_why in text, text


@pytest.mark.slow  # probes every backend: seconds
def test_doctor_says_each_fix_once():
    from ppo_trt.backends.registry import backend_lines
    for line in backend_lines():
        if ' | ' not in line: continue
        said, more = line.split(' | ', 1)
        more = more.split(': ', 1)[1]
        assert more not in said and not any(p in said for p in more.split('; ') if len(p) > 20), line


def test_fixes_fit_a_clone():
    "Run from the clone (as the tests are), a fix says pip install -e; a wheel's would name the package."
    from ppo_trt.core.files import pip_extra
    from ppo_trt.backends.onnxruntime import ORT_GPU_FIX
    assert pip_extra('gpu').startswith('pip install -e "') and pip_extra('gpu').endswith('[gpu]"')
    assert 'pip install -e "' in ORT_GPU_FIX and 'ppo_trt[gpu]' not in ORT_GPU_FIX


def test_the_seed_preset_is_default_and_its_old_name_still_works(capsys):
    from ppo_trt.train.sb3 import preset, canonical_preset, SB3TrainConfig
    assert SB3TrainConfig().preset_name == 'default' and preset('seed') is preset('default')
    assert canonical_preset('seed') == 'default'
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and "preset 'seed' is now called 'default'" in err, err
    assert canonical_preset('zoo') == 'zoo' and capsys.readouterr().err == ''


def test_claim_control_is_a_sentence_about_the_policy(tmp_path):
    "A policy not trained here is 'the policy', not PPO, and the count of phases it wins says of how many."
    from ppo_trt.results.report import load_records, claim_control
    recs = load_records(REF)
    mine = claim_control(recs, recs.bench)[0]
    assert mine.startswith('Under 8 scenario phases (20 episodes each), PPO beats the PID baseline in ') and \
        ' of the 8 phases' in mine, mine
    theirs = claim_control(msgspec.structs.replace(recs, train=None), recs.bench)[0]
    assert 'the policy beats the PID baseline in ' in theirs and 'PPO' not in theirs, theirs


# bring your own policy: bench FILE, then import FILE, share the bench record ------------------------------------

def foreign_actor(path):
    "A CleanRL-style Hopper actor exported by torch (the names torch picks, no metadata)."
    torch = pytest.importorskip('torch')
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(11, 64), torch.nn.Tanh(), torch.nn.Linear(64, 3)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        torch.onnx.export(m, torch.zeros(1, 11), str(path), dynamo=False, opset_version=17)
    return path


def test_import_brings_the_bench_record_of_the_same_network(tmp_path, monkeypatch):
    from ppo_trt.cli import bench_file_dir, policy_bytes, BENCH_MARKER, BENCH_MADE_BY, bring_bench_record, _adopt_options
    from ppo_trt.export.foreign import import_policy, ImportSettings
    from ppo_trt.core.records import record, session, session_id
    from ppo_trt.core.records import BenchFile
    from ppo_trt.measure.bench import skipped, trained_model_missing
    from ppo_trt.core.run_folder import RunDir
    monkeypatch.chdir(tmp_path)
    src = foreign_actor(tmp_path/'POLICY.onnx')
    # what `ppo-trt bench POLICY.onnx` leaves in runs/bench-POLICY: its adopted copy and a record of it
    bd = tmp_path/'runs'/'bench-POLICY'; bd.mkdir(parents=True)
    a = type('A', (), dict(obs_name=None, action_name=None, env_id=None, trust_code=False))()
    (bd/'policy.onnx').write_bytes(policy_bytes(src, _adopt_options(a, 'a foreign actor ONNX (ppo-trt bench)'))[0])
    mark_made_by(bd, BENCH_MARKER, BENCH_MADE_BY)
    ref = load_artifact(REF, 'bench_record')
    s = session(policy_sha256(bd/'policy.onnx')); sid = session_id(s)
    recs = [msgspec.structs.replace(r, session=sid) for r in ref.records if r.session == ref.session][:4]
    bench = msgspec.structs.replace(ref, records=recs, sessions={sid: s}, session=sid, run_dir=str(bd))
    (bd/'bench.json').write_bytes(msgspec.json.encode(bench))
    rd = tmp_path/'runs'/'theirs'
    import_policy(src, ImportSettings('Hopper-v4', rd))
    assert policy_sha256(rd/'policy.onnx') != policy_sha256(bd/'policy.onnx')  # the env's metadata added
    assert bring_bench_record(src, rd) == bd.absolute()
    got = load_artifact(rd, 'bench_record')
    assert [r.backend for r in got.records] == [r.backend for r in recs] and 'brought here by' in got.notes[-1]
    assert not [p for p in lineage_problems(RunDir(rd)) if p[0] in ('bench_record', 'bench.json')]
    assert bring_bench_record(src, rd) is None  # never over a bench.json the folder has
    # and a bare ONNX is never told to import the SB3 model it came from
    why = trained_model_missing('torch', RunDir(rd))
    assert 'another trainer' in why and 'SB3 model it came from' not in why, why


def test_a_folder_without_a_report_gets_none_from_a_stage(tmp_path):
    from ppo_trt.cli import refresh_report
    assert refresh_report(tmp_path) is None and list(tmp_path.iterdir()) == []


@pytest.mark.slow  # evaluates and renders a report: about a minute
def test_a_stage_re_renders_a_report_that_predates_its_record(tmp_path):
    "A report rendered before evaluate ran says 'not measured: control quality'; after evaluate it shows it."
    run = Path(shutil.copytree(REF, tmp_path/'ref', ignore=shutil.ignore_patterns('sweep', 'robust', 'evaluate.json')))
    assert ppo_trt('report', '--run-dir', run).returncode == 0
    assert 'control quality (<code>ppo-trt evaluate</code>)' in (run/'report.html').read_text()
    r = ppo_trt('evaluate', '--run-dir', run, '--phases', 'nominal', '--episodes', 1, '--backends', 'ort',
                '--deadline-us', 1e6, env={'PPO_TRT_REPORT_REFRESH': '1'})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    html = (run/'report.html').read_text()
    assert 'Control quality per scenario phase' in html and 'control quality (<code>ppo-trt evaluate' not in html
    assert f'updating {run/"report.html"}' in r.stdout


@pytest.mark.slow  # benches, imports and evaluates a policy: about a minute
def test_bring_your_own_policy_in_the_readmes_order(tmp_path):
    """bench POLICY.onnx, import POLICY.onnx --run-dir runs/theirs, evaluate: the gate has its SLA verdict; the report
    speaks of the policy."""
    foreign_actor(tmp_path/'POLICY.onnx')
    run = lambda *a: ppo_trt(*a, cwd=tmp_path)
    assert run('bench', 'POLICY.onnx', '--backends', 'ort,native-c', *QUICK_BENCH).returncode == 0
    r = run('import', 'POLICY.onnx', '--env-id', 'Hopper-v4', '--run-dir', 'runs/theirs')
    assert r.returncode == 0 and 'brought bench.json along' in r.stdout, r.stdout + r.stderr
    r = run('evaluate', '--run-dir', 'runs/theirs', '--phases', 'nominal', '--episodes', 1, '--deadline-us', 1e6,
            '--backends', 'ort,native-c')  # those benched: any other says its SLA was not measured
    assert r.returncode == 0, r.stderr[-2000:]
    gates = [l for l in r.stdout.splitlines() if l.startswith('gate ')]
    assert gates and not any('SLA not measured' in l for l in gates), gates
    assert run('report', '--run-dir', 'runs/theirs').returncode == 0
    html = (tmp_path/'runs'/'theirs'/'report.html').read_text()
    assert 'the policy beats the PID baseline in ' in html and 'PPO beats' not in html


@pytest.mark.slow  # evaluates: seconds
def test_evaluate_from_python_says_how_it_goes(tmp_path):
    "`ppo_trt.evaluate` called from a script (output piped) prints a line per phase and policy, as train does."
    run = Path(shutil.copytree(REF, tmp_path/'ref', ignore=shutil.ignore_patterns('sweep', 'robust', 'evaluate.json')))
    code = (f'import ppo_trt; ppo_trt.evaluate({str(run)!r}, ["ort"], phases=["nominal", "delay"], episodes=1, '
            'delay_steps=(0, 1), deadline_us=1e6)')
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    said = [l for l in r.stdout.splitlines() if l.startswith('[ppo-trt] ')]
    assert r.returncode == 0, r.stderr[-2000:]
    assert any(l.startswith('[ppo-trt] evaluate nominal: PPO on ort ') for l in said), said
    assert any(l.startswith('[ppo-trt] evaluate delay (2 steps): ') for l in said), said
    assert said[-1].startswith('[ppo-trt] delay curve, 1 step(s): ') and said[-1].endswith('(6/6)'), said
