"""env-bench for the GPU kit (tools/gpu_session.sh quick, step envs): `ppo_trt.throughput.env_bench.env_bench` with
the record rewritten after every (level, num_envs) point, the training level capped at `TRAIN_LEVEL_MAX_ENVS` and, on
CUDA, the Triton CartPole kernel timed before the training level; so a time-out keeps every figure measured so far.
Usage: python tools/gpu_env_bench.py --device cuda --num-envs 65536,1048576,16777216 --out FILE.json"""
import argparse, sys


def main(argv=None):
    "Run the levels, print the table; exit 0 (failed points are findings, kept in the record's `errors`)."
    from ppo_trt.envs.batched.torch import resolve_device
    from ppo_trt.throughput.env_bench import (EnvBench, env_bench, train_level_sizes, print_throughput,
                                              TRAIN_LEVEL_MAX_ENVS)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--env-id', default='CartPole-v1')
    p.add_argument('--device', default='cuda')
    p.add_argument('--num-envs', default='1024,65536,1048576,16777216', help='comma-separated env counts')
    p.add_argument('--steps', type=int, default=100, help='steps per timing')
    p.add_argument('--compile', action='store_true', help='torch.compile the env step')
    p.add_argument('--gym-max-envs', type=int, default=1024, help="largest num_envs for gymnasium's vector envs")
    p.add_argument('--train-max-envs', type=int, default=TRAIN_LEVEL_MAX_ENVS,
                   help='largest num_envs the training level runs at (default: %(default)s)')
    p.add_argument('--no-train', action='store_true', help='skip the training level')
    p.add_argument('--triton-launches', type=int, default=10, help='launches (of 100 steps) per Triton kernel timing')
    p.add_argument('--out', required=True, help='the record, rewritten after every point')
    a = p.parse_args(argv)
    sizes, dev = [int(n) for n in a.num_envs.split(',')], resolve_device(a.device)
    say = lambda msg: print(msg, flush=True)
    levels = []
    if a.env_id == 'CartPole-v1' and dev.type != 'cuda':
        say(f'Triton CartPole kernel skipped: it is timed on a CUDA GPU only (the device is {dev})')
    elif a.env_id == 'CartPole-v1':  # the hand-written kernel's raw figure, on a GPU only
        from ppo_trt.envs.batched.triton_cartpole import TRITON_MISSING
        from ppo_trt.throughput.env_bench import triton_throughput
        if TRITON_MISSING: say(f'Triton CartPole kernel skipped: {TRITON_MISSING}')
        else:
            kernel = lambda ns: triton_throughput(ns, dev, launches=a.triton_launches)
            levels.append(('Triton CartPole kernel', kernel, sizes))
    if not a.no_train:
        from ppo_trt.train.fast_ppo import train_throughput
        train_sizes = train_level_sizes(sizes, a.train_max_envs)
        if len(train_sizes) < len(sizes):
            say(f'training level capped at {a.train_max_envs:,} envs: not run at '
                f"{', '.join(f'{n:,}' for n in sizes if n not in train_sizes)}")
        levels.append(('env+inference+training',
                       lambda ns: train_throughput(a.env_id, ns, dev, progress=False), train_sizes))
    rec = env_bench(a.out, EnvBench(a.env_id, sizes, dev, a.steps, compile=a.compile, gym_max_envs=a.gym_max_envs),
                    levels=levels, say=say)
    print_throughput(rec['rows'])
    for e in rec['errors']: say(f"failed: {e['level']} at {e['num_envs']:,} envs: {e['error']}")
    say(f"wrote {a.out} ({len(rec['rows'])} rows, {len(rec['errors'])} failed points)")
    return 0


if __name__ == '__main__': sys.exit(main())
