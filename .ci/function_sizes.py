"""List the longest functions of a source tree with their parameter counts (issue 43's evidence).

    python .ci/function_sizes.py eve_search --top 15
    python .ci/function_sizes.py eve_search --max-lines 60 --max-params 8   # exit 1 past either limit

Lines are lines of code in the function's body: blank lines, comments and the docstring are not
counted. Parameters are all named parameters except ``self`` and ``cls``; ``*args`` and
``**kwargs`` count as one each.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from pathlib import Path


def code_lines(source: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of the body that hold code: not blank, not only a comment, not the docstring."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        skip = set(range(body[0].lineno, body[0].end_lineno + 1))
        body = body[1:]
    else:
        skip = set()
    if not body:
        return 0
    first, last = body[0].lineno, max(n.end_lineno for n in body)
    lines = source.splitlines()[first - 1:last]
    code = set()
    tokens = tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline)
    ignored = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
               tokenize.ENDMARKER}
    for tok in tokens:
        if tok.type not in ignored:
            for row in range(tok.start[0], tok.end[0] + 1):
                code.add(row + first - 1)
    return len(code - skip)


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    count = len([n for n in names if n not in ("self", "cls")])
    return count + (a.vararg is not None) + (a.kwarg is not None)


def functions(root: Path):
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        tree = ast.parse(source)
        stack = [(tree, "")]
        while stack:
            parent, prefix = stack.pop()
            for node in ast.iter_child_nodes(parent):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = f"{prefix}{node.name}"
                    yield f"{path}:{node.lineno}", name, code_lines(source, node), parameters(node)
                    stack.append((node, name + "."))
                elif isinstance(node, ast.ClassDef):
                    stack.append((node, f"{prefix}{node.name}."))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--max-lines", type=int)
    parser.add_argument("--max-params", type=int)
    args = parser.parse_args(argv)
    found = list(functions(args.root))
    print(f"{'lines':>5} {'params':>6}  function")
    for where, name, lines, params in sorted(found, key=lambda f: (-f[2], f[0]))[:args.top]:
        print(f"{lines:>5} {params:>6}  {name}  ({where})")
    print(f"\nmost parameters: " + ", ".join(
        f"{name} {params}" for _, name, _, params in sorted(found, key=lambda f: -f[3])[:5]))
    over = [f for f in found if (args.max_lines and f[2] > args.max_lines)
            or (args.max_params and f[3] > args.max_params)]
    if over:
        print(f"\n{len(over)} past the limits:")
        for where, name, lines, params in over:
            print(f"  {name}: {lines} lines, {params} parameters ({where})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
