"""``repr()`` of float64 values for a whole column at once, as NUL-padded bytes (the CSV report).

A CSV report of a million rows holds about 17 million numbers, written as Python writes them (shortest text
that reads back as the same float, David Gay's ``dtoa`` mode 0): msprobe's reports (pandas) do the same, and
users diff them. Python needs ~0.3 µs a number; this module finds the same digits with numpy:

1. ``v = |x| · 10^k`` scaled into [10^16, 10^17) as an exact-enough double-double (Dekker's product with
   10^k held as two doubles): integer part ``I`` (int64) and fraction ``f``, error < 1e-14 of a unit.
2. The round-trip interval of ``x`` is ``v ± h`` with ``h`` half the float spacing in the same units
   (0.55 < h ≤ 11.1). The shortest text is the largest ``m`` such that the nearest multiple of ``10^m`` lies
   inside the interval (if one does for ``m``, one does for every smaller ``m``: scan up, stop at the first miss);
   its digits are that multiple, which is also the closest shortest candidate — what ``dtoa`` returns.
3. Layout: Python's rules (positional for decimal exponents −4..15, else ``d.ddde±XX``) written as byte
   columns, one per character position some value uses, NUL where a value does not; the caller drops the NULs.

Values the arithmetic cannot settle with a wide margin (an exact tie, a candidate within 1e-9 of the interval
edge, exact powers of two whose interval is lopsided, magnitudes beyond 1e±200, inf, nan) get ``repr`` itself,
so every frame is ``repr``'s text (tested against ``repr`` on millions of values).
"""

from __future__ import annotations

from fractions import Fraction
from functools import partial
from typing import Callable, List, Tuple

import numpy as np

_K = 230  # 10^k table covers |k| <= _K
_LIMIT = 1e200
_EPS = 1e-9  # margin, in units of the 17th digit (the arithmetic is good to ~1e-14)
_SPLIT = 134217729.0  # 2^27 + 1, Veltkamp's splitter
_POW10 = np.array([10 ** i for i in range(18)], dtype=np.int64)
_TABLE: List[np.ndarray] = []
_C = {c: np.uint8(ord(c)) for c in "0.-+e"}


def _pow10_table() -> Tuple[np.ndarray, np.ndarray]:
    """10^k for k in [-_K, _K] as (hi, lo) doubles: hi the nearest double, lo the nearest double of the rest."""
    if not _TABLE:
        hi, lo = [], []
        for k in range(-_K, _K + 1):
            exact = Fraction(10) ** k
            h = float(exact)
            hi.append(h)
            lo.append(float(exact - Fraction(h)))
        _TABLE.extend([np.array(hi), np.array(lo)])
    return _TABLE[0], _TABLE[1]


def _digits4() -> np.ndarray:
    """"0000".."9999" as uint32 (4 ASCII bytes each)."""
    if len(_TABLE) < 3:
        _pow10_table()
        _TABLE.append(np.array([b"%04d" % i for i in range(10_000)], dtype="S4").view(np.uint32))
    return _TABLE[2]


def _split(a: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    c = _SPLIT * a
    hi = c - (c - a)
    return hi, a - hi


def _scaled(a: np.ndarray, k: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``a · 10^k`` as hi + lo (hi = the rounded value)."""
    t_hi, t_lo = _pow10_table()
    p_hi, p_lo = t_hi[k + _K], t_lo[k + _K]
    p = a * p_hi
    a1, a2 = _split(a)
    b1, b2 = _split(p_hi)
    err = ((a1 * b1 - p) + a1 * b2 + a2 * b1) + a2 * b2  # exact: a * p_hi = p + err
    err += a * p_lo
    s = p + err
    return s, err - (s - p)


def _shortest(a: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For positive finite ``a`` within 1e±200: (digits as a 17-digit int64 with trailing zeros, number of
    significant digits, decimal exponent of the first digit, ok). ``ok`` False: let ``repr`` do it."""
    n = a.shape[0]
    e10 = np.floor(np.log10(a)).astype(np.int64)
    hi, lo = _scaled(a, 16 - e10)
    for _ in range(2):  # log10 can be one off near powers of ten
        low = (hi < 1e16) | ((hi == 1e16) & (lo < 0))
        high = (hi > 1e17) | ((hi == 1e17) & (lo >= 0))
        fix = np.flatnonzero(low | high)
        if not fix.size:
            break
        e10[fix] += np.where(high[fix], 1, -1)
        hi[fix], lo[fix] = _scaled(a[fix], 16 - e10[fix])
    floor_lo = np.floor(lo)
    whole = hi.astype(np.int64) + floor_lo.astype(np.int64)
    frac = lo - floor_lo
    power_of_two = (a.view(np.uint64) & np.uint64((1 << 52) - 1)) == 0
    t_hi, _ = _pow10_table()
    half = 0.5 * np.spacing(a) * t_hi[16 - e10 + _K]  # h; a power of two has h/2 below: use the smaller side
    half = np.where(power_of_two, 0.5 * half, half)
    # m = 0: the 17-digit text always round-trips (h > 0.5); the nearest one, unless f is a tie
    best = np.zeros(n, dtype=np.int64)
    d = whole + (frac > 0.5)
    tie = np.abs(frac - 0.5) <= _EPS
    exact = frac == 0
    unsure = np.zeros(n, dtype=bool)
    active = None  # None: every row (masked whole-array operations); else the rows still going, by index
    for m in range(1, 18):
        q = int(_POW10[m])
        w, f, h = (whole, frac, half) if active is None else (whole[active], frac[active], half[active])
        quot = w // q
        r = w - quot * q  # numpy's % is several times slower than // by a constant
        down = r + f
        dist = np.minimum(down, (q - r) - f)
        edge = np.abs(dist - h) <= _EPS
        inside = (dist < h) & ~edge
        excess = down - 0.5 * q
        if active is None:  # np.where builds new arrays faster than masked copies into the old ones
            unsure |= edge
            best = np.where(inside, m, best)
            d = np.where(inside, quot + (excess > 0), d)
            tie = np.where(inside, np.abs(excess) <= _EPS, tie)
            exact = np.where(inside, down == 0, exact)
            count = int(np.count_nonzero(inside))
            if count * 4 < n:
                active = np.flatnonzero(inside)
        else:
            unsure[active[edge]] = True
            rows = active[inside]
            best[rows] = m
            d[rows] = quot[inside] + (excess[inside] > 0)
            tie[rows] = np.abs(excess[inside]) <= _EPS
            exact[rows] = down[inside] == 0
            active = rows
            count = rows.size
        if not count:
            break
    ok = ~unsure & ~tie
    # lopsided intervals of powers of two: trust only exact short decimals
    ok &= ~power_of_two | (exact & (best >= 2))
    sig = 17 - best
    carry = d == _POW10[sig]
    sig[carry] = 1
    d[carry] = 1
    e10 += carry
    return d * _POW10[17 - sig], sig, e10, ok


class FloatText:
    """The ``repr`` texts of a float64 column: :attr:`width` bytes a value, written by :meth:`write` into a
    zeroed ``[n, >= width]`` uint8 array with NUL bytes interspersed (drop them).

    Only the byte columns some value uses are laid out; each is one 1-D operation over the values (2-D masks
    are much slower). Write into a small contiguous array: columns written straight into a wide row buffer
    touch a cache line per value each.
    """

    def __init__(self, values: np.ndarray):
        x = np.ascontiguousarray(values, dtype=np.float64)
        n = x.shape[0]
        a = np.abs(x)
        with np.errstate(invalid="ignore"):
            fast = (a >= 1.0 / _LIMIT) & (a < _LIMIT)
        if fast.all():
            digits, sig, e10, ok = _shortest(a)
        else:
            # 0.0 and -0.0: digits 0, one digit, exponent 0 -> "0.0"; inf, nan and extremes: repr
            idx = np.flatnonzero(fast)
            digits = np.zeros(n, dtype=np.int64)
            sig = np.ones(n, dtype=np.int64)
            e10 = np.zeros(n, dtype=np.int64)
            ok = a == 0
            if idx.size:
                digits[idx], sig[idx], e10[idx], ok[idx] = _shortest(a[idx])
        self.rest = np.flatnonzero(~ok)
        self.rest_texts = [repr(v) for v in x[self.rest].tolist()]
        self._plan(np.signbit(x), digits, sig, e10)
        self.width = max([len(self._writers)] + [len(t) for t in self.rest_texts])

    def _plan(self, neg: np.ndarray, digits: np.ndarray, sig: np.ndarray, e10: np.ndarray) -> None:
        w: List[Callable[[np.ndarray], object]] = []  # each writes one byte column
        self._writers = w
        if neg.any():
            w.append(lambda col: np.multiply(neg, _C["-"], out=col))
        sig = sig.astype(np.int8)
        e = np.clip(e10, -120, 120).astype(np.int8)
        positional = (e10 >= -4) & (e10 <= 15)
        big = positional & (e >= 0)
        small = positional & (e < 0)
        if small.any():
            w.append(lambda col: np.multiply(small, _C["0"], out=col))
            w.append(lambda col: np.multiply(small, _C["."], out=col))

            def zero(i: int, col: np.ndarray) -> None:
                np.multiply(small & (-e - 1 > i), _C["0"], out=col)

            for i in range(int(-e[small].min()) - 1):  # "0.00ddd": -e - 1 zeros
                w.append(partial(zero, i))
        shown = np.where(big, np.maximum(sig, e + 1), sig).astype(np.int8)
        dot_at = np.where(big, e, np.where(~positional & (sig > 1), 0, -1)).astype(np.int8)
        dots = set(np.flatnonzero(np.bincount(dot_at.astype(np.int64) + 1, minlength=18)[1:]).tolist())
        always = int(shown.min())
        groups: List[np.ndarray] = []

        def digit(j: int, col: np.ndarray) -> None:
            if not groups:  # the 17 digits as a lead digit and four 4-digit groups, characters from a table
                lead = digits // 10 ** 16
                rest = digits - lead * 10 ** 16
                high = (rest // 10 ** 8).astype(np.int32)
                low = (rest - high.astype(np.int64) * 10 ** 8).astype(np.int32)
                groups.append((lead.astype(np.uint8) + _C["0"]).reshape(-1, 1))
                for part in (high, low):
                    upper = part // 10_000
                    for g in (upper, part - upper * 10_000):
                        groups.append(_digits4()[g].view(np.uint8).reshape(-1, 4))
            source = groups[0][:, 0] if j == 0 else groups[1 + (j - 1) // 4][:, (j - 1) % 4]
            if j >= always:
                np.multiply(source, shown > j, out=col)
            else:
                col[...] = source

        def dot(j: int, col: np.ndarray) -> None:
            np.multiply(dot_at == j, _C["."], out=col)

        for j in range(int(shown.max())):
            w.append(partial(digit, j))
            if j in dots:
                w.append(partial(dot, j))
        tail = big & (sig <= e + 1)
        if tail.any():
            w.append(lambda col: np.multiply(tail, _C["0"], out=col))
        expo = ~positional
        if expo.any():
            mag = np.abs(e10)
            w.append(lambda col: np.multiply(expo, _C["e"], out=col))
            w.append(lambda col: np.copyto(col, np.where(expo, np.where(e10 < 0, _C["-"], _C["+"]), 0),
                                           casting="unsafe"))
            hundreds = expo & (mag >= 100)
            if hundreds.any():
                w.append(lambda col: np.copyto(col, hundreds * (mag // 100 + 48), casting="unsafe"))
            w.append(lambda col: np.copyto(col, expo * ((mag // 10) % 10 + 48), casting="unsafe"))
            w.append(lambda col: np.copyto(col, expo * (mag % 10 + 48), casting="unsafe"))

    def write(self, out: np.ndarray) -> None:
        for j, writer in enumerate(self._writers):
            writer(out[:, j])
        if self.rest.size:
            out[self.rest] = text_rows(self.rest_texts, out.shape[1])


def text_rows(texts: List[str], width: int) -> np.ndarray:
    """[len(texts), width] uint8 of ASCII texts, NUL padded."""
    out = np.zeros((len(texts), width), dtype=np.uint8)
    for i, t in enumerate(texts):
        b = t.encode("ascii")
        out[i, :len(b)] = np.frombuffer(b, dtype=np.uint8)
    return out


def float_frames(values: np.ndarray) -> np.ndarray:
    """[n, w] uint8: row i holds ``repr(float(values[i]))`` with NUL bytes interspersed (drop them)."""
    text = FloatText(values)
    frame = np.zeros((len(values), text.width), dtype=np.uint8)
    text.write(frame)
    return frame


def frames_to_texts(frame: np.ndarray) -> List[str]:
    """The texts of frames (tests and small reports)."""
    return [bytes(row).replace(b"\0", b"").decode("ascii") for row in frame]
