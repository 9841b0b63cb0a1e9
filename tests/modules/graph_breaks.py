"""Small bf16 models with a deliberate graph break in forward, as users write them: a `.item()`,
a branch on a tensor (`if y.isinf().any()`), a `print`, and one whose outputs include an `argmax`
(int64). Each holds the same compiler difference after the break: a fused sigmoid gate
`p(y) * sigmoid(g(y))` that Inductor computes in fp32 where eager rounds to bf16 in between.
make_fx cannot trace `.item()` or the branch; Dynamo breaks the graph there. The `floor_*` models
put the same breaks in front of a floor division that Inductor gets wrong (below)."""

import torch


class _Gate(torch.nn.Module):
    def __init__(self, dim: int = 64):
        super().__init__()
        self.p = torch.nn.Linear(dim, dim)
        self.g = torch.nn.Linear(dim, dim)

    def gate(self, y):
        return self.p(y) * self.g(y).sigmoid()


class ItemScale(_Gate):
    def forward(self, x):
        scale = x.abs().max().item()  # graph break: a Python float from a tensor
        return self.gate(x / scale)


class InfGuard(_Gate):
    def forward(self, x):
        y = x * 2
        if y.isinf().any():  # graph break: data-dependent control flow
            y = torch.nan_to_num(y)
        return self.gate(y)


class Printing(_Gate):
    def forward(self, x):
        y = x * 2
        print("divfuzz test: forward ran")  # graph break: a side effect
        return self.gate(y)


class ArgmaxHead(_Gate):
    def forward(self, x):
        y = self.gate(x)
        return y, y.argmax(-1)


def _case(cls):
    torch.manual_seed(0)
    return cls().to(torch.bfloat16), (torch.randn(256, 64, dtype=torch.bfloat16),)


def item_scale():
    return _case(ItemScale)


def inf_guard():
    return _case(InfGuard)


def printing():
    return _case(Printing)


def argmax_head():
    return _case(ArgmaxHead)


def token_ids_and_kwargs():
    """Keyword inputs, a dict and integer token ids."""

    class Embedded(_Gate):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(32, 64)

        def forward(self, ids, *, extra):
            return {"gated": self.gate(self.embed(ids) + extra["bias"])}

    torch.manual_seed(0)
    ids = torch.randint(0, 32, (4, 64))
    return Embedded().to(torch.bfloat16), (ids,), {"extra": {"bias": torch.randn(64, dtype=torch.bfloat16)}}


def no_tensors():
    return _case(ItemScale)[0], (3, "text")


# The same breaks in front of a divergence that the fp64 judge calls a bug on the CPU: Inductor's
# floor division by 0.1 is off by one on some exact tenths where eager and fp64 agree (torch 2.13
# CPU; `floordiv_fp32.py`). The fused bf16 gate above is closer to fp64 compiled than eager, which
# the judge calls noise, so a test of which graph gets reduced needs a finding like this one.
def _floor_tenths(y):
    return torch.div(torch.relu(y) - torch.relu(-y), 0.1, rounding_mode="floor")


def _tenths():
    x = torch.arange(-2000, 2000, dtype=torch.float32) * 0.1
    return (torch.cat([x, x.nextafter(torch.tensor(1e9)), x.nextafter(torch.tensor(-1e9))]),)


class FloorAfterItem(torch.nn.Module):
    def forward(self, x):
        scale = x.abs().max().item()  # graph break: a Python float from a tensor
        return _floor_tenths(x) * scale


class FloorAfterBranch(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x) - torch.relu(-x)  # exact: y == x
        if y.isinf().any():  # graph break: data-dependent control flow
            y = torch.nan_to_num(y)
        return _floor_tenths(y)


class FloorAfterPrint(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x) - torch.relu(-x)
        print("divfuzz test: forward ran")  # graph break: a side effect
        return _floor_tenths(y)


class TwoFloors(torch.nn.Module):
    """A floor division on either side of a `print`: each captured graph diverges on its own
    (the second divides the same tenths again and adds the first's whole numbers)."""

    def forward(self, x):
        y = _floor_tenths(x)
        print("divfuzz test: between the divisions")  # graph break
        return y + _floor_tenths(x)


def floor_after_item():
    return FloorAfterItem(), _tenths()


def floor_after_branch():
    return FloorAfterBranch(), _tenths()


def floor_after_print():
    return FloorAfterPrint(), _tenths()


def two_floors():
    return TwoFloors(), _tenths()
