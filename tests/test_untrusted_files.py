"""Issue 44: a folder's manifest is data. A marker a user receives (`.ppo-trt-c-library.json` in a colleague's
`c_policy/`, a run folder from the internet) names the files a rerun replaces and removes: every key must be a plain
relative path inside its folder with no link on the way, or the rerun refuses in one line before anything moves. A file
of its own the user edited since (its hash is not in the manifest) is kept, the rerun refusing over it; and no output
folder is written through a link (`sweep --out mine` with `mine/runs -> ../elsewhere`). Every case is crafted here."""
import hashlib, json, os, shutil
from pathlib import Path
import numpy as np
import pytest
from conftest import ppo_trt, one_line
from ppo_trt.core.files import (BadArtifactError, BadInputError, PpoTrtError, install_folder, owned_destination,
                                staging, manifest, foreign_files)
from ppo_trt.export.c_library import LIBRARY_MARKER, MADE_BY as EXPORT_C, install_c_library
from ppo_trt.measure.c_loop import C_LOOP_MARKER, C_LOOP_MADE_BY
from ppo_trt.results.site import SITE_MARKER, MADE_BY as DOCS, install_site, site_destination

ROOT = Path(__file__).parents[1]
REFERENCE = ROOT/'nbs'/'_reference'/'hopper'
VICTIM = b'years of work\n'
COMMANDS = {'export-c': (LIBRARY_MARKER, EXPORT_C), 'c-loop': (C_LOOP_MARKER, C_LOOP_MADE_BY), 'docs': (SITE_MARKER, DOCS)}
BAD_KEYS = ['../victim.txt', '../../victim.txt', 'a/../../victim.txt', '/ABS/victim.txt', 'a\\..\\..\\victim.txt',
            'a\0b', '', 'a//b', './a', 'a/./b', 'link/victim.txt', 'x' * 5000]
needs_reference = pytest.mark.skipif(not REFERENCE.is_dir(), reason='the reference run is in a clone (nbs/_reference)')


def tree(folder):
    "{relative path: bytes} of every file under `folder` (links as their target text), to compare byte for byte."
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): (os.readlink(p) if p.is_symlink() else p.read_bytes())
            for p in sorted(folder.rglob('*')) if p.is_symlink() or p.is_file()}


def forge(folder, marker, command, **files):
    "Write `folder`'s marker as a folder's author can: made by `command`, listing `files` ({key: hash})."
    (folder/marker).write_text(json.dumps({'made_by': command, 'files': files}))


def received(tmp_path, marker, command, key):
    "A folder 'theirs' made by `command` whose marker lists `key` besides its own file; a victim file beside it."
    box = tmp_path/'box'; (box/'theirs').mkdir(parents=True)
    (box/'victim.txt').write_bytes(VICTIM); (box/'elsewhere').mkdir(); (box/'elsewhere'/'victim.txt').write_bytes(VICTIM)
    (box/'theirs'/'link').symlink_to(box/'elsewhere')
    (box/'theirs'/'a.txt').write_text('first')
    key = key.replace('/ABS', str(box))
    forge(box/'theirs', marker, command, **{'a.txt': hashlib.sha256(b'first').hexdigest(), key: 'ab' * 32})
    return box, box/'theirs'


def rebuild(dest, marker, command, files):
    "What every folder-writing command does at its end: build `files` in a stage, then install it over `dest`."
    with staging(dest) as stage:
        (stage/'new').mkdir()
        for name, text in files.items(): (stage/'new'/name).write_text(text)
        install_folder(stage/'new', dest, marker, command, stage)


# ---- 1. every key a marker lists stays inside its folder, no link on the way ------------------------------------------
@pytest.mark.parametrize('command', COMMANDS)
@pytest.mark.parametrize('key', BAD_KEYS)
def test_a_key_out_of_the_folder_is_refused_before_anything_moves(tmp_path, command, key):
    "The rerun of export-c / c-loop / docs over a received folder: one line naming the marker; nothing moved."
    marker, made_by = COMMANDS[command]
    box, theirs = received(tmp_path, marker, made_by, key)
    before = tree(box)
    with pytest.raises(BadArtifactError) as e: owned_destination(theirs, marker, made_by)  # where each command starts
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and f'{marker} lists' in msg and 'choose an empty or new folder' in msg, msg
    with pytest.raises(BadArtifactError): rebuild(theirs, marker, made_by, {'b.txt': 'second'})  # and where it ends
    assert tree(box) == before


@pytest.mark.parametrize('files', [[], 'a.txt', {'a.txt': {'sha': 1}}, {'a.txt': ['ab'] * 65},
                                   {f'f{i}': 'ab' for i in range(100_001)}])
def test_a_manifest_that_is_not_a_table_of_paths_is_refused(tmp_path, files):
    box, theirs = received(tmp_path, LIBRARY_MARKER, EXPORT_C, 'b.txt')
    (theirs/LIBRARY_MARKER).write_text(json.dumps({'made_by': EXPORT_C, 'files': files}))
    before = tree(box)
    with pytest.raises(BadArtifactError, match=LIBRARY_MARKER): rebuild(theirs, LIBRARY_MARKER, EXPORT_C, {'b.txt': 'x'})
    assert tree(box) == before


def test_train_force_refuses_a_forged_manifest_in_a_derived_folder(tmp_path):
    "remove_derived reads the manifests of c_policy/ & co. (foreign_files): a key out of the folder is one line there too."
    box, theirs = received(tmp_path, LIBRARY_MARKER, EXPORT_C, '../victim.txt')
    with pytest.raises(BadArtifactError, match='lists'): foreign_files(theirs, LIBRARY_MARKER)


def test_a_sane_manifest_still_replaces_its_own_files(tmp_path):
    "The checks keep the ordinary rerun: its files replaced, its old file removed, the user's kept."
    dest = tmp_path/'lib'
    rebuild(dest, LIBRARY_MARKER, EXPORT_C, {'a.txt': 'first', 'old.txt': 'first'})
    (dest/'robot_main.c').write_bytes(VICTIM)
    rebuild(dest, LIBRARY_MARKER, EXPORT_C, {'a.txt': 'second'})
    assert tree(dest) == {LIBRARY_MARKER: (dest/LIBRARY_MARKER).read_bytes(), 'a.txt': b'second', 'robot_main.c': VICTIM}
    assert manifest(dest, LIBRARY_MARKER) == {'a.txt': [hashlib.sha256(b'second').hexdigest()]}


# ---- 2. a file of its own the user edited is kept ---------------------------------------------------------------------
@pytest.mark.parametrize('next_build', [{'a.txt': 'second', 'Makefile': 'all: new'}, {'a.txt': 'second'}],
                         ids=['replaced', 'removed'])
def test_an_edited_file_is_kept_and_the_rerun_refuses(tmp_path, next_build):
    "A generated Makefile made to fit a robot: a rerun that would replace or remove it refuses; not a byte changes."
    dest = tmp_path/'lib'
    rebuild(dest, LIBRARY_MARKER, EXPORT_C, {'a.txt': 'first', 'Makefile': 'all: old'})
    (dest/'Makefile').write_text('all: my robot\n')
    before = tree(dest)
    with pytest.raises(BadInputError) as e: rebuild(dest, LIBRARY_MARKER, EXPORT_C, next_build)
    assert 'Makefile was edited since ppo-trt made it' in str(e.value) and 'move it out of' in str(e.value)
    assert tree(dest) == before


@needs_reference
@pytest.mark.slow  # generates the library three times (~3 s)
def test_export_c_api_keeps_an_edited_makefile(tmp_path):
    "install_c_library itself (what export-c and --target call): the edited Makefile stays, the rerun refuses."
    obs = np.zeros((4, 11), np.float32)
    dest = tmp_path/'lib'
    install_c_library(REFERENCE/'policy.onnx', obs, dest)
    (dest/'Makefile').write_text('CFLAGS = -mcpu=cortex-a72\n')
    before = tree(dest)
    with pytest.raises(BadInputError, match='Makefile was edited since ppo-trt made it'):
        install_c_library(REFERENCE/'policy.onnx', obs + 1, dest)
    assert tree(dest) == before
    (dest/'Makefile').write_bytes(b'')  # emptied: still the user's
    with pytest.raises(BadInputError, match='edited'): install_c_library(REFERENCE/'policy.onnx', obs + 1, dest)


def test_docs_site_rerun_keeps_an_edited_page(tmp_path):
    dest = site_destination(tmp_path/'site')
    for version in ('first', 'second'):
        with staging(dest) as stage:
            (stage/'site').mkdir(); (stage/'site'/'index.html').write_text(version)
            if version == 'first': install_site(stage, dest); (dest/'index.html').write_text('my page')
            else:
                with pytest.raises(BadInputError, match='index.html was edited'): install_site(stage, dest)
    assert (dest/'index.html').read_text() == 'my page'


# ---- 3. no output folder written through a link -----------------------------------------------------------------------
@pytest.mark.slow  # the CLI's own start (~2 s); the same check in process below
def test_sweep_refuses_a_runs_link(tmp_path):
    "`sweep --out mine` with `mine/runs -> ../elsewhere`: one line, before it trains anything into the link's target."
    (tmp_path/'elsewhere').mkdir(); (tmp_path/'mine').mkdir(); (tmp_path/'mine'/'runs').symlink_to('../elsewhere')
    r = ppo_trt('sweep', '--out', tmp_path/'mine', '--timesteps', 1000, '--seeds', 1, '--variants', 'nominal')
    one_line(r, 2, 'runs is a symbolic link', 'choose another --out')
    assert list((tmp_path/'elsewhere').iterdir()) == [] and sorted(os.listdir(tmp_path/'mine')) == ['runs']


@pytest.mark.parametrize('link', ['runs', 'runs/nominal-s0'])
def test_sweep_refuses_a_run_link_inside_runs(tmp_path, link):
    "`runs` or a run folder of the sweep planted as a link: its target is never read as finished nor trained into."
    from ppo_trt.studies.sweep import sweep
    (tmp_path/'elsewhere').mkdir(); (tmp_path/'mine'/'runs').mkdir(parents=True)
    if link == 'runs': (tmp_path/'mine'/'runs').rmdir()
    (tmp_path/'mine'/link).symlink_to(tmp_path/'elsewhere')
    with pytest.raises(BadInputError, match=f'{link} is a symbolic link'):
        sweep(tmp_path/'mine', seeds=[0], variants=['nominal'], timesteps=1000, progress=False)
    assert list((tmp_path/'elsewhere').iterdir()) == []


def test_residual_study_refuses_a_run_link(tmp_path):
    from ppo_trt.studies.residual import residual_study, ResidualStudy
    (tmp_path/'elsewhere').mkdir(); (tmp_path/'rs').mkdir()
    (tmp_path/'rs'/'InvertedPendulum-v4-residual').symlink_to(tmp_path/'elsewhere')
    with pytest.raises(BadInputError, match='InvertedPendulum-v4-residual is a symbolic link'):
        residual_study(tmp_path/'rs', ResidualStudy(timesteps=1000), progress=False)
    assert list((tmp_path/'elsewhere').iterdir()) == []


# ---- 4. the commands themselves, end to end ---------------------------------------------------------------------------
@pytest.fixture(scope='module')
def reference_run(tmp_path_factory):
    "A copy of the reference run's policy and records: what export-c needs (no training)."
    d = tmp_path_factory.mktemp('ref')/'run'; d.mkdir()
    for n in ('config.json', 'export.json', 'obs_norm.json', 'policy.onnx', 'train.json', 'train_log.csv'):
        shutil.copy(REFERENCE/n, d/n)
    return d


@needs_reference
@pytest.mark.slow  # export-c computes its test vectors from an env rollout (~5 s a run)
@pytest.mark.parametrize('where', ['out', 'run-dir'])
def test_export_c_rerun_over_a_received_folder_deletes_nothing_outside(reference_run, tmp_path, where):
    "`export-c --out theirs` / `--run-dir theirs_run` over a forged marker: exit 2, one line, the victim intact."
    run = tmp_path/'theirs_run'; shutil.copytree(reference_run, run)
    lib = tmp_path/'theirs' if where == 'out' else run/'c_policy'
    args = ['export-c', '--run-dir', run, '--cc', 'none', *(['--out', lib] if where == 'out' else [])]
    assert ppo_trt(*args).returncode == 0
    (tmp_path/'victim.txt').write_bytes(VICTIM)
    m = json.loads((lib/LIBRARY_MARKER).read_text())
    m['files']['../victim.txt' if where == 'out' else '../../victim.txt'] = 'ab' * 32
    (lib/LIBRARY_MARKER).write_text(json.dumps(m))
    before = tree(tmp_path)
    one_line(ppo_trt(*args), 2, f'{LIBRARY_MARKER} lists', 'victim.txt', 'choose an empty or new folder')
    assert tree(tmp_path) == before


@needs_reference
@pytest.mark.slow
def test_export_c_keeps_the_users_makefile(reference_run, tmp_path):
    run = tmp_path/'run'; shutil.copytree(reference_run, run)
    args = ['export-c', '--run-dir', run, '--cc', 'none']
    assert ppo_trt(*args).returncode == 0
    (run/'c_policy'/'Makefile').write_text('CC = arm-none-eabi-gcc\n')
    before = tree(run/'c_policy')
    one_line(ppo_trt(*args), 2, 'Makefile was edited since ppo-trt made it', 'move it out of')
    assert tree(run/'c_policy') == before
