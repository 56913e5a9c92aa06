"""Actors as other trainers make them, built with torch and exported with torch.onnx inside the tests (no committed
binaries): an Isaac Lab / rsl_rl MLP (ELU, 512-256-128), a CleanRL MLP (tanh, a normaliser and action scaling), one
layer of every activation, LayerNorm (the opset-17 operator and the decomposed form older exporters write), wide
actors, and recurrent actors (a CleanRL-like GRU, an rsl_rl-like LSTM) packed into one input [obs | state] and one
output [action | state'], as the front door packs them."""
import io, json, warnings
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

torch = None

def _torch():
    global torch
    if torch is None:
        import torch as t
        torch = t
    return torch


def mlp(widths, act='ELU', seed=0, norm=None, scale=None, clip=None, layer_norm=False):
    "An MLP of `widths` with activation `act` (name in torch.nn), an optional normaliser, LayerNorm, scale and clip."
    t = _torch(); nn = t.nn
    t.manual_seed(seed)
    class Actor(nn.Module):
        def __init__(self):
            super().__init__()
            layers = []
            for k, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
                layers.append(nn.Linear(a, b))
                if k < len(widths) - 2:
                    if layer_norm: layers.append(nn.LayerNorm(b))
                    layers.append(getattr(nn, act)() if isinstance(act, str) else act[k % len(act)]())
            self.net = nn.Sequential(*layers)
            if norm: self.register_buffer('mean', t.randn(widths[0])); self.register_buffer('std', t.rand(widths[0]) + .5)
            if scale: self.register_buffer('scale', t.rand(widths[-1]) + .5); self.register_buffer('offset', t.randn(widths[-1]))
        def forward(self, x):
            if norm: x = (x - self.mean) / self.std
            x = self.net(x)
            if scale: x = x * self.scale + self.offset
            return x.clamp(-clip, clip) if clip else x
    return Actor().eval()


def gru_actor(obs=10, hidden=32, act=3, seed=0):
    "CleanRL-like: a tanh encoder, one GRU layer, a linear head; (obs, h_in) -> (action, h_out)."
    t = _torch(); nn = t.nn
    t.manual_seed(seed)
    class Actor(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.rnn = nn.Sequential(nn.Linear(obs, 64), nn.Tanh()), nn.GRU(64, hidden)
            self.head = nn.Linear(hidden, act)
        def forward(self, x, h):
            y, h = self.rnn(self.enc(x).unsqueeze(0), h)
            return self.head(y.squeeze(0)), h
    return Actor().eval()


def lstm_actor(obs=10, hidden=32, act=3, seed=0):
    "rsl_rl-like (its exporter's forward): normalise, one LSTM layer, an ELU MLP; (obs, h_in, c_in) -> (action, h, c)."
    t = _torch(); nn = t.nn
    t.manual_seed(seed)
    class Actor(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(obs, hidden)
            self.actor = nn.Sequential(nn.Linear(hidden, 64), nn.ELU(), nn.Linear(64, act))
            self.register_buffer('mean', t.randn(obs)); self.register_buffer('std', t.rand(obs) + .5)
        def forward(self, x, h, c):
            y, (h, c) = self.rnn(((x - self.mean) / self.std).unsqueeze(0), (h, c))
            return self.actor(y.squeeze(0)), h, c
    return Actor().eval()


def export(module, shapes, names, outputs, dynamo=False, opset=17):
    "The ONNX model torch.onnx writes for `module` (inputs of `shapes`, batch axis dynamic), as a ModelProto."
    t = _torch()
    args = tuple(t.zeros(s) for s in shapes)  # a batch of 2: torch specialises a batch of 1
    batch_axis = [0 if len(s) == 2 else 1 for s in shapes]
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        if dynamo:
            B = t.export.Dim('B')
            t.onnx.export(module, args, f, input_names=names, output_names=outputs, dynamo=True, opset_version=opset,
                          dynamic_shapes=tuple({a: B} for a in batch_axis), verbose=False)
        else:
            axes = {n: {a: 'B'} for n, a in zip(names, batch_axis)}
            axes.update({n: {0 if k == 0 else 1: 'B'} for k, n in enumerate(outputs)})
            t.onnx.export(module, args, f, input_names=names, output_names=outputs, dynamo=False,
                          opset_version=opset, dynamic_axes=axes)
    return onnx.load_from_string(f.getvalue())


def pack(model):
    "One input `obs` = [observation | h (| c)] and one output `action` = [action | h' (| c')], as the front door packs."
    g = model.graph
    ins, outs = list(g.input), list(g.output)
    width = lambda vi: vi.type.tensor_type.shape.dim[-1].dim_value
    nodes, tail, inits, parts, at = [], [], [], [], 0
    const = lambda name, v: inits.append(numpy_helper.from_array(np.array(v, np.int64), name)) or name
    for k, vi in enumerate(ins):
        w = width(vi)
        cut = [const(f'pk_s{k}', [at]), const(f'pk_e{k}', [at + w]), const(f'pk_a{k}', [1])]
        if k == 0: nodes.append(helper.make_node('Slice', ['obs', *cut], [vi.name], name=f'pk_slice{k}'))
        else:
            nodes += [helper.make_node('Slice', ['obs', *cut], [vi.name + '_2d'], name=f'pk_slice{k}'),
                      helper.make_node('Unsqueeze', [vi.name + '_2d', const(f'pk_u{k}', [0])], [vi.name],
                                       name=f'pk_unsq{k}')]
        at += w
    for k, vi in enumerate(outs):
        if k == 0: parts.append(vi.name); continue
        tail.append(helper.make_node('Squeeze', [vi.name, const(f'pk_q{k}', [0])], [vi.name + '_2d'], name=f'pk_sq{k}'))
        parts.append(vi.name + '_2d')
    tail.append(helper.make_node('Concat', parts, ['action'], axis=1, name='pk_concat'))
    graph = helper.make_graph(nodes + list(g.node) + tail, g.name,
                              [helper.make_tensor_value_info('obs', TensorProto.FLOAT, ['B', at])],
                              [helper.make_tensor_value_info('action', TensorProto.FLOAT,
                                                             ['B', sum(width(o) for o in outs)])],
                              list(g.initializer) + inits)
    return helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)


def with_metadata(model, path):
    "Save `model` to `path` with the three metadata keys today's `backends.load` wants (the front door infers them)."
    m = onnx.ModelProto(); m.CopyFrom(model)
    dim = lambda vi: vi.type.tensor_type.shape.dim[1].dim_value
    for k, v in dict(env_id='Foreign-v0', obs_dim=dim(m.graph.input[0]), act_dim=dim(m.graph.output[0])).items():
        p = m.metadata_props.add(); p.key, p.value = k, json.dumps(v)
    onnx.save(m, str(path))
    return path


def recurrent(name):
    "A packed recurrent actor: 'gru' / 'lstm' (legacy exporter, opset 17) or 'gru-dynamo' / 'lstm-dynamo' (opset 18)."
    kind, dynamo = name.split('-')[0], name.endswith('dynamo')
    opset = 18 if dynamo else 17
    if kind == 'gru':
        return pack(export(gru_actor(), [(2, 10), (1, 2, 32)], ['x_in', 'h_in'], ['act', 'h_out'], dynamo, opset))
    return pack(export(lstm_actor(), [(2, 10), (1, 2, 32), (1, 2, 32)], ['x_in', 'h_in', 'c_in'],
                       ['act', 'h_out', 'c_out'], dynamo, opset))


def feedforward(name):
    "The feed-forward actors the tests run, by name."
    if name == 'isaac-elu':  # Isaac Lab / rsl_rl: obs -> actions, ELU, 512-256-128
        return export(mlp((48, 512, 256, 128, 12), 'ELU'), [(2, 48)], ['obs'], ['action'])
    if name == 'cleanrl-tanh':  # a normaliser as Sub / Div, tanh, action scale and offset, Clip
        return export(mlp((17, 64, 64, 6), 'Tanh', norm=True, scale=True, clip=1.0), [(2, 17)], ['obs'], ['action'])
    if name == 'every-activation':  # one hidden layer of each, Softplus as torch's dynamo exporter writes it
        acts = ['Tanh', 'ELU', 'ReLU', 'LeakyReLU', 'SELU', 'Sigmoid', 'SiLU', 'Softplus']
        t = _torch()
        return export(mlp((9,) + (24,) * 8 + (4,), [getattr(t.nn, a) for a in acts]), [(2, 9)], ['obs'], ['action'],
                      dynamo=True, opset=18)
    if name == 'every-activation-legacy':
        acts = ['Tanh', 'ELU', 'ReLU', 'LeakyReLU', 'SELU', 'Sigmoid', 'SiLU', 'Softplus']
        t = _torch()
        return export(mlp((9,) + (24,) * 8 + (4,), [getattr(t.nn, a) for a in acts]), [(2, 9)], ['obs'], ['action'])
    if name == 'layernorm-op':  # opset 17: the LayerNormalization operator
        return export(mlp((12, 64, 64, 5), 'SiLU', layer_norm=True), [(2, 12)], ['obs'], ['action'], opset=17)
    if name == 'layernorm-decomposed':  # opset 14: ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add
        return export(mlp((12, 64, 64, 5), 'ELU', layer_norm=True), [(2, 12)], ['obs'], ['action'], opset=14)
    if name == 'wide-1024':  # 4 hidden layers of 1024
        return export(mlp((64, 1024, 1024, 1024, 1024, 8), 'ReLU'), [(2, 64)], ['obs'], ['action'])
    raise KeyError(name)


def gru_onnx(lbr=0, obs=6, hidden=8, act=2, seed=0):
    "A packed GRU actor written with onnx.helper, `linear_before_reset` as asked (torch writes 1, other exporters 0)."
    rng = np.random.default_rng(seed)
    f = lambda *s: (rng.normal(size=s) * 0.5).astype(np.float32)
    i64 = lambda v: np.array(v, np.int64)
    inits = dict(W=f(1, 3 * hidden, obs), R=f(1, 3 * hidden, hidden), Bias=f(1, 6 * hidden), Wh=f(hidden, act),
                 bh=f(act), s0=i64([0]), s1=i64([obs]), s2=i64([obs + hidden]), ax=i64([1]), z=i64([0]))
    nodes = [helper.make_node('Slice', ['obs', 's0', 's1', 'ax'], ['x2']),
             helper.make_node('Slice', ['obs', 's1', 's2', 'ax'], ['h2']),
             helper.make_node('Unsqueeze', ['x2', 'z'], ['x3']), helper.make_node('Unsqueeze', ['h2', 'z'], ['h3']),
             helper.make_node('GRU', ['x3', 'W', 'R', 'Bias', '', 'h3'], ['', 'hn3'], hidden_size=hidden,
                              linear_before_reset=lbr),
             helper.make_node('Squeeze', ['hn3', 'z'], ['hn']), helper.make_node('MatMul', ['hn', 'Wh'], ['m']),
             helper.make_node('Add', ['m', 'bh'], ['a']), helper.make_node('Concat', ['a', 'hn'], ['action'], axis=1)]
    g = helper.make_graph(nodes, 'gru', [helper.make_tensor_value_info('obs', TensorProto.FLOAT, ['B', obs + hidden])],
                          [helper.make_tensor_value_info('action', TensorProto.FLOAT, ['B', act + hidden])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)], ir_version=9)


def layernorm_opset18(obs=7, width=16, act=3, seed=0):
    "The decomposed LayerNorm with ReduceMean's axes as an input (opset 18), Mul(c, c) and Mul by Reciprocal(Sqrt)."
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.normal(size=s).astype(np.float32)
    inits = dict(W1=f(obs, width), b1=f(width), g=f(width), beta=f(width), W2=f(width, act), eps=np.float32(1e-5),
                 axes=np.array([-1], np.int64))
    n = helper.make_node
    nodes = [n('MatMul', ['obs', 'W1'], ['m']), n('Add', ['m', 'b1'], ['x']), n('ReduceMean', ['x', 'axes'], ['mu']),
             n('Sub', ['x', 'mu'], ['c']), n('Mul', ['c', 'c'], ['c2']), n('ReduceMean', ['c2', 'axes'], ['var']),
             n('Add', ['var', 'eps'], ['ve']), n('Sqrt', ['ve'], ['sd']), n('Reciprocal', ['sd'], ['rs']),
             n('Mul', ['c', 'rs'], ['y']), n('Mul', ['y', 'g'], ['yg']), n('Add', ['yg', 'beta'], ['yb']),
             n('Tanh', ['yb'], ['t']), n('MatMul', ['t', 'W2'], ['action'])]
    g = helper.make_graph(nodes, 'ln18', [helper.make_tensor_value_info('obs', TensorProto.FLOAT, ['B', obs])],
                          [helper.make_tensor_value_info('action', TensorProto.FLOAT, ['B', act])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid('', 18)], ir_version=9)

