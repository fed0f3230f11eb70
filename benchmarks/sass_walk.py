"""Count the machine instructions a warp executes along one path through a kernel (no GPU).

Usage::

    nvcc -std=c++17 -cubin -arch=sm_90 -lineinfo -o k.cubin cuda/fetch_decode.cu
    nvdisasm -c -g k.cubin > k.sass      # nvdisasm: PyPI's nvidia-cuda-nvdisasm
    python benchmarks/sass_walk.py k.sass ibp_fetch_decode_w4_o4 .L_x_5979 nnnnttnttt...

The listing is ``nvdisasm -c -g`` output (``-g``: each instruction's source line). The walk
starts at a label (or a hex address) of the named function and goes on until it comes back to
that label (a loop's head: one trip round the loop) or to ``--stop``, or reaches an
unconditional ``EXIT``. Every instruction met counts once, predicated ones included (they
issue whatever their predicate). An unconditional ``BRA`` is followed; ``BRA.DIV`` (taken only
when the warp has diverged) is not; each conditional branch takes the next decision, ``t``
(taken) or ``n`` (not). When the decisions run out at a conditional branch the walk stops
there and prints the count so far, the branch, its source line and the instructions before it,
so that a path can be built one decision at a time by reading the source.

This is a model of one lane's path (a branch that splits the warp is walked one way only), for
comparing versions of a kernel on the CPU, not a measurement of a GPU.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

_LINE = re.compile(r"^\s*//##.*line (\d+)")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_FUNCTION = re.compile(r"^\.text\.(\S+):")
_BRANCH = re.compile(r"^(@!?U?P\w+\s+)?BRA(\.\w+)?\s+(!?U?P\w+,\s*)?`\((\.L_x_\d+)\)")


@dataclass(frozen=True)
class Instruction:
    address: int
    text: str
    line: int  # source line (0: none given)


@dataclass
class Listing:
    """One function of an nvdisasm listing: its instructions and its labels' positions."""

    instructions: list[Instruction]
    labels: dict[str, int]

    def position(self, where: str) -> int:
        """The index of a label (``.L_x_N``) or of a hex address."""
        if where.startswith(".L"):
            if where not in self.labels:
                raise SystemExit(f"sass_walk: no label {where} in the function")
            return self.labels[where]
        address = int(where, 16)
        for i, ins in enumerate(self.instructions):
            if ins.address == address:
                return i
        raise SystemExit(f"sass_walk: no instruction at {where}")


def read_listing(text: str, function: str) -> Listing:
    """The instructions and labels of ``function`` in an ``nvdisasm -c -g`` listing."""
    instructions: list[Instruction] = []
    labels: dict[str, int] = {}
    inside, line = False, 0
    for raw in text.splitlines():
        name = _FUNCTION.match(raw)
        if name:
            if inside:
                break
            inside = name.group(1) == function
            continue
        if not inside:
            continue
        if m := _LINE.match(raw):
            line = int(m.group(1))
        elif m := _LABEL.match(raw):
            labels[m.group(1)] = len(instructions)
        elif m := _INSTRUCTION.match(raw):
            instructions.append(Instruction(int(m.group(1), 16), m.group(2), line))
    if not instructions:
        raise SystemExit(f"sass_walk: no function {function} in the listing")
    return Listing(instructions, labels)


@dataclass(frozen=True)
class Walk:
    count: int  # instructions executed, the last one included
    end: str  # "loop" (back at the start), "stop", "exit" or "decide" (decisions ran out)
    at: Instruction  # the last instruction executed
    unused: str  # decisions left over


def walk(listing: Listing, start: str, decisions: str, stop: str | None = None) -> Walk:
    """Walk ``listing`` from ``start`` along ``decisions`` (see the module's docstring)."""
    if set(decisions) - {"t", "n"}:
        raise SystemExit(f"sass_walk: decisions are t or n, got {decisions!r}")
    code = listing.instructions
    first = listing.position(start)
    last = None if stop is None else listing.position(stop)
    pc, count, left = first, 0, list(decisions)
    while True:
        if pc >= len(code):
            raise SystemExit("sass_walk: the walk ran past the function's end")
        ins = code[pc]
        count += 1
        branch = _BRANCH.match(ins.text)
        if ins.text == "EXIT":
            return Walk(count, "exit", ins, "".join(left))
        if branch is None or branch.group(2) == ".DIV":
            pc += 1
        elif branch.group(1) or branch.group(3):  # conditional
            if not left:
                return Walk(count, "decide", ins, "")
            pc = listing.labels[branch.group(4)] if left.pop(0) == "t" else pc + 1
        else:
            pc = listing.labels[branch.group(4)]
        if pc == (first if last is None else last):
            return Walk(count, "stop" if last is not None else "loop", ins, "".join(left))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Prints the count, and the branch where a decision is needed; writes no file.",
    )
    parser.add_argument("listing", type=Path, help="nvdisasm -c -g output")
    parser.add_argument("function", help="the kernel's name, e.g. ibp_fetch_decode_w4_o4")
    parser.add_argument("start", help="a label (.L_x_N) or hex address to start from")
    parser.add_argument("decisions", nargs="?", default="", help="t/n per conditional branch")
    parser.add_argument("--stop", help="a label or hex address to stop at (default: start)")
    parser.add_argument("--source", type=Path, help="the .cu file, to show the branch's line")
    args = parser.parse_args(argv)
    listing = read_listing(args.listing.read_text(), args.function)
    result = walk(listing, args.start, args.decisions, args.stop)
    print(f"{result.count} instructions, {result.end} at {result.at.address:#x}: {result.at.text}")
    if result.unused:
        print(f"decisions left over: {result.unused}")
    if result.end == "decide":
        if args.source and result.at.line:
            source = args.source.read_text().splitlines()[result.at.line - 1].strip()
            print(f"  line {result.at.line}: {source}")
        i = listing.instructions.index(result.at)
        for ins in listing.instructions[max(0, i - 6) : i]:
            print(f"  {ins.address:#x} (line {ins.line}) {ins.text}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
