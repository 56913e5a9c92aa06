"TorchScript actors as rsl_rl / Isaac Lab export them (`_TorchPolicyExporter`, EmpiricalNormalization), for the tests."
import torch

class Normalizer(torch.nn.Module):
    "rsl_rl's EmpiricalNormalization as it scripts: statistics in buffers, an update the exporter never runs."
    def __init__(self, n, eps=1e-2, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.eps = eps
        self.register_buffer('_mean', torch.randn(1, n, generator=g))
        self.register_buffer('_var', torch.rand(1, n, generator=g) + .5)
        self.register_buffer('_std', self._var.sqrt())
        self.register_buffer('count', torch.tensor(0))
    def forward(self, x):
        if self.training: self.update(x)
        return (x - self._mean) / (self._std + self.eps)
    @torch.jit.unused
    def update(self, x): self.count += x.shape[0]

class Exporter(torch.nn.Module):
    "Isaac Lab / rsl_rl's _TorchPolicyExporter, MLP form: actor(normalizer(x))."
    def __init__(self, actor, normalizer=None):
        super().__init__()
        self.is_recurrent = False
        self.actor = actor
        self.normalizer = normalizer if normalizer is not None else torch.nn.Identity()
    def forward(self, x): return self.actor(self.normalizer(x))
    @torch.jit.export
    def reset(self): pass

def mlp(widths, act=torch.nn.ELU, seed=0):
    "An nn.Sequential of Linear layers of `widths` with `act` between them."
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers += [torch.nn.Linear(a, b)] + ([act()] if i < len(widths) - 2 else [])
    return torch.nn.Sequential(*layers)

def save_exporter(path, widths, normalize=True, seed=0):
    "Script and save an Exporter of an MLP of `widths` (with the normaliser or Identity) at `path`; the module."
    m = Exporter(mlp(widths, seed=seed), Normalizer(widths[0], seed=seed) if normalize else None).eval()
    torch.jit.script(m).save(str(path))
    return m
