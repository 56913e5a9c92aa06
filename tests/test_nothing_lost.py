"""Nothing lost: a full disk, a symlink planted in the run folder or a record that lacks what the report reads is one
line, and every file (the user's files behind a symlink included) is left as it was."""
import hashlib, json, os, resource, shutil, subprocess, sys
from pathlib import Path
import pytest
from conftest import ppo_trt, QUICK_BENCH
from ppo_trt.core.records import HOLDER_NAME, LOCK_NAME


def _tree(folder):
    "{relative path: sha256 or '-> target'} of everything under `folder`, symlinks as links (never followed)."
    out = {}
    for p in sorted(Path(folder).rglob('*')):
        rel = str(p.relative_to(folder))
        if p.is_symlink(): out[rel] = f'-> {os.readlink(p)}'
        elif p.is_file() and p.name not in (LOCK_NAME, HOLDER_NAME):
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _one_line_error(r, *needles):
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stdout[-800:], err[-2000:])
    assert len(err.splitlines()) == 1 and 'Traceback' not in err, err
    for n in needles: assert n in err, (n, err)


def _user_folder(tmp_path):
    "A folder of the user's own, outside the run folder."
    user = tmp_path/'mine'; user.mkdir()
    (user/'thesis.tex').write_text('three years of work')
    (user/'data').mkdir(); (user/'data'/'measurements.csv').write_text('1,2,3\n')
    return user


@pytest.mark.parametrize('link', ['native', 'checkpoints', 'report.html'])
def test_force_refuses_a_symlink_and_removes_nothing(run_copy, tmp_path, link):
    user = _user_folder(tmp_path)
    target = user if link != 'report.html' else user/'thesis.tex'
    if (run_copy/link).is_dir(): shutil.rmtree(run_copy/link)
    elif (run_copy/link).exists(): (run_copy/link).unlink()
    (run_copy/link).symlink_to(target)
    before, mine = _tree(run_copy), _tree(user)
    r = ppo_trt('train', '--run-dir', run_copy, '--force', '--preset', 'smoke', '--timesteps', 512)
    _one_line_error(r, f'{link} is a symbolic link')
    assert _tree(run_copy) == before and _tree(user) == mine


def test_holder_symlink_is_never_written_through(run_copy, tmp_path):
    user = _user_folder(tmp_path)
    (run_copy/HOLDER_NAME).symlink_to(user/'thesis.tex')
    mine = _tree(user)
    _one_line_error(ppo_trt('report', '--run-dir', run_copy), HOLDER_NAME, 'symbolic link')
    assert _tree(user) == mine and (run_copy/HOLDER_NAME).is_symlink()


@pytest.mark.slow  # over 4 s: the quick suite keeps the README test command under 10 minutes
def test_leftover_partials_are_cleaned_without_following_links(run_copy, tmp_path):
    user = _user_folder(tmp_path)
    (run_copy/'.policy.onnx.partial-killed.onnx').write_bytes(b'half')   # a killed writer's temp file
    (run_copy/'.trash.partial-killed').mkdir()                            # a killed --force's trash
    (run_copy/'.trash.partial-killed'/'x').write_bytes(b'x')
    (run_copy/'.link.partial-x').symlink_to(user)                         # a planted link with a partial's name
    r = ppo_trt('report', '--run-dir', run_copy)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not any('.partial-' in p.name for p in run_copy.iterdir())
    assert _tree(user) == {'data/measurements.csv': _tree(user)['data/measurements.csv'],
                           'thesis.tex': _tree(user)['thesis.tex']} and (user/'thesis.tex').exists()


def _limit_file_size(nbytes):
    "preexec_fn: writes past `nbytes` fail with EFBIG, as a disk that fills up mid-write (Python ignores SIGXFSZ)."
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))


def _ppo_trt_limited(nbytes, *args):
    exe = shutil.which('ppo-trt') or str(Path(sys.executable).with_name('ppo-trt'))
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, preexec_fn=_limit_file_size(nbytes),
                          env={**os.environ, 'PYTHONWARNINGS': 'ignore', 'PYTHONDONTWRITEBYTECODE': '1'})


@pytest.mark.slow  # over 7 s: with the long checks (pytest -m slow tests)
def test_full_disk_during_export_keeps_the_previous_set(run_copy):
    sizes = {f: (run_copy/f).stat().st_size for f in ('policy.onnx', 'export_obs.npy', 'export.json')}
    assert sizes['policy.onnx'] < sizes['export_obs.npy']  # so the limit lets policy.onnx through, then fails
    before = _tree(run_copy)
    r = _ppo_trt_limited(sizes['policy.onnx'] + 1024, 'export', '--run-dir', run_copy)
    _one_line_error(r, 'File too large')
    assert _tree(run_copy) == before
    assert ppo_trt('doctor', '--run-dir', run_copy).stdout.count('stale') == 0


def test_full_disk_during_bench_keeps_the_old_record(run_copy):
    before = _tree(run_copy)
    size = (run_copy/'bench.json').stat().st_size
    r = _ppo_trt_limited(size // 4, 'bench', '--run-dir', run_copy, '--backends', 'ort', *QUICK_BENCH)
    _one_line_error(r, 'bench.json', 'File too large')
    assert _tree(run_copy) == before


@pytest.mark.parametrize('field', ['settings', 'timer_overhead', 'machine_summary'])
@pytest.mark.parametrize('cmd', ['report', 'advise'])
def test_bench_record_without_what_the_report_reads(run_copy, field, cmd):
    b = json.loads((run_copy/'bench.json').read_text()); b.pop(field)
    (run_copy/'bench.json').write_text(json.dumps(b))
    before = _tree(run_copy)
    _one_line_error(ppo_trt(cmd, '--run-dir', run_copy), 'bench.json', field, 'ppo-trt bench')
    assert _tree(run_copy) == before


def test_resume_in_an_empty_folder_is_refused(tmp_path):
    r = ppo_trt('train', '--run-dir', tmp_path/'new', '--resume', '--preset', 'smoke', '--timesteps', 512)
    _one_line_error(r, 'no training to resume', 'drop --resume')
    assert not (tmp_path/'new').exists()


def test_sb3_training_leaves_nothing_in_the_temp_folder(tmp_path, monkeypatch):
    "SB3's default logger makes an empty tempdir/SB3-<time> folder at every learn(); ppo_trt's training does not."
    import tempfile
    from ppo_trt.train.sb3 import train
    scratch = tmp_path/'tmp'
    scratch.mkdir()
    monkeypatch.setattr(tempfile, 'tempdir', str(scratch))
    train(tmp_path/'run', 'Hopper-v4', preset_name='smoke', timesteps=512, eval_freq=256, n_eval_episodes=1,
          final_eval_episodes=1, progress=False)
    assert (tmp_path/'run'/'policy.zip').is_file()
    assert [p.name for p in scratch.iterdir() if p.name.startswith('SB3-')] == []  # (torch may keep its caches)
