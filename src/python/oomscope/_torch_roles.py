"""What holds PyTorch's memory, by role, measured from the objects rather than guessed from
allocation stacks (a closure-based loop such as Lightning's runs forward and backward inside
optimizer.step(), so a stack cannot tell activations from optimizer state):

  parameters       the optimizers' param groups and every nn.Parameter found (frozen ones too)
  gradients        their .grad
  optimizer_state  the tensors of each optimizer's .state

Each storage is counted once, on its own device (views, flat parameters and gradient buckets
share storages). The preload derives the rest: activations = allocated − the three, cache =
reserved − allocated.

Optimizers are known from the global step pre-hook (registered before a closure runs its
forward) and, until one has stepped, from one scan of the garbage collector's objects; the
Parameters from one scan at the first measure, and again at each OOM. Tensors are held by
weak reference, keyed by id (a tensor's == is elementwise: never in a WeakSet)."""

import gc
import os
import weakref

ENABLED = os.environ.get("OOMSCOPE_TORCH_ROLES", "1").strip() != "0"

_optimizers = {}  # id -> weakref.ref(optimizer)
_parameters = {}  # id -> weakref.ref(Parameter)
_scanned = False


def register_optimizer(optimizer):
    key = id(optimizer)
    if key not in _optimizers:
        _optimizers[key] = weakref.ref(optimizer, lambda _, key=key: _optimizers.pop(key, None))


def _register_parameter(p):
    key = id(p)
    if key not in _parameters:
        _parameters[key] = weakref.ref(p, lambda _, key=key: _parameters.pop(key, None))


def _scan(torch):
    """One pass over the collector's objects: every nn.Parameter, and every optimizer when
    none has stepped yet (an OOM in the first forward)."""
    global _scanned
    _scanned = True
    parameter = getattr(getattr(torch, "nn", None), "Parameter", None)
    optimizer = getattr(getattr(torch, "optim", None), "Optimizer", None)
    want_optimizers = not _optimizers and optimizer is not None
    for o in gc.get_objects():
        if parameter is not None and isinstance(o, parameter):
            _register_parameter(o)
        elif want_optimizers and isinstance(o, optimizer):
            register_optimizer(o)


def _alive(refs):
    out = []
    for ref in list(refs.values()):
        o = ref()
        if o is not None:
            out.append(o)
    return out


def measure(torch, device, rescan=False):
    """(parameters, gradients, optimizer_state) bytes on device, or None when there is
    nothing to name (no optimizer and no parameter found)."""
    if rescan or not _scanned:
        _scan(torch)
    optimizers = _alive(_optimizers)
    params = {id(p): p for p in _alive(_parameters)}
    for opt in optimizers:
        for group in getattr(opt, "param_groups", []):
            for p in group.get("params", []):
                params.setdefault(id(p), p)
    if not params and not optimizers:
        return None
    tensor = torch.Tensor
    seen = set()

    def size(t):
        if not isinstance(t, tensor) or not t.is_cuda or t.device.index != device:
            return 0
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key == 0 or key in seen:
            return 0
        seen.add(key)
        return storage.nbytes()

    parameters = sum(size(p) for p in params.values())
    gradients = sum(size(p.grad) for p in params.values() if p.grad is not None)
    state = 0
    for opt in optimizers:
        for per_param in list(getattr(opt, "state", {}).values()):
            values = per_param.values() if isinstance(per_param, dict) else (per_param,)
            state += sum(size(v) for v in values)
    return parameters, gradients, state


def line_keys(torch, device, rescan=False):
    """The device line's role keys, or "" when there is nothing to name, measuring failed, or
    OOMSCOPE_TORCH_ROLES=0."""
    if not ENABLED:
        return ""
    try:
        roles = measure(torch, device, rescan)
    except Exception:
        return ""
    if roles is None:
        return ""
    return f" parameters {roles[0]} gradients {roles[1]} optimizer_state {roles[2]}"
