#!/usr/bin/env python3
"""The web framework's own hello world (FastAPI's first-steps example), served by uvicorn
the way `paycore serve` serves paycore: `uvicorn.run(app, host, port, log_level="warning",
access_log=False)`, one process, uvicorn's default loop and HTTP implementation. (Unlike
`paycore serve`, it keeps Python's default garbage collector settings: this is the framework's
hello world as the framework runs it; ADR 0012 says what paycore changes and why.)

    .venv/bin/python bench/servers/hello.py --port 8002
"""

from __future__ import annotations

import argparse

import uvicorn
from fastapi import FastAPI

app = FastAPI()


@app.get("/")
async def root() -> dict[str, str]:
    return {"message": "Hello World"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8002)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
