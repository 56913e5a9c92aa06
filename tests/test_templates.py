"""The template files (C programs, the Makefile, the linker script, the report notebook, the docs theme) ship with the
package: a non-editable build (setuptools' build_py, what a wheel holds) carries every file under ppo_trt/templates,
and the modules read them back byte for byte."""
import shutil, subprocess, sys
from pathlib import Path
from ppo_trt.export import c_library, cortex_m, targets
from ppo_trt.measure import hil

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT/'ppo_trt'/'templates'


def _shipped(tree):
    return {p.relative_to(tree).as_posix() for p in tree.rglob('*') if p.is_file() and '__pycache__' not in p.parts}


def test_a_build_ships_every_template_file(tmp_path):
    src = tmp_path/'src'
    src.mkdir()
    for name in ('setup.py', 'settings.ini', 'MANIFEST.in', 'README.md', 'LICENSE', 'pyproject.toml'):
        if (ROOT/name).exists(): shutil.copy2(ROOT/name, src/name)
    shutil.copytree(ROOT/'ppo_trt', src/'ppo_trt', ignore=shutil.ignore_patterns('__pycache__', '*.so'))
    r = subprocess.run([sys.executable, 'setup.py', '-q', 'build_py', '--build-lib', str(tmp_path/'lib')], cwd=src,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    want = _shipped(TEMPLATES)
    assert {'c_library/Makefile', 'c_library/test_ppo_policy.c', 'cortex_m/mps2_an386.ld', 'hil/ppo_link.h'} <= want
    assert want <= _shipped(tmp_path/'lib'/'ppo_trt'/'templates'), want - _shipped(tmp_path/'lib'/'ppo_trt'/'templates')


def test_the_modules_read_the_templates_byte_for_byte():
    pairs = {('c_library', 'test_ppo_policy.c'): c_library.TEST_PROGRAM, ('c_library', 'Makefile'): c_library.MAKEFILE,
             ('c_library', 'bench_ppo_policy.c'): c_library.BENCH_PROGRAM, ('cortex_m', 'startup.c'): cortex_m.STARTUP,
             ('cortex_m', 'mps2_an386.ld'): cortex_m.LINKER_SCRIPT,
             ('targets', 'count_ppo_policy.c'): targets.COUNT_PROGRAM, ('hil', 'ppo_link.h'): hil.LINK_HEADER,
             ('hil', 'ppo_link_host.c'): hil.HOST_LINK, ('hil', 'hil_device_m4.c'): hil.DEVICE_M4,
             ('hil', 'hil_device_posix.c'): hil.DEVICE_POSIX}
    for parts, text in pairs.items():
        assert TEMPLATES.joinpath(*parts).read_bytes() == text.encode('utf-8'), parts
    assert '\t$(CC) $(CFLAGS) -c ppo_policy.c -o $@' in c_library.MAKEFILE  # make needs the tabs
