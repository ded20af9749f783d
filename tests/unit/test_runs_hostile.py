"""The run engine's flags tried as a hostile user would (issue 53's fresh round): each test is one case that
once ran with a flag that had no effect, or ended otherwise than the docs say."""

from __future__ import annotations

import argparse

import pytest

from lab.commands.common import cluster_config


def _args(ray, timeout=None, actors=None) -> argparse.Namespace:
    return argparse.Namespace(ray=ray, ray_timeout=timeout, ray_actors=actors, threads=None)


@pytest.mark.parametrize("ray", ["", "local"], ids=["no-address", "local"])
def test_cluster_config_ray_timeout_on_a_local_cluster_refused(ray):
    """Fault class: ``--ray --ray-timeout 5`` ran, the timeout bounding nothing (it bounds only how long a
    running cluster at ``--ray ADDRESS`` has to answer); a flag with no effect is refused, naming it."""
    with pytest.raises(ValueError, match="--ray-timeout has no effect on the local cluster"):
        cluster_config(_args(ray, timeout=5.0))


def test_cluster_config_ray_timeout_with_an_address_kept():
    """The same flag with an address is what it is for."""
    pytest.importorskip("ray")
    assert cluster_config(_args("127.0.0.1:6379", timeout=5.0)).connect_timeout_s == 5.0
