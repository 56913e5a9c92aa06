"`ppo-trt`'s flags, defaults, choices and metavars are those of the committed snapshot: a lost or changed flag fails."
import argparse, json
from pathlib import Path
from cli_flags import flag_table

SNAPSHOT = Path(__file__).with_name('cli_flags.json')

def differences(want, have):
    "Lines naming each subcommand or flag lost, added or changed (help text aside) between two flag tables."
    out = [f'subcommand {c} lost' for c in want if c not in have]
    out += [f'subcommand {c} added' for c in have if c not in want]
    for cmd in set(want) & set(have):
        w = {a['dest']: {k: v for k, v in a.items() if k != 'help'} for a in want[cmd]}
        h = {a['dest']: {k: v for k, v in a.items() if k != 'help'} for a in have[cmd]}
        out += [f'{cmd}: {d} lost' for d in w if d not in h] + [f'{cmd}: {d} added' for d in h if d not in w]
        out += [f'{cmd}: {d} {w[d]} -> {h[d]}' for d in w if d in h and w[d] != h[d]]
    return out

def _table(ap=None): return json.loads(json.dumps(flag_table(ap)))  # as the snapshot stores it

def test_flags_match_the_snapshot():
    assert differences(json.loads(SNAPSHOT.read_text()), _table()) == []

def test_every_flag_has_help():
    for cmd, acts in flag_table().items():
        for a in acts: assert a['help'], f'{cmd} {a["option_strings"]} has no help'

def test_a_lost_or_changed_flag_is_seen():
    from ppo_trt.cli import parser
    ap = parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    train, bench = sub.choices['train'], sub.choices['bench']
    train._actions = [a for a in train._actions if a.dest != 'keep']
    next(a for a in bench._actions if a.dest == 'iters').default = 1000
    found = differences(json.loads(SNAPSHOT.read_text()), _table(ap))
    assert 'train: keep lost' in found and any(x.startswith('bench: iters') for x in found), found
