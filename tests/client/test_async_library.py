"""`AsyncClient` runs on trio; used from asyncio it says so at once and names the way
that works there (it failed from deep inside trio with an AttributeError)."""

from __future__ import annotations

import asyncio

import pytest

from quorumlog import AsyncClient, AsyncConsumer


@pytest.mark.parametrize(
    "open_client",
    [lambda: AsyncClient("127.0.0.1:1"), lambda: AsyncConsumer("127.0.0.1:1", "g", ["t"])],
    ids=["AsyncClient", "AsyncConsumer"],
)
def test_used_under_asyncio_it_raises_at_once_naming_the_blocking_client(open_client):
    async def main() -> None:
        async with open_client():
            pass

    with pytest.raises(RuntimeError, match=r"runs on trio, not asyncio: .* quorumlog\.Client"):
        asyncio.run(main())
