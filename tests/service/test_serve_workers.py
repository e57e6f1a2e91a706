"""`jpushare serve --workers 2`: the API in two worker processes, the dispatcher in the main
one. A real process on a free port (SQLite, --demo), bounded in time: it answers, it
queues and dispatches jobs, it has two API workers, and it stops cleanly on SIGTERM."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.dispatcher.conftest import wait_for
from tests.service.demo_service import demo_service, free_port


def _children(pid: int) -> list[int]:
    """The ids of the processes whose parent is `pid` (Linux /proc)."""
    out: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry.name))
    return out


def _is_spawned_worker(pid: int) -> bool:
    try:
        return b"multiprocessing.spawn" in (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False


def _workers(pid: int) -> list[int]:
    return [c for c in _children(pid) if _is_spawned_worker(c)]


def _alive(pid: int) -> bool:
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_serve_with_two_api_workers_answers_and_dispatches(tmp_path: Path) -> None:
    workers: list[int] = []
    with demo_service(tmp_path, "workers", "--workers", "2", JPUSHARE_CYCLE_S="0.3") as demo:
        service, base = demo.service, demo.url
        wait_for(lambda: len(_workers(service.proc.pid)) == 2, "two API worker processes")
        workers = _workers(service.proc.pid)
        token = demo.tokens["JPUSHARE_TOKEN"]
        headers = {"Authorization": f"Bearer {token}"}
        # Several connections, so that both workers are likely to take some.
        ids: list[int] = []
        for i in range(8):
            with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
                body = {"name": f"w{i}", "command": "true", "num_gpus": 1, "workdir": str(tmp_path)}
                r = client.post("/v1/jobs", json=body)
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
                assert client.get(f"/v1/jobs/{ids[-1]}").json()["id"] == ids[-1]
        assert len(set(ids)) == 8
        # The dispatcher in the main process runs them.
        with httpx.Client(base_url=base, headers=headers, timeout=30) as client:

            def all_completed() -> bool:
                states = {client.get(f"/v1/jobs/{j}").json()["state"] for j in ids}
                return states == {"COMPLETED"}

            wait_for(all_completed, "the dispatcher runs the jobs to completion")
            too_big = client.post(
                "/v1/jobs", json={"workdir": "/tmp", "command": "true", "num_gpus": 99}
            )
            assert too_big.status_code == 422
    # The supervisor stopped its workers before the main process exited.
    assert not any(_alive(pid) for pid in workers)


def test_the_workers_listening_socket_gives_its_connections_tcp_nodelay() -> None:
    import socket

    import uvicorn

    from jpushare.service.api_workers import keep_nodelay

    config = uvicorn.Config("x:y", host="127.0.0.1", port=free_port())
    listener = config.bind_socket()
    try:
        keep_nodelay(listener)
        listener.listen()  # as the worker's server does
        with socket.create_connection(listener.getsockname(), timeout=5):
            accepted, _ = listener.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        listener.close()
