from tests.worker.test_ops_cli import Cli, create, stack  # noqa: F401
from tests.api.conftest import Stack
import asyncio

async def test_show(stack: Stack) -> None:
    cli = Cli(SCHEDULER_API_URL=stack.base_url, SCHEDULER_API_KEY=stack.keys["t1"])
    t = await create(stack, "nightly-report")
    await create(stack, "cleanup")
    await cli("tasks", "trigger", t)
    await asyncio.sleep(2)
    for argv in (("tasks","list"),("tasks","get",t),("tasks","executions",t),("tasks","list","--limit","1"),("dead-letters","list")):
        code, out, err = await cli(*argv)
        print("$ task-scheduler", " ".join(argv), f"(exit {code})"); print(out + err)
