# Ground truth for mlprof's line-table decoder (tests/unit/test_python_frames.cpp).
#
# Run by each installed interpreter (3.8 .. 3.13). Compiles a corpus of tricky code (plus a few
# stdlib modules) and, for every code object reachable through co_consts, prints:
#   C <format> <co_firstlineno> <line table as hex, '-' if empty> <qualified name without spaces>
#   P <line per 2-byte code unit; 'N' = no line>  (<=3.9: dis.findlinestarts semantics, 3.10: co_lines(),
#                                                    3.11+: co_positions())
#   L <line per 2-byte code unit from co_lines()>  (3.11+ only: the ranges PyCode_Addr2Line walks)
# Format: 0 = co_lnotab (<=3.9), 1 = 3.10 co_linetable, 2 = 3.11+ location table.
# The last line is "E <code objects> <code units>".
# Works on Python 3.8+ (no newer syntax in this file; newer syntax only inside corpus strings).
import importlib.util
import sys

V = sys.version_info[:2]

SNIPPETS = []  # (minimum version, source)


def snippet(min_version, source):
    SNIPPETS.append((min_version, source))


snippet((3, 8), '''
import os
def simple(a, b):
    c = a + b
    return c

x = simple(1,
           2)
''')

snippet((3, 8), '''
def multi(x,
          y=1,
          *args,
          **kw):
    result = (x +
              y *
              sum(args))
    s = f"""{x}
    {y!r:>{10}}"""
    if (x and
        y or
        not kw):
        return [i
                for i in range(10)
                if i % 2]
    d = {
        'a': 1,
        'b': lambda q: (q +
                         1),
    }
    return d['b'](
        result,
    ).attr[
        0
    ]
''')

snippet((3, 8), '''
def deco(f):
    return f
def deco2(arg):
    def inner(f):
        return f
    return inner
@deco
@deco2(
    1)
class K(object):
    attr = 1
    @property
    def p(self):
        return self.attr
    @staticmethod
    def s(*a): return a
    @deco2(lambda: (yield))
    def __init__(self, /, a, *, b=2):
        super().__init__()
        self.x = [y for y in range(3)]
        class Inner:
            def m(self):
                return __class__
''')

snippet((3, 8), '''
def gens(n):
    yield from range(n)
    x = yield 1
    g = (i * j for i in range(n)
         for j in range(i) if j)
    s = {k: v for k, v in zip(range(3),
                              range(3))}
    st = {i for i in
          range(n)}
    if (y := len(st)) > 2:
        return y
    return sum(g) + len(s) + len(st)

def closures():
    a = 1
    def f():
        nonlocal a
        a += 1
        def g():
            global G
            G = a
            return lambda: a
        return g
    return f
''')

snippet((3, 8), '''
import asyncio
async def agen():
    for i in range(3):
        yield i
        await asyncio.sleep(0)
async def coro(x):
    async with x as y, \\
               x as z:
        async for z in agen():
            await y(z)
        else:
            pass
    r = [a async for a in agen()]
    g = (await a for a in x)
    return await x
''')

snippet((3, 8), '''
def exc(f):
    try:
        f()
    except (ValueError,
            TypeError) as e:
        print(e)
        raise
    except Exception:
        pass
    else:
        return 1
    finally:
        print("done")
    with open(f) as a, \\
         open(f) as b:
        return a.read() + b.read()

def nested():
    for i in range(10):
        try:
            if i: continue
            while True:
                try:
                    break
                finally:
                    pass
        except:
            raise RuntimeError(
                "x") from None
        finally:
            return i
    else:
        return -1

def loops(n):
    total = 0
    while n > 0:
        n -= 1
        if n % 3 == 0:
            continue
        for j in range(n):
            if j > 10: break
            total += j
        else:
            total -= 1
    assert total >= 0, (
        "negative")
    del total
    return (
        n
    )
''')

snippet((3, 10), '''
class Point:
    __match_args__ = ("x", "y")
    def __init__(self, x, y):
        self.x = x
        self.y = y
def m(cmd):
    match cmd.split():
        case [action]:
            return action
        case [action, obj] if obj:
            return obj
        case {"k": v, **rest}:
            return v
        case Point(x=0, y=yy) | Point(x=yy, y=0):
            return yy
        case [1, 2, *others] | (3 | 4 as others):
            return others
        case str() as s if (
                len(s) > 3):
            return s
        case _:
            return None
''')

snippet((3, 11), '''
def eg():
    try:
        raise ExceptionGroup("x", [ValueError(1),
                                   TypeError(2)])
    except* ValueError as e:
        print(e)
    except* TypeError:
        pass
    finally:
        return 0
''')

snippet((3, 12), '''
def ident[T](x: T) -> T:
    return x
class Box[T: (int, str), *Ts, **P]:
    def get(self) -> T:
        return [v for v in
                (1, 2)]
type Alias[K] = dict[K,
                     list[K]]
def fstr(a, b):
    return f"{a + b:{
        b}} and {
        a!r}"
''')


def long_source():
    parts = ['def longfn(x, f):\n', '    x = x + 1\n', '\n' * 300,
             '    x = x * 2\n', '    for i in range(3):\n', '\n' * 400,
             '        x += i\n', '\n' * 100000,  # a line delta needing a multi-chunk varint
             '    y = [' + ', '.join('f(%d)' % i for i in range(300)) + ']\n',  # > 255 bytes on one line
             '    z = (x +\n', '\n' * 300, '         1)\n',
             '    w = f(\n', '\n' * 200, '        x,\n', '\n' * 200, '        y)\n',
             '    while x < 100:\n', '\n' * 500, '        x += 1\n']
    # A long if/elif chain: EXTENDED_ARG jumps and a long table.
    parts.append('    if x == -1:\n        pass\n')
    for i in range(400):
        parts.append('    elif x == %d:\n        x = f(%d,\n              %d)\n' % (i, i, i + 1))
    # Return spanning 600 lines (3.10 duplicates it into every branch: keep the gap modest).
    parts.append('    return (x,\n' + '\n' * 600 + '            y)\n')
    parts.append('def farback(a):\n    for i in a:\n' + '\n' * 70000 + '        a = i\n    return a\n')
    parts.append('longfn2 = lambda a: (a +\n' + '\n' * 1000 + '    1)\n')
    return ''.join(parts)


snippet((3, 8), long_source())

STDLIB = ['argparse', 'dis', 'typing', 'asyncio.base_events', 'json.decoder', 'collections',
          'inspect', 'enum', 'dataclasses']


def per_unit_findlinestarts(co, n_units):
    import dis
    starts = list(dis.findlinestarts(co))
    out = []
    i = 0
    line = None
    for u in range(n_units):
        while i < len(starts) and starts[i][0] <= 2 * u:
            line = starts[i][1]
            i += 1
        out.append(line)
    return out


def per_unit_co_lines(co, n_units):
    out = ['?'] * n_units
    for start, end, line in co.co_lines():
        for off in range(start, end, 2):
            if 0 <= off // 2 < n_units:
                out[off // 2] = line
    return out


def fmt_lines(lines):
    return ' '.join('N' if l is None else ('?' if l == '?' else str(l)) for l in lines)


def dump(co, out, counts):
    n_units = len(co.co_code) // 2
    if V <= (3, 9):
        fmt, table = 0, co.co_lnotab
        p = per_unit_findlinestarts(co, n_units)
    elif V == (3, 10):
        fmt, table = 1, co.co_linetable
        p = per_unit_co_lines(co, n_units)
    else:
        fmt, table = 2, co.co_linetable
        p = [pos[0] for pos in co.co_positions()]
        assert len(p) == n_units, (co, len(p), n_units)
    name = getattr(co, 'co_qualname', co.co_name).replace(' ', '_') or '_'
    out.append('C %d %d %s %s:%s' % (fmt, co.co_firstlineno, table.hex() or '-',
                                     co.co_filename.replace(' ', '_'), name))
    out.append('P ' + fmt_lines(p))
    if fmt == 2:
        out.append('L ' + fmt_lines(per_unit_co_lines(co, n_units)))
    counts[0] += 1
    counts[1] += n_units
    for c in co.co_consts:
        if isinstance(c, type(co)):
            dump(c, out, counts)


def main():
    out = []
    counts = [0, 0]
    for i, (min_version, source) in enumerate(SNIPPETS):
        if V < min_version:
            continue
        co = compile(source, '<mlprof-fake-%d>' % i, 'exec')
        dump(co, out, counts)
    # The same through exec(): a function object created at run time from a fake file name.
    ns = {}
    exec(compile('def made(a):\n    return (a,\n            a)\n', '<exec-made>', 'exec'), ns)
    dump(ns['made'].__code__, out, counts)
    for name in STDLIB:
        spec = importlib.util.find_spec(name)
        with open(spec.origin, 'rb') as f:
            source = f.read()
        dump(compile(source, spec.origin, 'exec'), out, counts)
    out.append('E %d %d' % (counts[0], counts[1]))
    sys.stdout.write('\n'.join(out) + '\n')


main()
