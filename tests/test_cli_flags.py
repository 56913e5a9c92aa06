"`ppo-trt`'s flags, defaults, choices and metavars are those of the committed snapshot: a lost or changed flag fails."
import json
from pathlib import Path
from cli_flags import flag_table

SNAPSHOT = Path(__file__).with_name('cli_flags.json')

def _without_help(table):
    return {cmd: [{k: v for k, v in a.items() if k != 'help'} for a in acts] for cmd, acts in table.items()}

def test_flags_match_the_snapshot():
    want, have = _without_help(json.loads(SNAPSHOT.read_text())), _without_help(json.loads(json.dumps(flag_table())))
    assert sorted(have) == sorted(want), 'subcommands changed'
    for cmd in want:
        w, h = {a['dest']: a for a in want[cmd]}, {a['dest']: a for a in have[cmd]}
        assert sorted(h) == sorted(w), f'{cmd}: flags lost {sorted(set(w) - set(h))}, added {sorted(set(h) - set(w))}'
        for dest in w: assert h[dest] == w[dest], f'{cmd} {dest}: {h[dest]} != snapshot {w[dest]}'

def test_every_flag_has_help():
    for cmd, acts in flag_table().items():
        for a in acts: assert a['help'], f'{cmd} {a["option_strings"]} has no help'

def test_the_check_sees_a_lost_flag():
    import argparse
    from ppo_trt.cli import parser
    ap = parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    train = sub.choices['train']
    train._actions = [a for a in train._actions if a.dest != 'keep']
    assert not any(a['dest'] == 'keep' for a in flag_table(ap)['train'])
