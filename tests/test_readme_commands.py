"""The README is run as written: every `ppo-trt ...` command it quotes (in shell blocks and code spans) exists with the
flags it quotes, and its shell blocks run in the order given (nothing refuses because an earlier command already
made, or had not yet made, the folder it works on)."""
import re, shlex
from pathlib import Path
import pytest
from ppo_trt.cli import parser
from ppo_trt.core.run_folder import default_run_dir

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT/'README.md').read_text(encoding='utf-8')
MAKES_A_POLICY = {'run', 'train', 'import'}  # they refuse a folder holding a policy (without --force/--resume)

def _argv(text):
    "The words of one quoted command after `ppo-trt`: comments, optional `[...]` parts and `&& ...` tails dropped."
    text = re.sub(r'\[[^\]]*\]', '', text.split('#')[0].split('&&')[0])
    return shlex.split(text)[1:]

def fenced(markdown):
    "(language, body) of each fenced code block, and the text outside them."
    blocks, outside, lang, body = [], [], None, []
    for line in markdown.splitlines():
        if line.startswith('```'):
            if lang is None: lang, body = line[3:].strip(), []
            else: blocks.append((lang, '\n'.join(body))); lang = None
        elif lang is None: outside.append(line)
        else: body.append(line)
    return blocks, '\n'.join(outside)

def sequences(markdown):
    "Each shell block's `ppo-trt` commands, one list per block, in the order the README gives them."
    return [[_argv(line[line.index('ppo-trt'):]) for line in body.splitlines() if re.search(r'\bppo-trt\b', line)]
            for lang, body in fenced(markdown)[0] if lang in ('bash', 'sh')]

def quoted_commands(markdown):
    "Every `ppo-trt ...` command quoted in `markdown`: the lines of its shell blocks, then its code spans."
    spans = [_argv(s) for s in re.findall(r'`(ppo-trt[^`]*)`', fenced(markdown)[1])]
    return [a for a in [x for seq in sequences(markdown) for x in seq] + spans if a]

def test_the_readme_quotes_commands():
    cmds = quoted_commands(README)
    assert len(cmds) >= 15 and {'run', 'evaluate', 'export-c', 'c-loop', 'compare'} <= {a[0] for a in cmds}, cmds

@pytest.mark.parametrize('argv', quoted_commands(README), ids=' '.join)
def test_every_quoted_command_parses(argv, capsys):
    try: parser().parse_args(argv)
    except SystemExit:
        why = capsys.readouterr().err.strip()
        pytest.fail(f"README quotes `ppo-trt {' '.join(argv)}`, which ppo-trt refuses: {why}")

def test_a_wrong_flag_is_caught():
    with pytest.raises(SystemExit): parser().parse_args(_argv('ppo-trt train --fastest'))

def _folder(a):
    "The run folder a parsed command works in, as the command resolves it (None: it makes its own or needs none)."
    if a.command in ('doctor', 'docs', 'sweep', 'env-bench', 'compare') or getattr(a, 'policy', None): return None
    return Path(a.run_dir) if a.run_dir else default_run_dir(a.env_id or 'Hopper-v4')

def order_problems(seq):
    "What would refuse if `seq` ran in order from a fresh clone: a second training into a folder, a stage before it."
    trained, problems = set(), []
    for argv in seq:
        a = parser().parse_args(argv)
        d = _folder(a)
        if d is None: continue
        if a.command in MAKES_A_POLICY:
            again = getattr(a, 'force', False) or getattr(a, 'resume', False)
            if d in trained and not again: problems.append(f'{argv}: {d} already holds a policy')
            trained.add(d)
        elif d not in trained: problems.append(f'{argv}: nothing has made {d} yet')
    return problems

def test_the_readme_sequence_runs_in_order():
    seq = [argv for block in sequences(README) for argv in block]
    assert any(a[0] == 'run' for a in seq) and any(a[:2] == ['train', '--fast'] for a in seq), seq
    assert order_problems(seq) == []

def test_an_out_of_order_sequence_is_caught():  # what a newcomer met: a second training into the default folder
    found = order_problems([_argv('ppo-trt run'), _argv('ppo-trt train --fast --env-id Hopper-v4')])
    assert len(found) == 1 and 'already holds a policy' in found[0], found
    assert order_problems([_argv('ppo-trt evaluate --run-dir runs/x')]) == [
        "['evaluate', '--run-dir', 'runs/x']: nothing has made runs/x yet"]
