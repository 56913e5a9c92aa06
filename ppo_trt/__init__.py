__version__ = "0.1.0"

# The public surface, imported on first use so that `import ppo_trt` stays fast: name -> module that defines it.
_PUBLIC = dict(load='ppo_trt.backends.registry', available='ppo_trt.backends.registry',
               ControlLoop='ppo_trt.measure.evaluate')

def __getattr__(name):
    if name not in _PUBLIC: raise AttributeError(f"module 'ppo_trt' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(_PUBLIC[name]), name)

def __dir__(): return sorted([*globals(), *_PUBLIC])
