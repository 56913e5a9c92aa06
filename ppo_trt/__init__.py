"""Train PPO, export it with its normalisation and clipping baked in, run it on every backend, measure it honestly.

The stages take a run folder (the folder each stage reads and writes), as the `ppo-trt` commands do:

    ppo_trt.train_policy('runs/hopper', 'Hopper-v4')   # ppo-trt train
    ppo_trt.export_onnx('runs/hopper')                 # ppo-trt export: policy.onnx
    ppo_trt.bench('runs/hopper')                       # ppo-trt bench: bench.json
    ppo_trt.evaluate('runs/hopper')                    # ppo-trt evaluate: evaluate.json
    ppo_trt.export_c('runs/hopper', cc='cc')           # ppo-trt export-c: the C library, built and tested
    runner = ppo_trt.load('native-c', 'runs/hopper')   # a runner: actions = runner(obs)

`import ppo_trt` imports nothing heavy: each name imports its module on first use."""
__version__ = "0.1.0"

# The public surface, imported on first use so that `import ppo_trt` stays fast: name -> (module, its name there).
# `train` and `export` are subpackages of ppo_trt, so their stages are `train_policy` and `export_onnx`: a function
# of either name would be replaced by the subpackage as soon as any of its modules is imported.
_PUBLIC = dict(
    load=('ppo_trt.backends.registry', 'load'),                      # a runner of a backend for a run folder / ONNX
    available=('ppo_trt.backends.registry', 'available'),            # {backend: (ok, why not and the fix)}
    ControlLoop=('ppo_trt.measure.evaluate', 'ControlLoop'),         # the safe loop: deadline, fallback, events
    train_policy=('ppo_trt.train.sb3', 'train'),                     # train PPO (SB3) into a run folder
    export_onnx=('ppo_trt.export.deployment', 'export_run'),         # policy.onnx, checked against the trained model
    bench=('ppo_trt.measure.bench', 'bench'),                        # latency of each backend -> bench.json
    BenchSettings=('ppo_trt.measure.bench', 'BenchSettings'),        # what shapes a benchmark (bench's `settings`)
    evaluate=('ppo_trt.measure.evaluate', 'evaluate'),               # control quality per phase -> evaluate.json
    export_c=('ppo_trt.export.c_library', 'write_c_library'),        # the C library of policy.onnx (cc: built, tested)
)
__all__ = list(_PUBLIC)

def __getattr__(name):
    if name not in _PUBLIC: raise AttributeError(f"module 'ppo_trt' has no attribute {name!r}")
    import importlib
    module, attr = _PUBLIC[name]
    return getattr(importlib.import_module(module), attr)

def __dir__(): return sorted([*globals(), *_PUBLIC])
