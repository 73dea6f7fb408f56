"""Engine-native keys (`generate()` keywords, `SamplingParams` fields) and non-tiny models (a checkpoint's
package, a path) judged under each build's interpreter, before a campaign is sealed: a key the engine does
not take or a model that is not there is an error naming the file, the config and the key, never a failed
job hours later."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from badc_check.builds import build_for
from badc_check.campaign.executors import WORKER, WarmWorkers
from badc_check.campaign.spec import Campaign, CampaignError, needs_pilot
from badc_replay.engine import Engine
from badc_replay.registry import get_engine


def _problems(python: str, configs: list[dict[str, Any]], warm: WarmWorkers | None) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="badc-validate-") as tmp:
        path = Path(tmp) / "configs.json"
        path.write_text(json.dumps(configs))
        if warm is not None:  # the worker stays, waiting for this build's first job
            first, err = warm.start(python, [str(path), "--validate"])
            if first:
                return json.loads(first)
            code, stderr = "no verdict", "".join(err)
        else:
            proc = subprocess.run([python, *WORKER, str(path), "--validate"], capture_output=True, text=True,
                                  timeout=600)
            if proc.returncode == 0:
                return json.loads(proc.stdout.strip().splitlines()[-1])
            code, stderr = f"exit {proc.returncode}", proc.stderr
    tail = " | ".join(stderr.strip().splitlines()[-3:])
    raise CampaignError(f"validating engine keywords under {python} failed ({code}): {tail}")


def validate_native(campaign: Campaign, executor: str = "local", warm: WarmWorkers | None = None) -> dict[str, str]:
    """Raise CampaignError listing every engine-native key an installed build refuses. Configs whose build
    is not set up are left to the runner (it reports them INCONCLUSIVE). Returns the configs the engine
    refuses to run with speculation on, with its message ({id: message}). With `warm`, each build's
    validating worker is kept there, waiting for that build's first job."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in campaign.configs:
        engine = type(get_engine(c["engine"]))
        if engine.check_native is Engine.check_native and engine.refusal is Engine.refusal and not needs_pilot(c):
            continue  # nothing only the build can judge (a non-tiny model is found there): no interpreter to start
        try:
            python = sys.executable if executor == "inline" else str(build_for(c["engine"], c["build"]).python)
        except LookupError:
            continue
        groups.setdefault(python, []).append(c)
    if executor == "inline":
        from badc_replay.worker import validate

        found = [validate(configs) for configs in groups.values()]
    else:
        with ThreadPoolExecutor(max_workers=max(len(groups), 1)) as pool:
            found = list(pool.map(lambda item: _problems(*item, warm), groups.items()))
    problems = [f"{campaign.path}: config {cid}: {p}" for result in found for cid, r in result.items()
                for p in r["problems"]]
    if problems:
        raise CampaignError("\n".join(problems))
    return {cid: r["refused"] for result in found for cid, r in result.items() if r["refused"]}
