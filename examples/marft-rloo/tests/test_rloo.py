"""The plugin's own test: marft's learner contract, run by ``pytest examples/marft-rloo/tests``
(with the package installed, e.g. ``pip install -e examples/marft-rloo``)."""

from marft_agents.testing import learner_api_test
from marft_rloo import RLOO


def test_rloo_follows_the_learner_api():
    learner_api_test(RLOO, bad_options=[{"group_size": 1}])
