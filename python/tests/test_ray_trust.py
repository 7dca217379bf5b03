"""blindjoin.ray's private Ray instance (``address=None``) admits no one else: token
authentication with a token that lives only in the coordinator's process environment, and every
server on 127.0.0.1. A second local client of the same user, without that token, is refused.

Skipped when Ray is not installed (``pip install 'blindjoin[ray]'``).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'blindjoin[ray]'")

import blindjoin.ray  # noqa: E402

# Ray's start-up on a busy 2-core machine takes 5-20 s; the refused client gives up at once.
CLIENT_TIMEOUT_S = 120

CLIENT = "import ray, sys; ray.init(address=sys.argv[1]); print('CONNECTED')"

# Ray 2.5x's refusals: a missing or wrong token at the GCS, or token mode without any token.
REFUSALS = ("InvalidAuthToken", "AuthenticationError", "no authentication token was found")


@pytest.mark.skipif(
    blindjoin.ray._ray_version(ray) < blindjoin.ray.TOKEN_AUTH_RAY,
    reason="this Ray has no token authentication; blindjoin.ray refuses to start it",
)
def test_the_private_instance_refuses_a_local_client_without_its_token() -> None:
    with blindjoin.ray._private_instance(ray, 1):
        gcs = ray.get_runtime_context().gcs_address
        assert gcs.startswith("127.0.0.1:"), f"the instance listens on {gcs}"
        assert ray.util.get_node_ip_address() == "127.0.0.1"
        # The same user and HOME, without the coordinator's environment: no token at all;
        # the user's default token file (~/.ray/auth_token, world-readable, which a plain
        # `ray.init()` would have used for the instance); a guessed token.
        base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        clients = {
            "no token": base,
            "the default token file": {**base, "RAY_AUTH_MODE": "token"},
            "a wrong token": {
                **base,
                "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN": secrets.token_hex(32),
            },
        }
        for what, env in clients.items():
            r = subprocess.run(
                [sys.executable, "-c", CLIENT, gcs],
                env=env,
                capture_output=True,
                text=True,
                timeout=CLIENT_TIMEOUT_S,
            )
            assert "CONNECTED" not in r.stdout, f"a client with {what} reached the instance"
            assert r.returncode != 0, what
            assert any(m in r.stderr for m in REFUSALS), f"{what}: {r.stderr[-2000:]}"
        # The instance's own tasks still run (its processes inherited the token).
        assert ray.get(ray.remote(lambda: 41 + 1).remote(), timeout=CLIENT_TIMEOUT_S) == 42


def test_a_ray_without_token_authentication_is_refused() -> None:
    class OldRay:
        __version__ = "2.9.3"

    with pytest.raises(ImportError, match=r"Ray >= 2\.52"):
        with blindjoin.ray._private_instance(OldRay(), 1):
            pass
