"""The GPU kit's first measurement (tools/gpu_session.sh quick, step `persistent`): batch 1 through `cuda-persistent`,
the resident kernel polling host-mapped memory. The bench's own batch-1 measurement (`ppo_trt.measure.bench.
bench_latency`: the checked call and the hot path, alternating blocks) over the run's export_obs.npy, then its parity
against ONNX Runtime FP32 on every row (the bound scaled to the actions' size), then a timed close (the stop flag ends
the kernel). With --simulated (a machine without a GPU) the same host protocol runs against a thread standing in for the
kernel: the figures then time Python threads, not a GPU, and the record says so.
Usage: python tools/gpu_persistent.py --run-dir RUN --out persistent.json [--simulated] [--iters 10000]"""
import argparse, json, sys, time
from pathlib import Path

BOUND = 1e-5  # float32: max |action - ORT FP32| <= BOUND * max(1, max |ORT FP32 action|)


def say(msg): print(msg, flush=True)


def measure(run, simulated, iters, warmup):
    "The record: latency stats (checked call, hot path), parity vs ORT FP32, close time; raises what breaks."
    import msgspec, numpy as np
    from ppo_trt.backends import registry as B
    from ppo_trt.measure.bench import BenchSettings, bench_latency, backend_parity
    obs = np.load(Path(run)/'export_obs.npy', allow_pickle=False).astype(np.float32)
    ref = B.load('ort', run)(obs).astype(np.float64)
    rec = dict(backend='cuda-persistent', simulated=simulated, rows=int(len(obs)))
    t0 = time.perf_counter()
    if simulated:
        from ppo_trt.backends.cuda_persistent import SimulatedPersistentRunner
        runner = SimulatedPersistentRunner(run)
    else: runner = B.load('cuda-persistent', run, network_only=True)
    rec['load_s'], rec['info'] = round(time.perf_counter() - t0, 3), dict(runner.info)
    try:
        lat = bench_latency(runner, obs, BenchSettings(iters=iters, warmup=warmup, closed_loop_steps=0))
        par = backend_parity(runner, obs, ref)
        one = np.concatenate([runner(obs[i:i + 1]) for i in range(min(64, len(obs)))])  # the batch-1 path itself
        one_err = float(np.abs(one - ref[:len(one)]).max())
    finally:
        t0 = time.perf_counter()
        runner.close()
        rec['close_s'] = round(time.perf_counter() - t0, 4)
    bound = BOUND * max(1.0, float(np.abs(ref).max()))
    s, h = lat.stats, lat.hot_path.stats
    rec.update(checked_call=msgspec.to_builtins(msgspec.structs.replace(s, cdf_us=[])),
               hot_path=msgspec.to_builtins(msgspec.structs.replace(h, cdf_us=[])),
               parity_vs_ort_fp32=dict(max_abs_err=max(par.max_abs_err, one_err), mean_abs_err=par.mean_abs_err,
                                       bound=bound, n=par.n),
               parity_ok=max(par.max_abs_err, one_err) <= bound, iters=iters, warmup=warmup,
               stopped=getattr(runner.box, 'said', lambda: '?')())
    return rec


def line(rec):
    "The line the session's summary greps (it starts with 'bench ')."
    if 'error' in rec: return f"bench cuda-persistent batch 1: FAILED: {rec['error']}"
    c, h, p = rec['checked_call'], rec['hot_path'], rec['parity_vs_ort_fp32']
    where = 'simulated: a Python thread stands in for the kernel' if rec['simulated'] else rec['info'].get('gpu', '?')
    return (f"bench cuda-persistent batch 1 ({where}): checked call p50 {c['p50_us']:.2f} / p99 {c['p99_us']:.2f} / "
            f"p99.9 {c['p999_us']:.2f} us over {c['n']:,} calls; run() p50 {h['p50_us']:.2f} / "
            f"p99 {h['p99_us']:.2f} us;"
            f" parity vs ORT FP32 max |err| {p['max_abs_err']:.2e} (bound {p['bound']:.1e}): "
            f"{'ok' if rec['parity_ok'] else 'FAILED'}; close {rec['close_s'] * 1e3:.1f} ms ({rec['stopped']})")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--run-dir', required=True)
    p.add_argument('--out', required=True, help='the JSON record')
    p.add_argument('--simulated', action='store_true', help='no GPU: a thread stands in for the kernel')
    p.add_argument('--iters', type=int, default=10000)
    p.add_argument('--warmup', type=int, default=500)
    a = p.parse_args(argv)
    try: rec = measure(a.run_dir, a.simulated, a.iters, a.warmup)
    except Exception as e:
        from ppo_trt.core.files import error_line
        rec = dict(backend='cuda-persistent', simulated=a.simulated, error=error_line(e, 500))
    Path(a.out).write_text(json.dumps(rec, indent=1, default=str) + '\n')
    say(line(rec))
    return 0 if rec.get('parity_ok') else 1


if __name__ == '__main__': sys.exit(main())
