"""The C library for a Cortex-M4F (export.cortex_m): built with Debian's gcc-arm-none-eabi, its sizes, and its test
program on QEMU's emulated Cortex-M4F board. Skipped, with the package to install, where the toolchain is missing."""
import pytest
from ppo_trt.export.c_library import write_c_library
from ppo_trt.export.cortex_m import arm_toolchain_missing, qemu_missing, cortex_m4_size, run_on_qemu

@pytest.fixture(scope='module')
def library(run_dir, tmp_path_factory):
    "The C library of the session run's policy, outside the run folder."
    return write_c_library(run_dir, tmp_path_factory.mktemp('m4')/'c_policy')['path']

@pytest.mark.skipif(bool(arm_toolchain_missing()), reason=arm_toolchain_missing() or 'the toolchain is here')
def test_builds_for_a_cortex_m4f_with_its_sizes(library):
    m4 = cortex_m4_size(library)
    assert m4['warnings'] == '', m4['warnings']  # -std=c99 -Wall -Wextra -pedantic on the M4 too
    assert m4['ram_bytes'] == 0 and m4['flash_bytes'] == m4['code_bytes'] + m4['const_bytes']
    assert m4['const_bytes'] >= 4 * (11 * 64 + 64 * 64 + 64 * 3)  # the weights, as float32
    # portable C batches row after row with the one-row kernel: its stack is that kernel's and the drivers' frames
    assert 0 < m4['stack_bytes']['ppo_policy_act'] < m4['stack_bytes']['ppo_policy_act_batch'] < 2048

@pytest.mark.skipif(bool(qemu_missing()), reason=qemu_missing() or 'qemu is here')
def test_the_test_vectors_pass_on_an_emulated_cortex_m4f(library):
    q = run_on_qemu(library)
    assert q['ok'] and 'action untouched' in q['output'] and '0 failed calls' in q['output'], q

def test_a_missing_toolchain_names_the_package(monkeypatch, tmp_path):
    monkeypatch.setenv('PATH', str(tmp_path))
    assert arm_toolchain_missing() == ('no arm-none-eabi-gcc on this machine: install it '
                                       '(apt-get install gcc-arm-none-eabi)')
    assert qemu_missing() == 'no qemu-system-arm on this machine: install it (apt-get install qemu-system-arm)'
