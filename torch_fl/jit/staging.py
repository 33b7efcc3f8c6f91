"""Splitting a fused host kernel's dense loop into stages at chained math calls.

A fused kernel whose math calls depend on each other (`tanh(x * sigmoid(x))`) is one long
dependency chain per element: each libmvec call waits for the one before, and a call is
too long for the CPU to overlap it with the next vector's chain. Cut into stages over
blocks of `BLOCK` elements (stage k holds the calls that depend on k earlier calls, plus
the arithmetic around them), every loop's vectors are independent and the calls overlap.
pointwise_mlp's forward formula, one thread, 1M floats: 2.8-2.9 ns per element as one
loop, 2.0-2.1 ns in three stages (about 2 KB of temporaries per cross-stage value,
L1-resident). The expressions and their order are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch_fl.jit.expr import E, render, var

BLOCK = 256  # elements per block: 1 KB per float temporary (256 and 512 measured best)


@dataclass
class Stage:
    """One loop of a staged kernel: what it loads, computes, hands on and stores."""

    inputs: set = field(default_factory=set)  # input indices k (a<k>) it loads
    reads: list = field(default_factory=list)  # temporaries of earlier stages it reads
    lets: list = field(default_factory=list)  # (name, E)
    writes: list = field(default_factory=list)  # its temporaries later stages read
    stores: list = field(default_factory=list)  # (output index, E)


def _names_in(e, out: set) -> set:
    stack = [e]
    while stack:
        x = stack.pop()
        if not isinstance(x, E):
            continue
        if x.op == "var":
            out.add(x.args[0])
        else:
            stack.extend(x.args)
    return out


def hoist_calls(lets: list, stores: list, is_math, ctype) -> tuple[list, list, set]:
    """lets and stores with every math call (`is_math(fn)`) bound to its own let `m<j>`,
    equal calls (same rendered text) bound once; also returns the set of those names."""
    memo: dict = {}  # id(node) -> rewritten node
    by_text: dict = {}  # rendered call -> its var
    new_lets: list = []
    calls: set = set()

    def rewrite(e):
        if not isinstance(e, E) or e.op in ("var", "lit"):
            return e
        done = memo.get(id(e))
        if done is not None:
            return done
        node = E(e.op, tuple(rewrite(a) for a in e.args), e.dt)
        if node.op == "call" and is_math(node.args[0]):
            text = render(node, ctype)
            if text not in by_text:
                name = f"call{len(by_text)}"
                by_text[text] = var(name, node.dt)
                new_lets.append((name, node))
                calls.add(name)
            node = by_text[text]
        memo[id(e)] = node
        return node

    for name, e in lets:
        e2 = rewrite(e)
        new_lets.append((name, e2))
    new_stores = [(i, rewrite(e)) for i, e in stores]
    return new_lets, new_stores, calls


def stages(lets: list, stores: list, calls: set) -> list[Stage] | None:
    """The stages of a kernel whose math calls are bound to lets (`calls`: their names), or
    None when no call depends on another (one loop is as good).

    Only call results cross stages (through temporaries); the arithmetic a stage needs is
    recomputed there from its inputs and those results: a few multiplies per element cost
    less than writing and reading back every intermediate (pointwise_mlp's backward kernel
    was slower than one loop when stages handed on all of them)."""
    deps: dict = {}
    depth: dict = {}  # name -> math calls on its longest input path, itself included
    for name, e in lets:
        deps[name] = _names_in(e, set()) & depth.keys()
        d = max((depth[x] for x in deps[name]), default=0)
        depth[name] = d + 1 if name in calls else d
    where = {name: depth[name] - 1 for name in calls}  # a call runs after those it depends on
    n = 1 + max(where.values(), default=0)
    if n < 2:
        return None
    out = [Stage() for _ in range(n)]
    roots: list = [set() for _ in range(n)]  # what each stage must compute
    for name in calls:
        roots[where[name]].add(name)

    def last_call_stage(names) -> int:
        seen, stack, best = set(), list(names), 0
        while stack:
            x = stack.pop()
            if x in seen or x not in deps:
                continue
            seen.add(x)
            if x in where:
                best = max(best, where[x])
            else:
                stack.extend(deps[x])
        return best

    for i, e in stores:
        refs = _names_in(e, set())
        out[last_call_stage(refs & deps.keys())].stores.append((i, e))
    handed: set = set()
    for s, st in enumerate(out):
        refs = set(roots[s])
        for _, e in st.stores:
            refs |= _names_in(e, set())
        wanted, stack = set(), [x for x in refs if x in deps]
        while stack:  # the stage's lets: everything its roots reach, stopping at earlier calls
            x = stack.pop()
            if x in wanted:
                continue
            wanted.add(x)
            if x in where and where[x] != s:
                continue
            stack.extend(deps[x])
        st.reads = sorted(x for x in wanted if x in where and where[x] < s)
        st.lets = [(name, e) for name, e in lets if name in wanted and name not in st.reads]
        used = set(refs)
        for _, e in st.lets:
            used |= _names_in(e, set())
        st.inputs = {int(x[1:]) for x in used if x.startswith("a") and x[1:].isdigit()}
        handed.update(st.reads)
    for st in out:
        st.writes = [name for name, _ in st.lets if name in handed and name in where]
    return out
