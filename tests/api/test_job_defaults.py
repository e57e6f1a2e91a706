"""What a submission leaves out: a job needs an absolute working directory (else it would
run in the service's own), and a name it does not give is its program's, never a word
that could carry a secret (`HF_TOKEN=… python x.py`)."""

from __future__ import annotations

from typing import Any

import pytest

from jpushare.store.job_names import DEFAULT_NAME_CHARS, default_job_name
from tests.api.conftest import ApiWorld, job_body
from tests.api.test_errors import error, job_rows

SECRET = "hf_Zq8sEcReT0kEn"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"command": "true", "num_gpus": 1}, "Field required"),
        ({"command": "true", "num_gpus": 1, "workdir": None}, "string"),
        ({"command": "true", "num_gpus": 1, "workdir": "tmp/work"}, "absolute path"),
        ({"command": "true", "num_gpus": 1, "workdir": ""}, "must not be empty"),
    ],
)
def test_a_job_without_an_absolute_working_directory_is_422(
    api: ApiWorld, body: dict[str, Any], why: str
) -> None:
    e = error(api.post("/v1/jobs", json=body), 422, "VALIDATION_ERROR")
    assert [err["loc"] for err in e["details"]["errors"]] == [["body", "workdir"]]
    assert "workdir" in e["message"] and why in e["message"]
    assert job_rows(api) == (0, 0)


def test_the_openapi_document_says_workdir_is_required(api: ApiWorld) -> None:
    schema = api.client.get("/openapi.json").json()["components"]["schemas"]["JobCreate"]
    assert "workdir" in schema["required"]


def test_a_default_name_never_carries_the_commands_words_to_other_users(
    api: ApiWorld,
) -> None:
    command = f"HF_TOKEN={SECRET} WANDB_KEY=w-{SECRET} python3 train.py --token {SECRET}"
    job = api.submit("alice", 1, name="", command=command)
    assert api.get(f"/v1/jobs/{job}", "alice").json()["name"] == "python3"
    for path in ["/v1/jobs", f"/v1/jobs/{job}", "/v1/queue", f"/v1/jobs/{job}/why"]:
        r = api.get(path, "bob")
        assert r.status_code == 200, path
        assert SECRET not in r.text, path


@pytest.mark.parametrize(
    ("command", "name"),
    [
        ("HF_TOKEN=hf_x python3 train.py", "python3"),
        ("./train.sh --lr 1", "train.sh"),
        ("/opt/conda/bin/python -m torch.distributed.run x.py", "python"),
        ("env A=1 B=2 python x.py", "python"),
        ("env -i -u HOME PATH=/bin /usr/bin/python3 -c 1", "python3"),
        ("nohup A=1 ./run.sh &", "run.sh"),
        ("TOKEN='a b c' bash -c 'echo $TOKEN'", "bash"),
        ("python3;curl evil", "python3"),
        ("(cd /data && make)", "cd"),
        (">log.txt python x", "python"),
        ("A=1 B=2", "job"),
        ("'unbalanced quote", "'unbalanced"),
        ("x" * 300, "x" * DEFAULT_NAME_CHARS),
        ("na\x1b[31mme --flag", "na[31mme"),
    ],
)
def test_the_default_name_is_the_programs_basename(command: str, name: str) -> None:
    assert default_job_name(command) == name


def test_a_given_name_is_kept(api: ApiWorld) -> None:
    job = api.submit("alice", 1, name="sweep-3", command="A=1 python x.py")
    assert api.get(f"/v1/jobs/{job}", "bob").json()["name"] == "sweep-3"
    r = api.post("/v1/jobs", json=job_body(command="nvidia-smi -L"))
    assert r.json()["name"] == "nvidia-smi"
