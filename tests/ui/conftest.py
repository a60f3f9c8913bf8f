"""The UI runs against the same real stack as the API tests: uvicorn, a worker, a dev server."""

from tests.api.conftest import stack  # noqa: F401
