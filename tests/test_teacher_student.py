"""Teacher-student training (`train --fast --teacher-student`): a privileged teacher, a history student distilled from
it on its own rollouts and fine-tuned; what the records say, that nothing of the teacher is deployed, and that the
student is an ordinary history policy: sequence parity on every CPU backend and the C loop with its memory."""
import shutil, subprocess, sys
from pathlib import Path
import numpy as np, pytest, torch
from ppo_trt.backends import registry as B
from ppo_trt.backends.runner import HistoryRunner
from ppo_trt.core.checkpoint import ObsNorm
from ppo_trt.core.files import BadInputError, load_json
from ppo_trt.export.onnx import export, onnx_metadata
from ppo_trt.measure.c_loop import c_loop, c_loop_missing
from ppo_trt.envs.batched.mujoco import BatchActionHistory, PrivilegedObs, batched_mujoco
from ppo_trt.train.fast_ppo import ADR, EpisodeStats, PhaseTimes, RunningNorm, agent_class
from ppo_trt.train.teacher_student import Distillation, TeacherStudent, phase_updates, teacher_student_train
from test_history import CPU_BACKENDS, _episodes, _replay

K = 2
SMALL = TeacherStudent(history=K, adr=ADR(-1e9, -2e9, episodes=2), distill_steps=8, final_eval_episodes=2,
                       gap_episodes=4)  # ADR that widens at every judgement: the ranges move within a short run


@pytest.fixture(scope='module')
def ts_run(tmp_path_factory):
    d = tmp_path_factory.mktemp('ts')/'run'
    teacher_student_train(d, timesteps=12 * 2048, seed=0, settings=SMALL, progress=False)
    export(d)
    return d


def test_records_say_how_the_student_was_made(ts_run):
    rec, cfg, meta = load_json(ts_run/'train.json'), load_json(ts_run/'config.json'), onnx_metadata(ts_run/'policy.onnx')
    ts = rec['teacher_student']
    teacher, distill, tune = phase_updates(12, SMALL)
    assert [ts[k]['until_timesteps'] for k in ('teacher', 'distillation', 'finetuning')] == \
        [teacher * 2048, (teacher + distill) * 2048, 12 * 2048] == [teacher * 2048, (teacher + distill) * 2048, rec['timesteps']]
    assert ts['distillation']['iterations'] == distill and len(ts['distillation']['losses']) >= 1
    assert ts['teacher']['features'][:6] == ['noise', 'delay', 'mass', 'friction', 'push', 'push_step']
    assert ts['teacher']['actor_inputs'] == rec['obs_dim'] + K * rec['act_dim'] + len(ts['teacher']['features'])
    assert set(ts['returns']) == {'teacher', 'student_distilled', 'student'}
    assert all(set(r) == {'nominal', 'adr', 'full'} for r in ts['returns'].values())
    assert rec['trainer'] == 'ppo_trt.train.teacher_student' and rec['curriculum']['rule'] == 'adr'
    assert cfg['teacher_student']['history'] == K and cfg['adr'] == cfg['teacher_student']['adr']
    assert cfg['adr']['high'] == -1e9 and rec['privileged_critic']['value_net_in_policy_zip'] is False
    assert meta['teacher_student']['teacher_features'] == ts['teacher']['features']
    assert meta['curriculum']['rule'] == 'adr' and meta['history_actions'] == K


def test_nothing_of_the_teacher_is_deployed(ts_run):
    "policy.onnx and obs_norm.json are as wide as the observation plus the history: no privileged column."
    rec, meta = load_json(ts_run/'train.json'), onnx_metadata(ts_run/'policy.onnx')
    width = rec['obs_dim'] + K * rec['act_dim']
    assert meta['obs_dim'] == width and len(ObsNorm.load(ts_run/'obs_norm.json').mean) == width
    assert B.load('ort', ts_run, network_only=True).obs_dim == width


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_student_sequence_parity_on_every_cpu_backend(ts_run):
    "The deployed student, stateful, on every CPU backend replays ORT's closed-loop episodes within 1e-5."
    ort = B.load('ort', ts_run)
    assert isinstance(ort, HistoryRunner) and ort.obs_dim == 11
    obs_seq, ort_actions, starts = _episodes(ort)
    assert starts.sum() == 2 and len(obs_seq) > 20
    ran = []
    for name in CPU_BACKENDS:
        if not B.available()[name][0]: continue
        np.testing.assert_allclose(_replay(B.load(name, ts_run), obs_seq, starts), ort_actions, atol=1e-5,
                                   err_msg=name)
        ran.append(name)
    assert {'ort', 'native', 'torch'} <= set(ran)


@pytest.mark.skipif(bool(c_loop_missing()), reason=c_loop_missing() or 'the C loop builds here')
def test_c_loop_drives_the_student(ts_run):
    "The student in C through the library's memory: gymnasium's steps, native-c's returns to the bit, fallback held."
    rec = c_loop(ts_run, steps=3_000, episodes=2)
    assert rec.check.passed and rec.fallback.passed, (rec.check, rec.fallback)
    assert rec.returns == rec.python_returns['ppo:native-c']


COMMITTED = Path(__file__).resolve().parents[1]/'nbs'/'_reference'/'hopper'/'robust'/'runs'/'teacher-student-s1'


@pytest.fixture(scope='module')
def committed_student(tmp_path_factory):
    "A copy of the committed study's deployed student (4M steps): the C loop writes its record beside it."
    d = tmp_path_factory.mktemp('committed')/'student'
    shutil.copytree(COMMITTED, d)
    return d


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_committed_student_parity_on_every_cpu_backend(committed_student):
    "The study's own student, not a toy: every CPU backend replays ORT's delayed episodes within 1e-5."
    ort = B.load('ort', committed_student)
    assert isinstance(ort, HistoryRunner) and ort.info['history_actions'] == 3
    obs_seq, ort_actions, starts = _episodes(ort)
    ran = []
    for name in CPU_BACKENDS:
        if not B.available()[name][0]: continue
        np.testing.assert_allclose(_replay(B.load(name, committed_student), obs_seq, starts), ort_actions, atol=1e-5,
                                   err_msg=name)
        ran.append(name)
    assert {'ort', 'native', 'native-c', 'torch', 'sb3'} <= set(ran)


@pytest.mark.skipif(bool(c_loop_missing()), reason=c_loop_missing() or 'the C loop builds here')
def test_c_loop_drives_the_committed_student(committed_student):
    "The committed student in the C loop with its memory: gymnasium's steps, native-c's returns to the bit."
    rec = c_loop(committed_student, steps=3_000, episodes=2)
    assert rec.check.passed and rec.fallback.passed, (rec.check, rec.fallback)
    assert rec.returns == rec.python_returns['ppo:native-c']


def test_distillation_fits_a_teacher_it_can_match():
    "A teacher that ignores its privileged columns is matched: squared error below a tenth of the labels' variance."
    Agent = agent_class()
    torch.manual_seed(1)
    inner, _ = batched_mujoco('Hopper-v4', 8, seed=1, ranges='all', num_threads=1)
    env = PrivilegedObs(BatchActionHistory(inner, K))
    teacher = Agent(env.obs_dim, 3, False, 32, 0.0, bounds=([-1.0] * 3, [1.0] * 3))
    with torch.no_grad(): teacher.policy_net[0].weight[:, env.policy_obs_dim:] = 0
    student = Agent(env.policy_obs_dim, 3, False, 32, 0.0, bounds=([-1.0] * 3, [1.0] * 3),
                    critic_extra=env.obs_dim - env.policy_obs_dim)
    norm, obs = RunningNorm(env.obs_dim, 'cpu'), env.reset(seed=1)
    norm.update(obs)
    d = Distillation(teacher, student, norm, TeacherStudent(distill_steps=64, distill_batch=128, buffer=4096), 3)
    for _ in range(16): obs = d.rollout(env, obs, 32, EpisodeStats(8, 'cpu'), PhaseTimes()); d.fit(PhaseTimes())
    assert d.filled == 4096 and d.losses[-1] < 0.1 * float(d.y.var(0).mean())


def test_teacher_and_student_meet_the_same_worlds():
    "The gap is measured episode against episode: the same seed draws the same worlds with and without features."
    ranges = dict(mass=[0.7, 1.4], friction=[0.4, 1.2], delay=[0, 3])
    (a, _), (b, _) = (batched_mujoco('Hopper-v4', 4, 7, ranges, 1) for _ in range(2))
    teacher_env, student_env = PrivilegedObs(BatchActionHistory(a, K)), BatchActionHistory(b, K)
    seen, mine = teacher_env.reset(seed=7), student_env.reset(seed=7)
    for t in range(400):
        np.testing.assert_array_equal(seen[:, :teacher_env.policy_obs_dim].numpy(), mine.numpy())
        draws = np.c_[b.delay.numpy(), b.env.param_values]  # what the student's worlds drew
        np.testing.assert_array_equal(seen[:, teacher_env.policy_obs_dim:].numpy(), draws)
        act = torch.full((4, 3), ((t % 9) - 4) / 4.0)
        seen, mine = teacher_env.step(act)[0], student_env.step(act)[0]
    assert len({tuple(r) for r in draws}) > 1  # different worlds, episode after episode


@pytest.mark.parametrize('kw, why', [
    (dict(randomize=None), "pass --randomize (e.g. 'all')"),
    (dict(settings=TeacherStudent(history=0)), '--history K'),
    (dict(settings=TeacherStudent(teacher_share=0.9, distill_share=0.3)), 'add up to at most 1'),
    (dict(settings=TeacherStudent(adr=ADR(low=3000.0, high=2000.0))), 'low <= high'),
])
def test_refused_before_anything_is_made(tmp_path, kw, why):
    with pytest.raises(BadInputError, match=why.replace('(', r'\(').replace(')', r'\)')):
        teacher_student_train(tmp_path/'run', timesteps=4096, progress=False, **kw)
    made = [p.name for p in (tmp_path/'run').iterdir()] if (tmp_path/'run').exists() else []
    assert made in ([], ['.ppo-trt.lock']), made


@pytest.mark.parametrize('flags, why', [
    (['--teacher-student', '--randomize', 'all'], '--teacher-student applies only to the fast trainer'),
    (['--fast', '--teacher-student', '--randomize', 'all', '--privileged-critic'], 'drop --privileged-critic'),
    (['--fast', '--adr', '--curriculum', '--randomize', 'all'], '--adr is a curriculum of its own'),
    (['--fast', '--adr'], 'add --randomize'),
])
def test_cli_refusals_in_one_line(tmp_path, flags, why):
    done = subprocess.run([sys.executable, '-m', 'ppo_trt.cli', 'train', '--env-id', 'Hopper-v4', *flags,
                           '--timesteps', '4096', '--run-dir', str(tmp_path/'run')], capture_output=True, text=True)
    assert done.returncode != 0 and 'Traceback' not in done.stderr, done.stderr[-2000:]
    assert why in done.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_cli_trains_a_student_that_tracks_its_teacher(tmp_path):
    "`ppo-trt train --fast --teacher-student --adr` for real: the distillation loss falls; the student deploys."
    d = tmp_path/'cli'
    done = subprocess.run([sys.executable, '-m', 'ppo_trt.cli', 'train', '--fast', '--env-id', 'Hopper-v4',
                           '--teacher-student', '--adr', '--randomize', 'all', '--history', '3', '--timesteps',
                           str(96 * 2048), '--run-dir', str(d)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert 'teacher-student on Hopper-v4 (student history 3, ADR on)' in done.stdout
    ts = load_json(d/'train.json')['teacher_student']
    losses = ts['distillation']['losses']
    assert len(losses) == ts['distillation']['iterations'] and losses[-1] < losses[0]
    assert export(d).parity_ort_cpu.max_abs_err < 1e-5
