"""P(yes): softmax over the yes/no logit groups, closed form."""

import math

import numpy as np
import pytest

from qmdlab.models.scoring import p_yes


def test_single_tokens_is_two_way_softmax():
    z = np.array([0.3, 1.7, -2.0, 50.0])  # index 3 (a huge unrelated logit) must not matter
    assert p_yes(z, [1], [0]) == pytest.approx(math.exp(1.7) / (math.exp(1.7) + math.exp(0.3)), rel=1e-12)


def test_equal_logits_give_one_half():
    assert p_yes(np.zeros(5), [0], [1]) == 0.5


def test_groups_sum_probability_mass():
    z = np.log(np.array([2.0, 6.0, 1.0, 1.0]))
    assert p_yes(z, [0, 1], [2, 3]) == pytest.approx(8 / 10, rel=1e-12)


def test_not_a_double_sigmoid():
    # sigmoid(sigmoid(x)) would map logit difference 4 to 0.7216…; the softmax gives 0.98201…
    z = np.array([4.0, 0.0])
    assert p_yes(z, [0], [1]) == pytest.approx(1 / (1 + math.exp(-4)), rel=1e-12)
    assert p_yes(z, [0], [1]) != pytest.approx(1 / (1 + math.exp(-1 / (1 + math.exp(-4)))))


def test_extreme_logits_stay_finite():
    assert p_yes(np.array([-1e4, 1e4]), [0], [1]) == 0.0
    assert p_yes(np.array([1e4, -1e4]), [0], [1]) == 1.0


def test_empty_group_is_an_error():
    with pytest.raises(ValueError):
        p_yes(np.zeros(3), [], [1])
