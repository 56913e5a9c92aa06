"Every `ppo-trt` subcommand's flags as plain data: option strings, dest, default, choices, metavar, nargs, required."
import argparse, json, sys
from pathlib import Path

def _plain(v):
    if isinstance(v, Path): return str(v)
    if isinstance(v, (tuple, list)): return [_plain(x) for x in v]
    return v

def flag_table(ap=None):
    "{subcommand: [{option_strings, dest, default, choices, metavar, nargs, required, kind, help}, ...]}"
    from ppo_trt.cli import parser
    ap = ap or parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for name, p in sorted(sub.choices.items()):
        out[name] = [dict(option_strings=a.option_strings, dest=a.dest, default=_plain(a.default),
                          choices=_plain(list(a.choices)) if a.choices else None, metavar=a.metavar,
                          nargs=a.nargs, required=a.required, kind=type(a).__name__,
                          type=getattr(a.type, '__name__', None),
                          help=a.help if a.help == argparse.SUPPRESS or a.help is None else str(a.help))
                     for a in p._actions if not isinstance(a, argparse._HelpAction)]
    return out

if __name__ == '__main__': json.dump(flag_table(), sys.stdout, indent=1, sort_keys=True)
