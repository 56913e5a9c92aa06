"""Randomized training: the ranges travel from config.json to train.json, export.json and the ONNX metadata; a resume
with other ranges is refused in one line; the reported return is measured on held-out evaluation seeds."""
import shutil
import pytest
from conftest import ppo_trt
from ppo_trt.core.files import BadInputError, load_json
from ppo_trt.core.records import ConfigRecord
from ppo_trt.envs.gym import parse_randomize, SELECTION_SEED_OFFSET, HELD_OUT_SEED_OFFSET
from ppo_trt.export.onnx import onnx_metadata
from ppo_trt.core.records import load_artifact, lineage_problems
from ppo_trt.train.sb3 import train

SPEC = 'delay=0:2,noise=0:0.05,mass=0.8:1.2'
RANGES = {'noise': [0.0, 0.05], 'delay': [0, 2], 'mass': [0.8, 1.2]}
SMOKE = dict(preset_name='smoke', eval_freq=512, n_eval_episodes=1, final_eval_episodes=1, progress=False)

@pytest.fixture(scope='module')
def randomized_run(tmp_path_factory):
    "A smoke run trained with randomized delay, noise and mass (Python API), exported by the real CLI."
    d = tmp_path_factory.mktemp('randomized')/'hopper'
    train(d, timesteps=1024, randomize=SPEC, checkpoint_freq=512, **SMOKE)
    r = ppo_trt('export', '--run-dir', d)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return d

def test_ranges_recorded_everywhere(randomized_run):
    d = randomized_run
    assert parse_randomize(SPEC) == RANGES
    assert ConfigRecord.load(d).randomize == RANGES and load_artifact(d, 'config').randomize == RANGES
    assert load_artifact(d, 'train_record').randomize == RANGES
    e = load_artifact(d, 'export_record')
    assert e.randomize == e.metadata['randomize'] == RANGES
    meta = onnx_metadata(d/'policy.onnx')
    assert meta['randomize'] == RANGES and type(meta['randomize']['delay'][1]) is int
    assert lineage_problems(d) == []

def test_nominal_run_records_none(run_dir):
    for f in ('config.json', 'train.json', 'export.json'): assert load_json(run_dir/f)['randomize'] is None, f
    assert onnx_metadata(run_dir/'policy.onnx')['randomize'] is None

def test_held_out_seeds_recorded(run_dir, randomized_run):
    for d in (run_dir, randomized_run):
        t = load_json(d/'train.json')
        assert t['selection_eval_seed'] == t['seed'] + SELECTION_SEED_OFFSET
        assert t['final_eval_seed'] == t['seed'] + HELD_OUT_SEED_OFFSET != t['selection_eval_seed']

@pytest.mark.parametrize('other', ['delay=0:2,noise=0:0.05', None, 'delay=0:2,noise=0:0.05,mass=0.8:1.3', 'all'])
def test_resume_with_other_ranges_refused(randomized_run, other):
    before = {f: (randomized_run/f).read_bytes() for f in ('config.json', 'train.json', 'train_log.csv')}
    with pytest.raises(BadInputError) as e: train(randomized_run, timesteps=1536, resume=True, randomize=other, **SMOKE)
    msg = str(e.value)
    assert '\n' not in msg and 'trained with randomize noise=0:0.05,delay=0:2,mass=0.8:1.2' in msg and '--force' in msg, msg
    assert {f: (randomized_run/f).read_bytes() for f in before} == before

def test_cli_resume_without_ranges_refused(randomized_run):
    r = ppo_trt('train', '--run-dir', randomized_run, '--resume', '--preset', 'smoke', '--timesteps', 1536)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and 'was trained with randomize' in err[0], r.stderr[-2000:]

def test_resume_with_same_ranges(randomized_run, tmp_path):
    d = tmp_path/'copy'
    shutil.copytree(randomized_run, d)
    rec = train(d, timesteps=1536, resume=True, randomize='mass=0.8:1.2,noise=0:0.05,delay=0:2', **SMOKE)
    assert rec.resumed_from == 1024 and rec.timesteps == 1536 and rec.randomize == RANGES

@pytest.mark.parametrize('spec, needle', [('actuator', 'evaluation event'), ('mass=1.4:0.7', 'empty range'),
                                          ('noise=0:2', 'out of bounds'), ('delay=x', 'not a number'),
                                          ('delay:1', 'cannot read')])
def test_bad_spec_refused_before_any_work(tmp_path, spec, needle):
    with pytest.raises(BadInputError) as e: train(tmp_path/'run', timesteps=512, randomize=spec, **SMOKE)
    assert needle in str(e.value) and '\n' not in str(e.value)
    assert not (tmp_path/'run'/'config.json').exists()  # refused before anything was written
