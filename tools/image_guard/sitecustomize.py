"""The GPU image's imports, on the CPU box: with this folder on PYTHONPATH (tools/gpu_session.sh puts it there when
KIT_IMAGE_GUARD=1), a top-level module that installed distributions provide is found only when one of them is on the
GPU machines' image (tools/gpu_image.txt) or carried there (tools/gpu_carry.txt); any other is absent, exactly as there
(`import` raises ModuleNotFoundError, `importlib.util.find_spec` returns None, importlib.metadata does not list it),
so the rehearsal meets a dependency the image lacks where there is time to fix it. The standard library, modules of
no distribution (this checkout, conftest) and ppo_trt itself are always found. Each module hidden is appended to
$KIT_IMAGE_HIDDEN (a file), when set."""
import importlib.abc, importlib.metadata as md, os, re, sys


def _norm(name): return re.sub(r'[-_.]+', '-', name).lower()


def _allowed(files):
    names = {'ppo-trt'}
    for f in files:
        with open(f) as fh: names |= {_norm(line.split('==')[0].strip()) for line in fh if line.strip() and not line.startswith('#')}
    return names


class ImageGuard(importlib.abc.MetaPathFinder):
    "The finders of sys.meta_path, asked only for modules of the image's distributions."
    def __init__(self, finders, allowed):
        self.finders, self.allowed, self.owners, self.hidden = finders, allowed, md.packages_distributions(), set()
    def find_spec(self, name, path=None, target=None):
        owners = self.owners.get(name) if '.' not in name and name not in sys.stdlib_module_names else None
        if owners and not any(_norm(o) in self.allowed for o in owners):
            if name not in self.hidden and os.environ.get('KIT_IMAGE_HIDDEN'):
                with open(os.environ['KIT_IMAGE_HIDDEN'], 'a') as f: f.write(f"{name} {','.join(sorted(owners))}\n")
            self.hidden.add(name)
            return None
        for finder in self.finders:
            spec = finder.find_spec(name, path, target) if hasattr(finder, 'find_spec') else None
            if spec is not None: return spec
        return None
    def find_distributions(self, context=None):
        "importlib.metadata sees the image's distributions alone."
        from importlib.metadata import DistributionFinder
        for finder in self.finders:
            if not hasattr(finder, 'find_distributions'): continue
            for d in finder.find_distributions(context or DistributionFinder.Context()):
                if _norm(d.metadata['Name'] or '') in self.allowed: yield d
    def invalidate_caches(self):
        for finder in self.finders:
            if hasattr(finder, 'invalidate_caches'): finder.invalidate_caches()


_files = [f for f in os.environ.get('KIT_IMAGE_ALLOW', '').split(os.pathsep) if f]
if _files: sys.meta_path[:] = [ImageGuard(list(sys.meta_path), _allowed(_files))]
