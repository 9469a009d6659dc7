"""What the command line imports before it knows the command (issue 30: the suite starts some
200 paycore processes, and their imports were most of their CPU). Checked in a fresh
interpreter, since this one has imported everything already."""

from __future__ import annotations

import subprocess
import sys

# Imported only by the commands that need them: the web stack by `serve` and `processor
# serve`, the sandbox by `serve --dev` and `processor serve`, Alembic by a migration.
NOT_AT_START = ("fastapi", "starlette", "uvicorn", "alembic", "paycore_sandbox.service", "paycore_sandbox.faults")


def test_the_cli_imports_no_web_stack_sandbox_or_alembic_before_its_command() -> None:
    script = (
        "import sys\n"
        "import paycore.cli.main\n"
        f"print(sorted(name for name in {NOT_AT_START!r} if name in sys.modules))\n"
    )
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert found.stdout.strip() == "[]", found.stdout + found.stderr


def test_the_sandbox_package_still_gives_its_names() -> None:
    import paycore_sandbox
    from paycore_sandbox import FaultPlanError, Sandbox, SandboxSettings, http_sink
    from paycore_sandbox.service import Sandbox as HomeOfSandbox

    assert Sandbox is HomeOfSandbox
    assert {FaultPlanError.__name__, SandboxSettings.__name__, http_sink.__name__} == {
        "FaultPlanError",
        "SandboxSettings",
        "http_sink",
    }
    assert set(paycore_sandbox.__all__) >= {"Sandbox", "SandboxSettings", "http_sink", "FaultPlanError"}
