"""The same endpoint for the cluster: a Deployment + Service that validate against the strict schemas and
Pod Security ``restricted``, and a Slurm script ``bash -n`` accepts; the token only by reference."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from jupyter_starverse.cli import main
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError

kubernetes_validate = pytest.importorskip("kubernetes_validate")

from tests.k8s import _psa  # noqa: E402
from tests.k8s.test_manifests import K8S_VERSION, _server_rules  # noqa: E402


def _docs(client: Starverse, model: str, **kw: object) -> list[dict]:
    spec = client.serve.spec(model, **kw)  # type: ignore[arg-type]
    return list(yaml.safe_load_all(client.serve.render(spec, client.backend("kubernetes"))))


@pytest.mark.parametrize(
    ("accelerator", "engine"), [("cpu", "auto"), ("a100-80g", "auto"), ("a100-80g", "transformers")]
)
def test_deployment_and_service_validate_and_pass_pod_security(
    client: Starverse, tiny_ref: str, accelerator: str, engine: str
) -> None:
    deployment, service = _docs(client, tiny_ref, accelerator=accelerator, engine=engine, replicas=2)
    for obj in (deployment, service):
        _server_rules(obj)
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    pod = deployment["spec"]["template"]
    assert _psa.violations(pod, level="restricted") == []
    (c,) = pod["spec"]["containers"]
    # probes on /health (answered without a token), the store read-only, the token by reference only
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health"
    store = [m for m in c["volumeMounts"] if m["name"] == "store"]
    assert store and store[0]["readOnly"] is True
    claim = next(v for v in pod["spec"]["volumes"] if v["name"] == "store")["persistentVolumeClaim"]
    assert claim["readOnly"] is True
    token = client.serve.spec(tiny_ref).token_secret.split("/")
    refs = [e for e in c["env"] if "valueFrom" in e]
    assert refs and refs[0]["valueFrom"]["secretKeyRef"] == {"name": token[0], "key": token[1]}
    assert all("value" not in e for e in refs)
    assert deployment["spec"]["replicas"] == 2 and service["spec"]["selector"] == pod["metadata"]["labels"]
    limits = c["resources"]["limits"]
    if accelerator == "cpu":
        assert not any("gpu" in k for k in limits) and "jupyter_starverse.serve._server" in c["command"]
    else:
        assert limits["nvidia.com/gpu"] == "1"
        if engine == "auto":  # GPUs get vLLM's server, its key from the same Secret
            assert "vllm.entrypoints.openai.api_server" in c["command"] and refs[0]["name"] == "VLLM_API_KEY"


def test_a_cluster_endpoint_needs_a_store_model_and_vllm_needs_gpus(client: Starverse, tiny_ref: str) -> None:
    with pytest.raises(BadInputError, match="store model"):
        client.serve.spec("/some/folder")
    with pytest.raises(BadInputError, match="GPUs"):
        client.serve.spec(tiny_ref, engine="vllm")
    with pytest.raises(BadInputError, match="NAME/KEY"):
        client.serve.spec(tiny_ref, token_secret="just-a-name")
    with pytest.raises(BadInputError, match="renders no endpoint"):
        client.serve.render(client.serve.spec(tiny_ref), client.backend("local"))


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash")
@pytest.mark.parametrize("accelerator", ["cpu", "a100-80g"])
def test_slurm_script_passes_bash_n_and_names_only_the_token_file(
    client: Starverse, tiny_ref: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], accelerator: str
) -> None:
    argv = ["serve", tiny_ref, "--backend", "slurm", "--dry-run"] + (
        ["--gpu", accelerator] if accelerator != "cpu" else []
    )
    assert main(argv) == 0
    script = capsys.readouterr().out
    path = tmp_path / "serve.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True).returncode == 0
    assert "#SBATCH --job-name=serve-tiny" in script and "endpoint.json" in script and "token_file=" in script
    assert ("#SBATCH --gres=gpu:1" in script) == (accelerator != "cpu")
    assert ("vllm.entrypoints" in script) == (accelerator != "cpu")


def test_cli_renders_kubernetes_yaml(client: Starverse, tiny_ref: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", tiny_ref, "--backend", "kubernetes", "--dry-run"]) == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)]
    assert kinds == ["Deployment", "Service"]
    assert main(["serve", tiny_ref, "--backend", "kubernetes"]) != 0  # applying is not done from here
    assert "--dry-run" in capsys.readouterr().err
