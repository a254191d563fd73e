"""An analytic distribution of how many members end up with a pbcast message: THIS project's model of pbcast's
anti-entropy, a Markov chain over the number of members holding the message per round (the classic epidemic chain).
It is not a quote of the Bimodal Multicast paper [8] (Birman et al. 1999): that paper's text is not among this
project's seeds, so its own formula could not be checked; seed 001 §3 only describes the protocol (gossip of
digests every round, solicitations for what a member lacks, garbage collection after a number of rounds that
"typically varies with the logarithm of the group size"). Pure: no I/O, no randomness.

The model. n members, of which `crashed` = round(tau n) take no part (they are never infected, never gossip, but
are still picked as gossip partners, since pbcast's membership is static: a gossip sent to them is wasted); the
others are `alive` = n - crashed. s_t is the number of alive members holding the message after round t; s_0 the
holders at the start (1: the message at one member, the gossip-only dissemination of seed 001 §5.1). Every round
each alive member sends a digest to `fanout` distinct members drawn uniformly among the n - 1 others; an uninfected
alive member u gets the message in a round when either

- push: a holder picks u (probability fanout / (n - 1) per holder) and the three messages of this implementation's
  exchange arrive — the holder's digest, u's solicitation, the holder's repair: (1 - eps)^3; or
- pull: u picks a holder (u's `fanout` targets drawn among the n - 1 others, i of which hold it: hypergeometric)
  and the two messages arrive — u's digest, the holder's push of what the digest lacks: (1 - eps)^2 each such
  target;

each copy lost independently with probability eps. So the probability that u stays uninfected from i holders is

    q(i) = (1 - fanout (1 - eps)^3 / (n - 1))^i  *  sum_k H(k; n - 1, i, fanout) (1 - (1 - eps)^2)^k

(H the hypergeometric probability that k of u's targets are holders) and p(i) = 1 - q(i). The classic chain then
treats the uninfected alive members as independent:

    P(s_{t+1} = j | s_t = i) = C(alive - i, j - i) p(i)^(j - i) (1 - p(i))^(alive - j),   j >= i,

for `rounds` = ceil(C log2 n) rounds (garbage collection; `gc_rounds`). Approximations, said plainly: (1) the
members' choices make their infections slightly dependent (a holder's `fanout` targets are distinct), the chain
takes them independent; (2) every holder in the model gossips until the horizon, whereas in pbcast each member
forgets the message `rounds` after its own arrival (later holders gossip longer than the model lets them: the
model's spread is a lower bound); (3) pbcast pushes only messages younger than rounds // 2 at the pusher, the
model pushes throughout; (4) rounds are synchronous here, each member's own clock in pbcast. With fanout = 1 and
the same eps, n, C and crash fraction as an experiment, `fraction_histogram` bins the result (the fraction of the
alive members holding it) as the measured histogram (analysis.protocols.pbcast_values.histogram).
"""
from __future__ import annotations

import math


def gc_rounds(n: int, c: float) -> int:
    """ceil(C log2 n), at least 1 (pbcast's `PbcastParams.gc_rounds`)."""
    return max(1, math.ceil(c * math.log2(n))) if n > 1 else 1


def alive_of(n: int, tau: float) -> int:
    """The members that take part: n - round(tau n)."""
    return n - int(round(tau * n))


def _hypergeom(k: int, pop: int, good: int, draws: int) -> float:
    if k < 0 or k > good or draws - k > pop - good or draws > pop:
        return 0.0
    return math.comb(good, k) * math.comb(pop - good, draws - k) / math.comb(pop, draws)


def infection_probability(i: int, n: int, fanout: int, eps: float) -> float:
    """p(i): an uninfected alive member gets the message in one round from i alive holders (push or pull)."""
    if i <= 0 or n <= 1:
        return 0.0
    f = min(fanout, n - 1)
    push_miss = (1.0 - f * (1.0 - eps) ** 3 / (n - 1)) ** i
    pull_miss = sum(_hypergeom(k, n - 1, i, f) * (1.0 - (1.0 - eps) ** 2) ** k for k in range(0, min(f, i) + 1))
    return 1.0 - push_miss * pull_miss


def transition(i: int, alive: int, n: int, fanout: int, eps: float) -> list[float]:
    """P(s_{t+1} = j | s_t = i) for j = 0..alive."""
    p = infection_probability(i, n, fanout, eps)
    m = alive - i
    row = [0.0] * (alive + 1)
    for d in range(m + 1):
        row[i + d] = math.comb(m, d) * p ** d * (1.0 - p) ** (m - d)
    return row


def evolve(dist: list[float], n: int, fanout: int, rounds: int, eps: float) -> list[float]:
    """`rounds` steps of the chain from the distribution `dist` over 0..alive holders (alive = len(dist) - 1)."""
    alive = len(dist) - 1
    rows = [transition(i, alive, n, fanout, eps) for i in range(alive + 1)]
    for _ in range(rounds):
        nxt = [0.0] * (alive + 1)
        for i, pi in enumerate(dist):
            if pi:
                for j in range(i, alive + 1):
                    nxt[j] += pi * rows[i][j]
        dist = nxt
    return dist


def distribution(n: int, fanout: int, rounds: int, eps: float, tau: float = 0.0, start: int = 1) -> list[float]:
    """P(s_rounds = j), j = 0..alive (alive = `alive_of(n, tau)`), from `start` alive holders."""
    alive = alive_of(n, tau)
    if not 0 <= start <= alive:
        raise ValueError(f"start {start} outside 0..{alive} alive members")
    if not 0.0 <= eps <= 1.0 or fanout < 1 or rounds < 0:
        raise ValueError(f"eps {eps} outside [0, 1], fanout {fanout} < 1 or rounds {rounds} < 0")
    dist = [0.0] * (alive + 1)
    dist[start] = 1.0
    return evolve(dist, n, fanout, rounds, eps)


def crash_after(n: int, fanout: int, rounds: int, eps: float, crashed: int, before: int) -> list[float]:
    """The sender crashes mid-multicast: its message gossips `before` rounds among all n members (from the sender
    alone), then the sender and `crashed` - 1 other members (uniformly drawn) crash, and the survivors' holders
    gossip the rest of the `rounds` among the alive = n - crashed. P(j survivors hold it), j = 0..alive. The
    holders at the crash other than the sender are among the survivors hypergeometrically (n - 1 members, alive
    of them survivors); a message no survivor holds stays at 0 (the "almost none" mode)."""
    alive = n - crashed
    if not 1 <= crashed <= n or before < 0:
        raise ValueError(f"crashed {crashed} outside 1..{n} or before {before} < 0")
    head = distribution(n, fanout, min(before, rounds), eps, 0.0, 1)
    start = [0.0] * (alive + 1)
    for s, ps in enumerate(head):
        if ps and s >= 1:
            for k in range(0, min(s - 1, alive) + 1):
                start[k] += ps * _hypergeom(k, n - 1, alive, s - 1)
    return evolve(start, n, fanout, max(0, rounds - before), eps)


def crash_mixture(n: int, fanout: int, rounds: int, eps: float, crashed: int, window: int,
                  first: int = 0) -> list[float]:
    """The messages the sender sent in its last `window` rounds before the crash, as many per round (each `before`
    = first .. window - 1 equally likely): the mean of `crash_after` over them. `first` = 1 leaves out the
    messages of the crash's own round, which the sender never gossiped: the messages it put on the wire (a
    gossip-only sender's message leaves it first in a round's digest)."""
    if not 0 <= first < window:
        raise ValueError(f"first {first} outside 0..{window - 1}")
    dists = [crash_after(n, fanout, rounds, eps, crashed, b) for b in range(first, window)]
    return [sum(col) / len(dists) for col in zip(*dists)]


def fraction_histogram(dist: list[float], width: float = 0.05, bins: int = 20) -> list[float]:
    """The probability per bin [i w, (i + 1) w) of the fraction j / alive (alive = len(dist) - 1; 1.0 in the last
    bin), the bins of the measured histogram."""
    alive = len(dist) - 1
    out = [0.0] * bins
    for j, pj in enumerate(dist):
        f = j / alive if alive else 0.0
        out[min(bins - 1, max(0, int(f / width + 1e-9)))] += pj
    return out


def model_histogram(n: int, fanout: int, c: float, eps: float, crashed: int, window: int, first: int = 0,
                    width: float = 0.05, bins: int = 20) -> dict:
    """The model beside a crash experiment: {rounds, alive, window, from_one, last}: `from_one` the probability per
    bin of a message one survivor holds (`distribution` from 1), `last` of the messages of the sender's last
    `window` rounds before the crash (`crash_mixture` from `first`)."""
    rounds = gc_rounds(n, c)
    one = distribution(n, fanout, rounds, eps, crashed / n, 1)
    last = crash_mixture(n, fanout, rounds, eps, crashed, window, first)
    return {"rounds": rounds, "alive": n - crashed, "window": window,
            "from_one": fraction_histogram(one, width, bins), "last": fraction_histogram(last, width, bins)}
