"""Which stored unrolls a learner replays under --replay_sampling=elite or attentive: the pure
choice, from candidates' distances and sample counts, apart from the network that gives the
distances (replay_mixing.py), so that it can be tested on hand-made numbers. Numpy only.

Words: the memory holds M unrolls; a batch takes R replayed ones; a *candidate set* of
N = min(lambda x R, M) stored unrolls (lambda: --replay_candidates) is drawn uniformly without
replacement; each candidate has a distance (the smaller, the more wanted) and the number of
times it was replayed so far; R of the N are chosen.

Ties in distance (and in sample count) go to the candidate drawn first: the sorts are stable and
the candidate set is in random order, so ties are broken uniformly at random.
"""

import numpy as np


def candidate_count(num_replayed, candidates_per_unroll, stored, anneal, progress):
    """N, the size of the candidate set: lambda x R, with lambda shrunk linearly toward 1 as
    training goes (`anneal` x `progress`; at lambda 1 the R candidates are all chosen: uniform
    replay), at most the M `stored` unrolls, at least R.

    Args:
      num_replayed: R.
      candidates_per_unroll: lambda (--replay_candidates).
      stored: M.
      anneal: --replay_anneal, in [0, 1]: the share of the way to uniform at the end of training.
      progress: frames trained / the frame budget (clipped to 1).
    """
    shrink = 1 - anneal * min(1.0, progress)
    wanted = round(num_replayed * (1 + (candidates_per_unroll - 1) * shrink))
    return min(stored, max(num_replayed, wanted))


def draw_candidates(rng, stored, count):
    """int64 [count]: memory slots among 0..stored-1, uniformly without replacement, in random
    order. `count` may not exceed `stored` (candidate_count caps it)."""
    return rng.choice(stored, size=count, replace=False).astype(np.int64)


def policy_kl(behaviour_logits, current_logits):
    """float64 [N]: each candidate's mean over its K states of KL(mu || pi), the behaviour
    policy mu its actor stored against the current policy pi, from logits [N, K, A]."""
    log_mu = log_softmax(behaviour_logits)
    log_pi = log_softmax(current_logits)
    return np.mean(np.sum(np.exp(log_mu) * (log_mu - log_pi), axis=-1), axis=-1)


def distance_to_mean(features, reference):
    """float64 [N]: each candidate's mean over its K states of the Euclidean distance between
    its features [N, K, F] and `reference` [F] (the on-policy batch's mean feature)."""
    return np.mean(np.linalg.norm(features - reference, axis=-1), axis=-1)


def log_softmax(logits):
    """log softmax over the last axis, float64 (logits of any shift give the same policy)."""
    shifted = np.asarray(logits, np.float64)
    shifted = shifted - shifted.max(axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def _ranked(distances, sample_counts):
    """Positions [n] of the candidates, closest first; least replayed first when
    `sample_counts` [n] is given (closest among equals). Stable: ties keep candidate order."""
    keys = (distances,) if sample_counts is None else (distances, sample_counts)
    return np.lexsort(keys)  # sorts by its last key first


def choose(distances, count, spread=False, sample_counts=None):
    """int64 [count]: the positions in the candidate set (distances float [N], N >= count) of
    the candidates to replay.

    Not `spread`: the `count` closest (strategy 1); with `sample_counts` (int [N], times each
    was replayed) the least replayed, the closest among equals (strategy 3). `spread`: the
    candidates sorted by distance are cut into `count` groups of consecutive ranks (sizes
    differing by at most one), and one is taken from each: the closest (strategy 2), or with
    `sample_counts` the least replayed, closest among equals (strategy 4). Spread choices keep
    some of the far candidates in every batch; the others take only near ones.
    """
    distances = np.asarray(distances)
    if not 0 < count <= len(distances):
        raise ValueError(f"cannot choose {count} of {len(distances)} candidates")
    if not spread:
        return _ranked(distances, sample_counts)[:count]
    groups = np.array_split(np.argsort(distances, kind="stable"), count)
    return np.array(
        [group[_ranked(distances[group], _at(sample_counts, group))[0]] for group in groups],
        np.int64,
    )


def _at(values, positions):
    """values[positions], or None without values."""
    return None if values is None else np.asarray(values)[positions]


# --replay_elite_strategy: choose's arguments (spread, prefer the least replayed).
ELITE_STRATEGIES = {1: (False, False), 2: (True, False), 3: (False, True), 4: (True, True)}


def elite_choice(strategy, distances, sample_counts, count):
    """int64 [count]: positions of the candidates (distances [N], sample_counts [N]) that elite
    strategy 1-4 replays (see `choose`)."""
    spread, least_replayed = ELITE_STRATEGIES[strategy]
    return choose(distances, count, spread, sample_counts if least_replayed else None)
